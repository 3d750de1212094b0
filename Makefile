# braid: `make run` and `make test` do all the set-up on a fresh machine.
BUILD_DIR ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: all bootstrap configure build run test bench fuzz format clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

configure: bootstrap
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS)

run: build
	./$(BUILD_DIR)/tools/braid-run $(BUILD_DIR)/examples/models/mlp.braid

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS) -LE slow

# The model loader's fuzzer, longer than the 20 s run in `make test`.
FUZZ_SECONDS ?= 600
fuzz: build
	bash tests/fuzz/run_fuzz.sh $(BUILD_DIR)/fuzz/build/fuzz_load $(BUILD_DIR)/fuzz/seeds \
		$(BUILD_DIR)/fuzz/long $(FUZZ_SECONDS)

bench: build
	./$(BUILD_DIR)/bench/bench_dispatch --json
	./$(BUILD_DIR)/bench/bench_dispatch --json --comp-node cpu:default
	./$(BUILD_DIR)/bench/bench_memplan --json
	@if [ -x ./$(BUILD_DIR)/bench/bench_cuda ]; then ./$(BUILD_DIR)/bench/bench_cuda; fi

format:
	@git ls-files '*.h' '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
