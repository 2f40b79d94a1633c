#!/usr/bin/env bash
# `make deb`: the Debian package holds the programs, the library and its package files, depends
# on the shared libraries the programs link, and its programs run from the unpacked tree.
# Usage: test_deb.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d /tmp/attnkit_deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

(cd "$build" && cpack -G DEB -B "$work/out" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
deb=$(ls "$work"/out/attnkit_0.2.0_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libtorch1.13 libcairo2 libsentencepiece libcpp-httplib libstdc++6 libtorch-dev libopenblas0-pthread; do
  grep -q "$lib" <<< "$depends" || fail "Depends lacks $lib"
done
dpkg-deb -c "$deb" > "$work/contents"
for f in ./usr/bin/attnkit ./usr/bin/attnkit-spm ./usr/lib/libattnkit.a \
         ./usr/include/attnkit/version.h ./usr/lib/cmake/attnkit/attnkitConfig.cmake \
         ./usr/lib/pkgconfig/attnkit.pc; do
  grep -q " $f\$" "$work/contents" || fail "the package lacks $f"
done
if grep -q "packed_gemm.h\|row_parts.h\|simd.h" "$work/contents"; then fail "a private header is packed"; fi
dpkg-deb -x "$deb" "$work/root"
"$work/root/usr/bin/attnkit" info | grep -q "^attnkit   0.2.0" || fail "attnkit info"
got=$(echo 'Open the file' | "$work/root/usr/bin/attnkit" translate --model "$src/tests/golden/tiny_model")
[ -n "$got" ] || fail "translate printed nothing"
echo "translate: $got"
echo "deb: 3 passed, 0 failed"
