#!/usr/bin/env bash
# gpu_pack.sh: download (never install) the Debian packages that `make CUDA=1` links against, for
# a GPU machine without a package registry. scripts/gpu_check.sh unpacks them there.
#   scripts/gpu_pack.sh [DIR]      default DIR: gpu_pack (ignored by git; name it in the device
#                                  tool's `carry` so it travels with the working tree)
# What and why: the runtime libraries and their -dev packages (headers, .so links) of cJSON,
# PCRE2 (8-bit), utf8proc, libyaml and OpenBLAS (OpenMP build), plus OpenBLAS's Fortran runtime
# (libgfortran5, libquadmath0) that a non-Debian image may lack, and GNU make. The compilers
# (gcc, nvcc) and libgomp come with the GPU machine's CUDA image.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-gpu_pack}
pkgs=(libcjson1 libcjson-dev libpcre2-8-0 libpcre2-dev libutf8proc2 libutf8proc-dev libyaml-0-2 libyaml-dev
      libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 make)
mkdir -p "$dest/debs"
rm -f "$dest"/debs/*.deb
cd "$dest/debs"
echo "gpu_pack: downloading ${#pkgs[@]} packages into $dest/debs" >&2
if ! apt-get download "${pkgs[@]}" >&2; then
  echo "gpu_pack: a package was not found; running apt-get update once" >&2
  apt-get update -q >&2
  apt-get download "${pkgs[@]}" >&2
fi
n=$(ls ./*.deb | wc -l)
if [ "$n" -ne "${#pkgs[@]}" ]; then
  echo "gpu_pack: expected ${#pkgs[@]} .deb files, got $n" >&2
  exit 1
fi
ls -1 ./*.deb | sed 's|^\./||' >MANIFEST
echo "gpu_pack: $n packages, $(du -sh . | cut -f1) in $dest/debs" >&2
