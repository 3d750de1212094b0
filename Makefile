# braid: `make run` and `make test` do all the set-up on a fresh machine.
BUILD_DIR ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: all bootstrap configure build run test bench format clean

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

bench: build
	./$(BUILD_DIR)/bench/bench_dispatch --json
	./$(BUILD_DIR)/bench/bench_dispatch --json --comp-node cpu:default

format:
	@git ls-files '*.h' '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
