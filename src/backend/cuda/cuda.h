// cuda.h: what the CUDA backend offers beyond the op table (device name, ceilings measured in
// the same process for benchmarks). C linkage; only built with STILL_CUDA.
#ifndef STILL_BACKEND_CUDA_H
#define STILL_BACKEND_CUDA_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// "NVIDIA H200 (132 SMs, 140 GiB)" into buf.
const char *backend_cuda_device_name(Backend *be, char *buf, size_t n);
// The cudaStream_t every op of be runs on (collectives on other streams order themselves after
// it with events: src/dist/dist_nccl.c).
void *backend_cuda_stream(Backend *be);
// "bf16" or "fp32": the operand dtype of the backend's GEMMs (STILL_CUDA_GEMM).
const char *backend_cuda_gemm_dtype(Backend *be);
// "mma bf16" (tensor-core attention) or "fp32" (STILL_CUDA_ATTN).
const char *backend_cuda_attention_kind(Backend *be);
// TFLOP/s of cuBLAS alone on a bf16 (M,K) x (N,K)^T product, fp32 accumulate, over reps runs.
double backend_cuda_gemm_tflops(Backend *be, int M, int N, int K, int reps);
// GB/s of a device-to-device copy of `bytes`, counting bytes read plus bytes written.
double backend_cuda_copy_gbs(Backend *be, size_t bytes, int reps);

#ifdef __cplusplus
}
#endif

#endif
