# braid: `make run` and `make test` do all the set-up on a fresh machine.
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
JOBS ?= 2
CMAKE_FLAGS ?=
# ctest labels `make test` leaves out (a regex): the long runs behind `slow`.
TEST_EXCLUDE ?= slow
# What the sanitizer builds leave out: CUDA (no GPU to run it), the benchmarks, the
# libFuzzer build (already sanitized, see tests/fuzz) and the Python module (an instrumented
# extension cannot load into an uninstrumented interpreter).
SANITIZER_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBRAID_WITH_CUDA=OFF -DBRAID_BUILD_BENCH=OFF \
	-DBRAID_BUILD_FUZZ=OFF -DBRAID_BUILD_PYTHON=OFF
SANITIZER_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/scripts/tsan.supp

.PHONY: all bootstrap configure build run test test-isa test-smoke check-fresh fuzz-build fuzz bench bench-vs-ort bench-real-models bench-memory bench-serve check-asan check-tsan format \
	clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

configure: bootstrap
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null

# Library, tools, examples, benchmarks and tests (not the libFuzzer build: fuzz-build).
build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS)

# Builds only what it runs: braid-run and the example models.
run: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target braid-run example_models
	./$(BUILD_DIR)/tools/braid-run $(BUILD_DIR)/examples/models/mlp.braid

# The libFuzzer targets: a clang build of their own (tests/fuzz), made only when asked for.
fuzz-build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target braid_fuzz

test: build fuzz-build
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS) -LE '$(TEST_EXCLUDE)'

# The suite with braid's and the kernel libraries' instruction sets capped to AVX2 (and FMA), as
# on a CPU without AVX-512: the kernels' AVX2 paths and oneDNN's AVX2 JIT kernels run instead of
# the AVX-512 ones (base/cpu_isa.h). `make test-isa ISA=scalar` caps braid's kernels to their
# portable loops and oneDNN to SSE4.1.
ISA ?= avx2
ISA_ENV_avx2 = BRAID_MAX_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell
ISA_ENV_scalar = BRAID_MAX_CPU_ISA=scalar ONEDNN_MAX_CPU_ISA=SSE41 OPENBLAS_CORETYPE=Nehalem
test-isa: build
	cd $(BUILD_DIR) && $(ISA_ENV_$(ISA)) ctest --output-on-failure -j$(JOBS) -LE 'slow|fuzz'

# The embedding API's suite alone (label embed), with only what it needs built: the short test
# half of the clean-room check in CI.
test-smoke: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target braid_tests_embed braid_c_api_test braid-run \
		example_models
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS) -L embed -LE slow

# The clean-room check (scripts/check_fresh_machine.sh): a minimal Debian 12 root gets only make,
# git and ca-certificates, then runs `make run` and `make test` from a clone of HEAD.
check-fresh:
	bash scripts/check_fresh_machine.sh

# The fuzzers (model loader, rendezvous protocol, ONNX importer), each longer than the 20 s run in `make test`.
FUZZ_SECONDS ?= 600
fuzz: fuzz-build
	bash tests/fuzz/run_fuzz.sh $(BUILD_DIR)/fuzz/build/fuzz_load $(BUILD_DIR)/fuzz/seeds \
		$(BUILD_DIR)/fuzz/long $(FUZZ_SECONDS)
	bash tests/fuzz/run_fuzz.sh $(BUILD_DIR)/fuzz/build/fuzz_rendezvous \
		$(BUILD_DIR)/fuzz/rendezvous_seeds $(BUILD_DIR)/fuzz/rendezvous_long $(FUZZ_SECONDS)
	bash tests/fuzz/make_onnx_seeds.sh /usr/share/libonnx-testdata/data $(BUILD_DIR)/fuzz/onnx_seeds
	bash tests/fuzz/run_fuzz.sh $(BUILD_DIR)/fuzz/build/fuzz_onnx $(BUILD_DIR)/fuzz/onnx_seeds \
		$(BUILD_DIR)/fuzz/onnx_long $(FUZZ_SECONDS)

# The ctest suite built with AddressSanitizer + UndefinedBehaviorSanitizer, in its own directory.
# It leaves out what `make test` already covers and a sanitizer adds nothing to: the format
# check (lint), the operator suite's reruns at capped instruction sets (isa; the same code
# under ASan as the uncapped run, except for the kernels' inner loops), and the real-model
# suite (models: the ONNX import and kernels it runs are under ASan in the conformance run).
ASAN_EXCLUDE ?= slow|fuzz|lint|isa|models
check-asan: bootstrap
	@cmake -S . -B $(ASAN_DIR) $(SANITIZER_FLAGS) -DBRAID_SANITIZE=address $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_DIR) -j$(JOBS)
	cd $(ASAN_DIR) && $(SANITIZER_ENV) ctest --output-on-failure -j$(JOBS) -LE '$(ASAN_EXCLUDE)'

# ThreadSanitizer on the suites whose tests run threads at once: graph execution, comm and
# the embedding API with its 8-thread stress test, parallel (redistribution over ranks as
# threads), and braid-serve (HTTP threads, batch workers) (CONCURRENCY_TESTS, a ctest name filter).
CONCURRENCY_TESTS ?= ^(graph|comm|embed|parallel|serve)\.
check-tsan: bootstrap
	@cmake -S . -B $(TSAN_DIR) $(SANITIZER_FLAGS) -DBRAID_SANITIZE=thread $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(TSAN_DIR) -j$(JOBS)
	cd $(TSAN_DIR) && $(SANITIZER_ENV) ctest --output-on-failure -j$(JOBS) -R '$(CONCURRENCY_TESTS)' -LE slow

bench: build
	./$(BUILD_DIR)/bench/bench_dispatch --json
	./$(BUILD_DIR)/bench/bench_dispatch --json --comp-node cpu:default
	./$(BUILD_DIR)/bench/bench_memplan --json
	./$(BUILD_DIR)/bench/bench_control_flow --json
	@if [ -x ./$(BUILD_DIR)/bench/bench_cuda ]; then ./$(BUILD_DIR)/bench/bench_cuda; fi

# braid against ONNX Runtime on the same ONNX files (installs onnxruntime-node with npm into
# the build folder on first use; needs the npm registry).
bench-vs-ort: build
	bash bench/vs_ort/run.sh $(BUILD_DIR)

# The same on the real-model suite's models at 1 and 2 threads (the suite fetches the models,
# writes their inputs and installs onnxruntime-node first; needs the npm registry).
bench-real-models: build
	bash tests/models/run.sh $(BUILD_DIR) > /dev/null
	node bench/vs_ort/real_models.js $(BUILD_DIR)

# What a braid-run process holds above its baseline against what each run needs: the example
# models, and the real-model suite's where tests/models/run.sh fetched them (docs/performance.md).
bench-memory: build
	bash bench/memory_overhead.sh $(BUILD_DIR)

# braid-serve under wrk: the example mlp and mlp_wide, batch-1 requests, concurrency 1/8/64,
# batching off/on (docs/performance.md). Builds only what it runs.
bench-serve: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target braid-serve braid-run example_models
	bash bench/bench_serve.sh $(BUILD_DIR) 5 json mlp
	bash bench/bench_serve.sh $(BUILD_DIR) 5 json mlp_wide

format:
	@git ls-files '*.h' '*.cpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR)
