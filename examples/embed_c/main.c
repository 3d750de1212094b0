/* A small service on braid's C API: one model, four worker threads, each with its own context,
 * serving requests on random float32 inputs. One request is cancelled by another thread.
 *
 *     embed_c MODEL [REQUESTS_PER_THREAD]
 *
 * Exits 0 when every request ended as expected (OK, or CANCELLED for the cancelled one). */
#define _POSIX_C_SOURCE 200809L /* rand_r */
#include <braid/braid_c.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NR_THREADS 4
#define MAX_DIMS 8

typedef struct worker {
    int id;
    int nr_requests;
    braid_model* model;
    braid_cancel_token* cancel; /* used by this worker's first request when not NULL */
    int nr_ok, nr_failed;
    braid_code first_code; /* of the first request */
    double checksum;       /* sum of the first output over the worker's requests */
} worker;

/* Prints a failed call's code and message and frees the status; returns its code. */
static braid_code report(braid_status* status, const char* what) {
    braid_code code = braid_status_code(status);
    if (status) {
        fprintf(stderr, "%s: %s: %s\n", what, braid_code_name(code), braid_status_message(status));
        braid_status_free(status);
    }
    return code;
}

static const char* dtype_name(braid_dtype dtype) {
    static const char* const names[] = {"float32", "float16", "bfloat16", "int32",  "int64",
                                        "int8",    "uint8",   "bool",     "float64"};
    return (size_t)dtype < sizeof names / sizeof names[0] ? names[dtype] : "?"; /* newer dtype */
}

static void print_tensors(const braid_model* model, int outputs) {
    size_t n = 0;
    report(outputs ? braid_model_num_outputs(model, &n) : braid_model_num_inputs(model, &n),
           "count");
    for (size_t i = 0; i < n; ++i) {
        const char* name;
        braid_dtype dtype;
        int64_t shape[MAX_DIMS];
        size_t ndim = 0;
        braid_status* s =
            outputs ? braid_model_output_info(model, i, &name, &dtype, shape, MAX_DIMS, &ndim)
                    : braid_model_input_info(model, i, &name, &dtype, shape, MAX_DIMS, &ndim);
        if (report(s, "info") != BRAID_OK) continue;
        printf("  %s %s: %s {", outputs ? "output" : "input", name, dtype_name(dtype));
        for (size_t d = 0; d < ndim; ++d) printf("%s%lld", d ? "," : "", (long long)shape[d]);
        printf("}\n");
    }
}

/* Adds output 0 of the context's last run to the worker's checksum. */
static braid_code add_checksum(worker* w, braid_context* ctx) {
    const char* name;
    braid_dtype dtype;
    size_t ndim, bytes;
    const void* data;
    braid_code code =
        report(braid_model_output_info(w->model, 0, &name, &dtype, NULL, 0, &ndim), "output_info");
    if (code == BRAID_OK) code = report(braid_context_output(ctx, name, &data, &bytes), "output");
    if (code != BRAID_OK || dtype != BRAID_FLOAT32) return code;
    for (size_t i = 0; i < bytes / sizeof(float); ++i) w->checksum += ((const float*)data)[i];
    return BRAID_OK;
}

/* One request: binds random float32 data to input 0 (dims of -1 become `batch`), runs, and adds
 * output 0 to the worker's checksum. */
static braid_code serve(worker* w, braid_context* ctx, unsigned* seed, int64_t batch,
                        braid_cancel_token* cancel) {
    const char* name;
    braid_dtype dtype;
    int64_t shape[MAX_DIMS];
    size_t ndim = 0, count = 1;
    braid_status* s = braid_model_input_info(w->model, 0, &name, &dtype, shape, MAX_DIMS, &ndim);
    braid_code code = report(s, "input_info");
    if (code != BRAID_OK) return code;
    for (size_t d = 0; d < ndim; ++d) {
        if (shape[d] < 0) shape[d] = batch;
        count *= (size_t)shape[d];
    }
    float* x = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; ++i) x[i] = (float)rand_r(seed) / (float)RAND_MAX - 0.5f;

    braid_run_options options;
    memset(&options, 0, sizeof options); /* zero-initialized: fields added later stay off */
    options.cancel = cancel;
    options.timeout_us = 10 * 1000 * 1000;
    code = report(braid_context_set_input(ctx, name, BRAID_FLOAT32, shape, ndim, x), "set_input");
    if (code == BRAID_OK) {
        s = braid_context_run(ctx, &options);
        code = braid_status_code(s);
        if (code == BRAID_CANCELLED && cancel)
            braid_status_free(s); /* expected: no message */
        else
            report(s, "run");
    }
    if (code == BRAID_OK) code = add_checksum(w, ctx);
    free(x); /* the run has returned: the input may go */
    return code;
}

static void* run_worker(void* arg) {
    worker* w = arg;
    unsigned seed = 1234u + (unsigned)w->id;
    braid_context* ctx = NULL;
    if (report(braid_context_create(w->model, &ctx), "context_create") != BRAID_OK) {
        w->nr_failed = w->nr_requests;
        return NULL;
    }
    for (int r = 0; r < w->nr_requests; ++r) {
        braid_code code = serve(w, ctx, &seed, 1 + w->id, r == 0 ? w->cancel : NULL);
        if (r == 0) w->first_code = code;
        if (code == BRAID_OK)
            ++w->nr_ok;
        else if (!(r == 0 && w->cancel && code == BRAID_CANCELLED))
            ++w->nr_failed;
    }
    report(braid_context_destroy(ctx), "context_destroy");
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [REQUESTS_PER_THREAD]\n", argv[0]);
        return 2;
    }
    int nr_requests = argc > 2 ? atoi(argv[2]) : 8;
    if (nr_requests < 1) nr_requests = 1;
    printf("braid %s (ABI %d)\n", braid_version(), braid_abi_version());

    braid_model* model = NULL;
    if (report(braid_model_load_file(argv[1], &model), "load") != BRAID_OK) return 1;
    print_tensors(model, 0);
    print_tensors(model, 1);

    /* A client that went away: its request is cancelled from this thread before the worker
     * runs it, so the run ends with BRAID_CANCELLED at its first operator. A cancel that comes
     * during a run stops it at the next operator or kernel chunk. */
    braid_cancel_token* token = NULL;
    report(braid_cancel_token_create(&token), "cancel_token_create");
    report(braid_cancel_token_cancel(token), "cancel");

    worker workers[NR_THREADS];
    pthread_t threads[NR_THREADS];
    for (int t = 0; t < NR_THREADS; ++t) {
        workers[t] = (worker){.id = t, .nr_requests = nr_requests, .model = model};
        workers[t].cancel = t == 0 ? token : NULL;
        pthread_create(&threads[t], NULL, run_worker, &workers[t]);
    }
    int failed = 0;
    for (int t = 0; t < NR_THREADS; ++t) {
        pthread_join(threads[t], NULL);
        const worker* w = &workers[t];
        printf("thread %d: %d ok, %d failed, first request %s, checksum %.4f\n", t, w->nr_ok,
               w->nr_failed, braid_code_name(w->first_code), w->checksum);
        failed += w->nr_failed;
    }
    if (workers[0].first_code != BRAID_CANCELLED) {
        fprintf(stderr, "the cancelled request ended with %s\n",
                braid_code_name(workers[0].first_code));
        failed += 1;
    }
    report(braid_cancel_token_destroy(token), "cancel_token_destroy");
    report(braid_model_release(model), "model_release");
    return failed ? 1 : 0;
}
