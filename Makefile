# The two commands a newcomer runs: `make demo` and `make test`.
# Both install what is missing, build, then run.

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= 2
# ccache needs these to reuse objects built with a precompiled header.
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime

.PHONY: all setup configure build demo test test-sanitize test-tsan fuzz bench performance deb format clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

configure: setup $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	BUILD_DIR=$(BUILD_DIR) bash scripts/demo.sh

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build
# directory (docs/ROBUSTNESS.md). Slower: about three times the time of `make test`.
SANITIZE_DIR ?= build-sanitize
# The packaging tests build other programs against the installed library, which under the
# sanitizers would need their flags too: they test the packaging, and run in `make test`.
SANITIZE_SKIP ?= install_and_use_from_another_project|debian_package|public_headers_stand_alone
test-sanitize: setup
	cmake -S . -B $(SANITIZE_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNKIT_SANITIZE=ON \
	  -DATTNKIT_BUILD_BENCH=OFF
	cmake --build $(SANITIZE_DIR) -j$(JOBS)
	ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/fuzz/lsan.supp:print_suppressions=0 \
	  ctest --test-dir $(SANITIZE_DIR) --output-on-failure -j$(JOBS) -E '$(SANITIZE_SKIP)' \
	  $(CTEST_ARGS)

# The test program under ThreadSanitizer, in its own build directory (docs/ROBUSTNESS.md): its
# suites run the kernels' pool, the training lanes and their helpers, and every kernel on two and
# three threads. LibTorch is not instrumented; tests/tsan.supp holds the one race reported inside it.
TSAN_DIR ?= build-tsan
test-tsan: setup
	cmake -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNKIT_SANITIZE_THREAD=ON \
	  -DATTNKIT_BUILD_BENCH=OFF
	cmake --build $(TSAN_DIR) -j$(JOBS) --target attnkit_tests
	TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  $(TSAN_DIR)/tests/attnkit_tests --gtest_brief=1 $(GTEST_ARGS)

# Each libFuzzer target (tests/fuzz) for FUZZ_SECONDS, under ASan + UBSan, built with clang in
# its own directory; a summary per target, findings in $(FUZZ_DIR)/findings/ (docs/ROBUSTNESS.md).
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz:
	@bash scripts/setup.sh --fuzz
	cmake -S . -B $(FUZZ_DIR) -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DATTNKIT_FUZZ=ON
	cmake --build $(FUZZ_DIR) -j$(JOBS)
	bash scripts/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# A Debian package of the programs, the library and its CMake and pkg-config files, in $(BUILD_DIR)/.
deb: build
	cd $(BUILD_DIR) && cpack -G DEB

bench: build
	/usr/bin/python3 bench/compare_pytorch.py --build-dir $(BUILD_DIR)

# Twice on AVX-512 CPUs: with Debian's defaults, then with OpenBLAS told to use its AVX-512
# kernels on both sides (it runs AVX2 ones on CPUs it does not know, as Zen 5).
performance: build
	/usr/bin/python3 bench/performance.py --build-dir $(BUILD_DIR)
	if grep -qw avx512f /proc/cpuinfo; then \
	  /usr/bin/python3 bench/performance.py --build-dir $(BUILD_DIR) --openblas-coretype SkylakeX; fi

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD_DIR)
