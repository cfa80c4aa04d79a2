#!/usr/bin/env bash
# deps.sh: install the Debian packages still needs, if missing. Announced; apt-get update runs
# once, only when a package cannot be found; sudo when not root. NO_DEPS=1 skips everything.
#   scripts/deps.sh build        what `make` and `make test` need (g++, python3: the CUDA emulator;
#                                libedit: line editing in still chat; tmux: its terminal test;
#                                libmicrohttpd: still serve)
#   scripts/deps.sh refs         + what `make refs` needs (Debian's PyTorch, numpy, Jinja2, npm)
#   scripts/deps.sh fuzz         + what `make fuzz` needs (clang with libFuzzer, libomp, python3)
set -euo pipefail
[ "${NO_DEPS:-0}" = 1 ] && exit 0
what=${1:-build}
pkgs=(gcc g++ python3 make pkg-config libopenblas-openmp-dev libcjson-dev libpcre2-dev libutf8proc-dev libyaml-dev libopenmpi-dev openmpi-bin
      libedit-dev tmux libmicrohttpd-dev)
case "$what" in
  build) ;;

  refs) pkgs+=(python3 python3-torch python3-numpy python3-jinja2)
        # a Node.js that ships its own npm (e.g. nodesource's nodejs) conflicts with Debian's npm package
        command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm) ;;
  fuzz) pkgs+=(clang libclang-rt-14-dev libomp-dev python3) ;;
  *) echo "deps.sh: unknown set '$what'" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "still: installing Debian packages: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
  echo "still: package not found locally; running apt-get update once" >&2
  $SUDO apt-get update -q >&2
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
