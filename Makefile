# Thin front over CMake + Ninja.  `make demo` and `make test` are the two commands a newcomer needs.
BUILD       ?= build
CMAKE_FLAGS ?=
CTEST_J     ?= 2

.PHONY: all deps build test test-fast demo asan fuzz fuzz-short bench clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j$(CTEST_J)

# unit + parity tests without the slow and npm ones (labels: CMakeLists.txt "tests"); under a minute
test-fast: build
	@ctest --test-dir $(BUILD) --output-on-failure -j$(CTEST_J) -L 'unit|parity' -LE 'slow|network'

demo: build
	@scripts/demo.sh $(BUILD)

# Same tests under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXTN_SANITIZE=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build build-asan
	@ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j$(CTEST_J)

# libFuzzer targets (clang).  FUZZ_SECONDS per target; see README "Fuzzing".
FUZZ_SECONDS ?= 600
fuzz: deps
	@CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEXTN_FUZZ=ON >/dev/null
	@cmake --build build-fuzz
	@scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=60

bench: build
	@echo "micro-benchmarks are in $(BUILD)/bench_*; see docs/BENCHMARKS.md"

clean:
	rm -rf build build-asan build-fuzz
