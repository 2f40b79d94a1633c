#!/usr/bin/env bash
# attnkit from another program: `cmake --install` into a temporary prefix, then the two example
# projects built against it with find_package(attnkit 0.2) and run, one built with pkg-config
# instead, and a request for another minor version refused.
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d /tmp/attnkit_install.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$work/install.log"

# The public headers and nothing else: the installed tree equals include/attnkit plus version.h.
(cd "$src/include" && find attnkit -name '*.h' | sort) > "$work/want"
echo attnkit/version.h >> "$work/want"
(cd "$prefix/include" && find attnkit -type f | sort) > "$work/got"
sort -o "$work/want" "$work/want"
diff "$work/want" "$work/got" || fail "installed headers differ from include/attnkit"
for f in bin/attnkit bin/attnkit-spm lib/libattnkit.a lib/cmake/attnkit/attnkitConfig.cmake \
         lib/cmake/attnkit/attnkitConfigVersion.cmake lib/pkgconfig/attnkit.pc; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
"$prefix/bin/attnkit" --version | grep -qx "attnkit 0.2.0" || fail "attnkit --version"

configure() {  # project, build dir, extra args
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "${@:3}" \
    > "$2.log" 2>&1
}

# The notes' example through find_package.
configure "$src/examples/notes_attn" "$work/notes" || { cat "$work/notes.log"; fail "configure notes_attn"; }
cmake --build "$work/notes" -j2 > "$work/notes_build.log" 2>&1 || { cat "$work/notes_build.log"; fail "build notes_attn"; }
out=$("$work/notes/notes_attn")
echo "$out"
grep -q "soft weights \[0.5761, 0.2119, 0.2119\]" <<< "$out" || fail "notes_attn: soft weights"
grep -q "hard weights \[1.0000, 0.0000, 0.0000\]" <<< "$out" || fail "notes_attn: hard weights"
grep -q "Attn output \[2, 1, 5\], weights \[2, 1, 5\]" <<< "$out" || fail "notes_attn: output size"

# The translator example: the same translations as `attnkit translate`.
configure "$src/examples/translate" "$work/translate" || { cat "$work/translate.log"; fail "configure translate"; }
cmake --build "$work/translate" -j2 > "$work/translate_build.log" 2>&1 || { cat "$work/translate_build.log"; fail "build translate"; }
printf 'Open the file\nSave the document as a new file\n' > "$work/in.txt"
model=$src/tests/golden/tiny_model
got=$("$work/translate/translate" "$model" < "$work/in.txt")
want=$("$prefix/bin/attnkit" translate --model "$model" < "$work/in.txt")
echo "$got"
[ -n "$got" ] && [ "$got" = "$want" ] || fail "translate example: '$got' != attnkit translate's '$want'"

# pkg-config users: the same notes example, compiled by hand.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(pkg-config --modversion attnkit)" = 0.2.0 ] || fail "pkg-config --modversion"
g++ -O1 "$src/examples/notes_attn/main.cpp" -o "$work/notes_pc" $(pkg-config --cflags --libs attnkit) \
  || fail "building with pkg-config's flags"
[ "$("$work/notes_pc")" = "$out" ] || fail "the pkg-config build prints something else"

# The version rule: 0.x releases are compatible within a minor version only.
mkdir -p "$work/old"
cat > "$work/old/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.18)
project(old LANGUAGES CXX)
find_package(attnkit 0.1 REQUIRED)
CMAKE
if configure "$work/old" "$work/old_build"; then fail "find_package(attnkit 0.1) accepted 0.2.0"; fi
grep -q "version: 0.2.0" "$work/old_build.log" || fail "no version message"
echo "install: 4 passed, 0 failed"
