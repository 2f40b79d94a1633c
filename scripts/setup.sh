#!/usr/bin/env bash
# Installs the Debian 12 packages attnkit needs, and only those that are missing.
# Safe to run again: it does nothing when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config
  libtorch-dev            # LibTorch 1.13 (find_package(Torch))
  libopenblas0-pthread    # fast BLAS; the reference BLAS makes matmul ~30x slower
  libgtest-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev    # subword tokenizer
  python3-torch           # PyTorch reference for golden fixtures and benchmarks
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# OpenBLAS must be the live libblas.so.3, not the reference implementation.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup: warning: libblas.so.3 resolves to $blas, not OpenBLAS;" \
          "run: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2 ;;
esac
