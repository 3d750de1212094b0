/* The C API, from C: load, concurrent runs from pthreads, cancellation, and every error path.
 *
 *   c_api_test <models dir>            the checks below
 *   c_api_test <models dir> stress T N T threads x N runs of transformer_block.braid, each
 *                                      bit-identical to a single-threaded run
 */
#include "braid/braid_c.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            ++failures;                                                                            \
        }                                                                                          \
    } while (0)

/* Expects `st` to be a status of `code` whose message contains `part`; frees it. */
static void expect_status(braid_status* st, braid_code code, const char* part, int line) {
    const char* msg = braid_status_message(st);
    if (braid_status_code(st) != code || !strstr(msg, part)) {
        fprintf(stderr, "line %d: expected %s containing \"%s\", got %s: %s\n", line,
                braid_code_name(code), part, braid_code_name(braid_status_code(st)), msg);
        ++failures;
    }
    braid_status_free(st);
}
#define EXPECT_STATUS(call, code, part) expect_status((call), (code), (part), __LINE__)

static void ok(braid_status* st, int line) {
    if (st) {
        fprintf(stderr, "line %d: unexpected %s: %s\n", line,
                braid_code_name(braid_status_code(st)), braid_status_message(st));
        ++failures;
        braid_status_free(st);
    }
}
#define OK(call) ok((call), __LINE__)

static char models_dir[1024];

static void model_path(char* out, size_t size, const char* file) {
    snprintf(out, size, "%s/%s", models_dir, file);
}

static void fill(float* x, size_t n, unsigned seed) {
    size_t i;
    for (i = 0; i < n; ++i) {
        seed = seed * 1103515245u + 12345u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

/* ---------------------------------------------------------------- concurrent runs */
typedef struct {
    braid_model* model;
    const char* out_name;
    const float* x;
    int64_t shape[2];
    const float* expected;
    size_t expected_bytes;
    int runs;
    int mismatches;
    int errors;
} worker_arg;

static void* worker(void* p) {
    worker_arg* a = (worker_arg*)p;
    braid_context* ctx = NULL;
    int r;
    if (braid_context_create(a->model, &ctx)) {
        a->errors++;
        return NULL;
    }
    if (braid_context_set_input(ctx, "x", BRAID_FLOAT32, a->shape, 2, a->x)) a->errors++;
    for (r = 0; r < a->runs; ++r) {
        const void* y = NULL;
        size_t bytes = 0;
        braid_status* st = braid_context_run(ctx, NULL);
        if (st) {
            a->errors++;
            braid_status_free(st);
            continue;
        }
        st = braid_context_output(ctx, a->out_name, &y, &bytes);
        if (st) {
            a->errors++;
            braid_status_free(st);
            continue;
        }
        if (bytes != a->expected_bytes || memcmp(y, a->expected, bytes) != 0) a->mismatches++;
    }
    braid_context_destroy(ctx);
    return NULL;
}

/* Runs `file` once on one thread, then `threads` x `runs` concurrently; all must agree. */
static void concurrent_runs(const char* file, int threads, int runs) {
    char path[1200];
    braid_model* model = NULL;
    braid_context* ctx = NULL;
    int64_t shape[8];
    size_t ndim = 0, n = 1, i, bytes = 0;
    const char* out_name = NULL;
    const void* y = NULL;
    float *x, *expected;
    pthread_t tids[64];
    worker_arg args[64];
    int t, mismatches = 0, errors = 0;

    model_path(path, sizeof path, file);
    OK(braid_model_load_file(path, &model));
    if (!model) return;
    OK(braid_model_input_info(model, 0, NULL, NULL, shape, 8, &ndim));
    for (i = 0; i < ndim; ++i) {
        if (shape[i] < 0) shape[i] = 128; /* an open dim: the examples' default size */
        n *= (size_t)shape[i];
    }
    OK(braid_model_output_info(model, 0, &out_name, NULL, NULL, 0, NULL));
    x = (float*)malloc(n * sizeof(float));
    fill(x, n, 42);
    OK(braid_context_create(model, &ctx));
    OK(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape, ndim, x));
    OK(braid_context_run(ctx, NULL));
    OK(braid_context_output(ctx, out_name, &y, &bytes));
    expected = (float*)malloc(bytes);
    memcpy(expected, y, bytes);
    OK(braid_context_destroy(ctx));

    for (t = 0; t < threads; ++t) {
        args[t].model = model;
        args[t].out_name = out_name;
        args[t].x = x;
        args[t].shape[0] = shape[0];
        args[t].shape[1] = shape[1];
        args[t].expected = expected;
        args[t].expected_bytes = bytes;
        args[t].runs = runs;
        args[t].mismatches = 0;
        args[t].errors = 0;
        pthread_create(&tids[t], NULL, worker, &args[t]);
    }
    for (t = 0; t < threads; ++t) {
        pthread_join(tids[t], NULL);
        mismatches += args[t].mismatches;
        errors += args[t].errors;
    }
    printf("%s: %d threads x %d runs: %d mismatches, %d errors\n", file, threads, runs, mismatches,
           errors);
    CHECK(mismatches == 0);
    CHECK(errors == 0);
    OK(braid_model_release(model));
    free(x);
    free(expected);
}

/* ---------------------------------------------------------------- cancellation */
typedef struct {
    braid_context* ctx;
    braid_cancel_token* token;
    braid_code code;
} cancel_arg;

static void* run_until_cancelled(void* p) {
    cancel_arg* a = (cancel_arg*)p;
    braid_run_options opt;
    braid_status* st;
    memset(&opt, 0, sizeof opt);
    opt.cancel = a->token;
    st = braid_context_run(a->ctx, &opt);
    a->code = braid_status_code(st);
    braid_status_free(st);
    return NULL;
}

static void cancellation(void) {
    char path[1200];
    braid_model* model = NULL;
    braid_context* ctx = NULL;
    braid_cancel_token* token = NULL;
    braid_run_options opt;
    int64_t shape[2] = {128, 256};
    float* x = (float*)malloc(128 * 256 * sizeof(float));
    pthread_t tid;
    cancel_arg arg;
    int i;

    fill(x, 128 * 256, 7);
    model_path(path, sizeof path, "transformer_block.braid");
    OK(braid_model_load_file(path, &model));
    OK(braid_context_create(model, &ctx));
    OK(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape, 2, x));
    OK(braid_cancel_token_create(&token));

    /* Cancelled before it starts. */
    memset(&opt, 0, sizeof opt);
    opt.cancel = token;
    OK(braid_cancel_token_cancel(token));
    EXPECT_STATUS(braid_context_run(ctx, &opt), BRAID_CANCELLED, "cancelled");
    OK(braid_cancel_token_reset(token));
    OK(braid_context_run(ctx, &opt));

    /* Cancelled from another thread while it runs (or right before: either way CANCELLED). */
    for (i = 0; i < 5; ++i) {
        arg.ctx = ctx;
        arg.token = token;
        arg.code = BRAID_OK;
        pthread_create(&tid, NULL, run_until_cancelled, &arg);
        OK(braid_cancel_token_cancel(token));
        pthread_join(tid, NULL);
        CHECK(arg.code == BRAID_CANCELLED || arg.code == BRAID_OK);
        OK(braid_cancel_token_reset(token));
    }

    /* A deadline already past. */
    memset(&opt, 0, sizeof opt);
    opt.timeout_us = 1;
    EXPECT_STATUS(braid_context_run(ctx, &opt), BRAID_DEADLINE_EXCEEDED, "deadline");
    OK(braid_context_run(ctx, NULL)); /* still usable */

    OK(braid_cancel_token_destroy(token));
    OK(braid_context_destroy(ctx));
    OK(braid_model_release(model));
    free(x);
}

/* ---------------------------------------------------------------- errors */
static void error_paths(void) {
    char path[1200];
    braid_model* model = NULL;
    braid_context* ctx = NULL;
    braid_context* dead = NULL;
    int64_t shape[2] = {4, 784}, bad_shape[2] = {4, 783};
    float* x = (float*)calloc(4 * 784, sizeof(float));
    int32_t xi[4] = {0};
    const void* y = NULL;
    size_t n = 0;
    float small[2];
    FILE* f;

    CHECK(braid_status_code(NULL) == BRAID_OK);
    CHECK(strcmp(braid_status_message(NULL), "") == 0);
    CHECK(braid_abi_version() == BRAID_ABI_VERSION);
    CHECK(strlen(braid_version()) >= 5);
    CHECK(strcmp(braid_code_name(BRAID_CANCELLED), "CANCELLED") == 0);

    EXPECT_STATUS(braid_model_load_file("/nonexistent/m.braid", &model), BRAID_NOT_FOUND,
                  "/nonexistent/m.braid");
    CHECK(model == NULL);
    EXPECT_STATUS(braid_model_load_file(NULL, &model), BRAID_INVALID_ARGUMENT, "path is null");
    EXPECT_STATUS(braid_model_load_buffer("garbage!", 8, 1, &model), BRAID_INVALID_MODEL,
                  "<buffer>");
    /* A file that fails verification. */
    f = fopen("c_api_test_bad.braid", "wb");
    fputs("not a model at all, just text", f);
    fclose(f);
    EXPECT_STATUS(braid_model_load_file("c_api_test_bad.braid", &model), BRAID_INVALID_MODEL,
                  "c_api_test_bad.braid");
    remove("c_api_test_bad.braid");

    model_path(path, sizeof path, "mlp.braid");
    OK(braid_model_load_file(path, &model));
    OK(braid_model_num_inputs(model, &n));
    CHECK(n == 1);
    EXPECT_STATUS(braid_model_input_info(model, 5, NULL, NULL, NULL, 0, NULL),
                  BRAID_INVALID_ARGUMENT, "index 5 is out of range: the model has 1 inputs");
    EXPECT_STATUS(braid_model_num_inputs(NULL, &n), BRAID_INVALID_ARGUMENT, "the model is null");
    EXPECT_STATUS(braid_context_create(NULL, &ctx), BRAID_INVALID_ARGUMENT, "the model is null");
    OK(braid_context_create(model, &ctx));

    EXPECT_STATUS(braid_context_run(ctx, NULL), BRAID_FAILED_PRECONDITION,
                  "input \"x\" is not bound");
    EXPECT_STATUS(braid_context_output(ctx, "logits", &y, &n), BRAID_FAILED_PRECONDITION,
                  "no successful run");
    EXPECT_STATUS(braid_context_set_input(ctx, "nope", BRAID_FLOAT32, shape, 2, x),
                  BRAID_INVALID_ARGUMENT, "no input named \"nope\" (inputs: x)");
    EXPECT_STATUS(braid_context_set_input(ctx, "x", BRAID_INT32, shape, 2, xi),
                  BRAID_INVALID_ARGUMENT, "dtype int32 given; the model expects float32");
    EXPECT_STATUS(braid_context_set_input(ctx, "x", BRAID_FLOAT32, bad_shape, 2, x),
                  BRAID_INVALID_ARGUMENT, "shape {4,783} given; the model expects {-1,784}");
    EXPECT_STATUS(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape, 2, NULL),
                  BRAID_INVALID_ARGUMENT, "data is null");
    EXPECT_STATUS(braid_context_set_input(ctx, "x", (braid_dtype)99, shape, 2, x),
                  BRAID_INVALID_ARGUMENT, "dtype value 99");
    EXPECT_STATUS(braid_context_set_input(ctx, NULL, BRAID_FLOAT32, shape, 2, x),
                  BRAID_INVALID_ARGUMENT, "name is null");
    OK(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape, 2, x));
    OK(braid_context_output_shape(ctx, "logits", bad_shape, 2, &n));
    CHECK(n == 2 && bad_shape[0] == 4 && bad_shape[1] == 10);
    EXPECT_STATUS(braid_context_bind_output(ctx, "nope", small, sizeof small),
                  BRAID_INVALID_ARGUMENT, "no output named \"nope\" (outputs: logits)");
    OK(braid_context_bind_output(ctx, "logits", small, sizeof small));
    EXPECT_STATUS(braid_context_run(ctx, NULL), BRAID_INVALID_ARGUMENT,
                  "the bound buffer has 8 bytes");
    OK(braid_context_bind_output(ctx, "logits", NULL, 0));
    OK(braid_context_run(ctx, NULL));
    OK(braid_context_output(ctx, "logits", &y, &n));
    CHECK(n == 4 * 10 * sizeof(float));

    /* A destroyed context is refused, also when a new one was created since. */
    dead = ctx;
    OK(braid_context_destroy(ctx));
    OK(braid_context_create(model, &ctx));
    EXPECT_STATUS(braid_context_run(dead, NULL), BRAID_INVALID_ARGUMENT, "is not live");
    EXPECT_STATUS(braid_context_destroy(dead), BRAID_INVALID_ARGUMENT, "is not live");
    OK(braid_context_destroy(ctx));
    /* Contexts keep a released model alive. */
    OK(braid_context_create(model, &ctx));
    OK(braid_model_release(model));
    EXPECT_STATUS(braid_model_release(model), BRAID_INVALID_ARGUMENT, "is not live");
    OK(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape, 2, x));
    OK(braid_context_run(ctx, NULL));
    OK(braid_context_destroy(ctx));
    free(x);
}

/* ---------------------------------------------------------------- deterministic mode */
/* With braid_run_options.deterministic, row 2 of a batch of 7 is the same bits as run alone. */
static void deterministic_rows(void) {
    char path[1200];
    braid_model* model = NULL;
    braid_context* ctx = NULL;
    braid_run_options opt;
    float x[7 * 784];
    float batched[10];
    const void* y = NULL;
    size_t bytes = 0;
    int64_t shape7[2] = {7, 784}, shape1[2] = {1, 784};
    memset(&opt, 0, sizeof opt);
    opt.deterministic = 1;
    fill(x, 7 * 784, 11);
    model_path(path, sizeof path, "mlp.braid");
    OK(braid_model_load_file(path, &model));
    if (!model) return;
    OK(braid_context_create(model, &ctx));
    OK(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape7, 2, x));
    OK(braid_context_run(ctx, &opt));
    OK(braid_context_output(ctx, "logits", &y, &bytes));
    if (bytes == 7 * 10 * sizeof(float)) memcpy(batched, (const float*)y + 2 * 10, sizeof batched);
    OK(braid_context_set_input(ctx, "x", BRAID_FLOAT32, shape1, 2, x + 2 * 784));
    OK(braid_context_run(ctx, &opt));
    OK(braid_context_output(ctx, "logits", &y, &bytes));
    if (bytes != sizeof batched || memcmp(y, batched, sizeof batched) != 0) {
        fprintf(stderr, "line %d: deterministic run: row 2 alone differs from row 2 of 7\n",
                __LINE__);
        failures++;
    }
    OK(braid_context_destroy(ctx));
    OK(braid_model_release(model));
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <models dir> [stress THREADS RUNS]\n", argv[0]);
        return 2;
    }
    snprintf(models_dir, sizeof models_dir, "%s", argv[1]);
    if (argc >= 5 && strcmp(argv[2], "stress") == 0) {
        int threads = atoi(argv[3]), runs = atoi(argv[4]);
        if (threads < 1 || threads > 64 || runs < 1) return 2;
        concurrent_runs("transformer_block.braid", threads, runs);
    } else {
        error_paths();
        cancellation();
        deterministic_rows();
        concurrent_runs("mlp.braid", 4, 20);
    }
    if (failures)
        fprintf(stderr, "%d checks failed\n", failures);
    else
        printf("all checks passed\n");
    return failures ? 1 : 0;
}
