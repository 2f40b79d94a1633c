#!/usr/bin/env bash
# Installs the Debian 12 packages attnkit needs, and only those that are missing.
# Safe to run again: it does nothing when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ccache pkg-config
  libtorch-dev            # LibTorch 1.13 (find_package(Torch))
  libopenblas0-pthread    # fast BLAS; the reference BLAS makes matmul ~30x slower
  libblas-dev             # the sgemm_ the fused kernels link against
  libgtest-dev libbenchmark-dev
  libdnnl-dev             # oneDNN, measured against the packed products (bench/bench_onednn.cpp)
  libcli11-dev nlohmann-json3-dev
  libsentencepiece-dev    # subword tokenizer
  libcairo2-dev fonts-noto-cjk   # heatmaps and charts, with CJK labels
  libcpp-httplib-dev      # attnkit serve
  libicu-dev              # Unicode categories and case mapping (sacreBLEU's intl, lowercase)
  libgloo-dev             # torch::distributed (c10d ProcessGroupGloo) for --nproc
  chromium                # the browser test of the web page
  python3-torch           # PyTorch reference for golden fixtures and benchmarks
  python3-jsonschema      # the HTTP API tests check real responses against web/openapi.json
  gettext python3-polib   # po translate's tests: msgfmt --check, and an independent .po reader
)
# `make fuzz` (scripts/setup.sh --fuzz): clang and libFuzzer, with its sanitizer runtimes.
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-16 libfuzzer-16-dev libclang-rt-16-dev time)
fi

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

# The browser test drives Debian's chromium with playwright-core from npm (no browser download).
if [ -f tests/browser/package-lock.json ] && [ ! -d tests/browser/node_modules/playwright-core ]; then
  command -v npm >/dev/null || { echo "setup: npm is needed for the browser test" >&2; exit 1; }
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi

# OpenBLAS must be the live libblas.so.3, not the reference implementation.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup: warning: libblas.so.3 resolves to $blas, not OpenBLAS;" \
          "run: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2 ;;
esac
