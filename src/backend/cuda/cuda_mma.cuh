// cuda_mma.cuh: the warp-level bf16 tensor-core product the attention kernels are built on
// (mma.sync m16n8k16, sm_80 and newer) and the packing of bf16 pairs into its 32-bit registers.
//
// D (16x8, fp32) = A (16x16, bf16, row) B (16x8, bf16, col) + C (16x8, fp32), one warp. Lane
// l = 4g + q (g = l >> 2, q = l & 3) holds, each register two bf16 with the lower index in the
// lower 16 bits (PTX ISA, "Matrix fragments for mma.m16n8k16"):
//   a[0] = A[g][2q..2q+1]    a[1] = A[g+8][2q..2q+1]    a[2] = A[g][2q+8..]    a[3] = A[g+8][2q+8..]
//   b[0] = B[2q..2q+1][g]    b[1] = B[2q+8..2q+9][g]
//   c[0], c[1] = C[g][2q], C[g][2q+1]      c[2], c[3] = C[g+8][2q], C[g+8][2q+1]
// So a C/D fragment of two adjacent 8-column tiles, rounded to bf16 pairs, is the A fragment of
// the 16 columns they cover (the attention kernels turn scores into the next product's A so).
// The CUDA emulator (tests/cuemu) runs this instruction with exactly this layout.
#ifndef STILL_CUDA_MMA_CUH
#define STILL_CUDA_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

// d = a b + c (d may be c)
__device__ inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
}

__device__ inline uint32_t bf16_bits(float x) { return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x)); }
// (lo, hi) rounded to bf16: lo in the lower 16 bits
__device__ inline uint32_t pack_bf16x2(float lo, float hi) { return bf16_bits(lo) | bf16_bits(hi) << 16; }
// two bf16 halves (lower 16 bits of each) into one register
__device__ inline uint32_t pack_halves(uint32_t lo, uint32_t hi) { return (lo & 0xffffu) | hi << 16; }

#endif
