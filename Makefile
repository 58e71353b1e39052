# Thin wrapper over CMake: the commands the README shows and CI runs.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build run test check unit integration asan asan-integration tsan release scale fuzz bench format clean

all: build

deps:
	@bash scripts/deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS) >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

release: deps
	cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build-release -j $(JOBS)

# The scale suite (tests/scale): long, so not part of `make test`. SCALE_ARGS go to pytest.
SCALE_ARGS ?=
scale: release
	SHALE_BIN=$(abspath build-release)/src/main/shale bash scripts/scale.sh $(SCALE_ARGS)

run: release
	bash scripts/run.sh build-release/src/main/shale

# Source checks (layering of includes, unique log ids, whole-library test links): seconds.
check:
	bash scripts/check.sh

unit: build
	bash scripts/unit.sh $(BUILD)

integration: build
	SHALE_BIN=$(abspath $(BUILD))/src/main/shale bash scripts/integration.sh

test: build
	bash scripts/test.sh $(BUILD)

asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHL_SANITIZE=address,undefined >/dev/null
	cmake --build build-asan -j $(JOBS)
	bash scripts/unit.sh build-asan

# The integration suite on the sanitizer build: a process that logs a report fails the run.
# Every process is stopped with SIGTERM at teardown, so LeakSanitizer checks it as it exits
# (tests/lsan.supp lists the third-party leaks it ignores, each with its reason).
asan-integration: asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	SHALE_BIN=$(abspath build-asan)/src/main/shale bash scripts/integration.sh

tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSHL_SANITIZE=thread >/dev/null
	cmake --build build-tsan -j $(JOBS)

fuzz: deps
	bash scripts/fuzz.sh build-fuzz

bench: release
	bash bench/run.sh build-release
	bash bench/crud.sh build-release
	bash bench/query.sh build-release
	bash bench/agg.sh build-release
	bash bench/cluster.sh build-release
	bash bench/migration.sh build-release

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-release build-asan build-tsan build-fuzz
