/* braid's embedding API (C99).
 *
 * Load a model once, create one context per in-flight request, bind inputs and outputs by
 * name, run. Every function returns a braid_status*: NULL on success, else a status the
 * caller frees with braid_status_free(), holding a code and a message that names the input,
 * output, file or operator and the values seen versus expected. There is no global error
 * state; every function is thread-safe, and a context is used by one thread at a time.
 * Handles are opaque; a destroyed or null handle gives BRAID_INVALID_ARGUMENT, never a crash.
 * No C++ exception crosses this interface. See docs/embedding.md (threading, lifetimes, ABI).
 */
#ifndef BRAID_C_H
#define BRAID_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BRAID_ABI_VERSION 0 /* the SONAME's number: libbraid.so.0 */

typedef struct braid_status braid_status;
typedef struct braid_model braid_model;
typedef struct braid_context braid_context;
typedef struct braid_cancel_token braid_cancel_token;

typedef enum braid_code {
    BRAID_OK = 0,
    BRAID_INVALID_ARGUMENT = 1,
    BRAID_NOT_FOUND = 2,
    BRAID_INVALID_MODEL = 3,
    BRAID_FAILED_PRECONDITION = 4,
    BRAID_CANCELLED = 5,
    BRAID_DEADLINE_EXCEEDED = 6,
    BRAID_OUT_OF_MEMORY = 7,
    BRAID_INTERNAL = 8
} braid_code;

typedef enum braid_dtype {
    BRAID_FLOAT32 = 0,
    BRAID_FLOAT16 = 1,
    BRAID_BFLOAT16 = 2,
    BRAID_INT32 = 3,
    BRAID_INT64 = 4,
    BRAID_INT8 = 5,
    BRAID_UINT8 = 6,
    BRAID_BOOL = 7,
    BRAID_FLOAT64 = 8, /* IEEE binary64 (double) */
    BRAID_INT16 = 9,
    BRAID_UINT16 = 10,
    BRAID_UINT32 = 11,
    BRAID_UINT64 = 12
} braid_dtype;

/* What a model input or output holds: a tensor, or (ONNX models) a sequence of tensors, an
 * optional tensor or an optional sequence. For a sequence, the dtype and shape that
 * braid_model_input_info() reports are its elements'. */
typedef enum braid_value_kind {
    BRAID_TENSOR = 0,
    BRAID_SEQUENCE = 1,
    BRAID_OPTIONAL = 2,
    BRAID_OPTIONAL_SEQUENCE = 3
} braid_value_kind;

/* Options of one run; zero-initialize, then set what you need. */
typedef struct braid_run_options {
    braid_cancel_token* cancel; /* NULL: none */
    int64_t timeout_us;         /* > 0: the run fails with BRAID_DEADLINE_EXCEEDED after it */
    size_t max_threads;         /* 0: every kernel thread of the shared pool */
    int deterministic;          /* nonzero: deterministic mode (docs/determinism.md) */
} braid_run_options;

/* Version and ABI. */
const char* braid_version(void); /* "MAJOR.MINOR.PATCH" */
int braid_abi_version(void);     /* BRAID_ABI_VERSION of the library loaded */

/* Status. braid_status_code(NULL) is BRAID_OK and its message "". */
braid_code braid_status_code(const braid_status* status);
const char* braid_status_message(const braid_status* status);
void braid_status_free(braid_status* status);
const char* braid_code_name(braid_code code);

/* Models. */
braid_status* braid_model_load_file(const char* path, braid_model** out);
/* An ONNX model whose shape inputs (docs/onnx.md) get values when it is imported: input
 * names[i] takes the counts[i] values at values[i], converted to its dtype; those inputs become
 * constants and are not listed among the model's inputs. */
braid_status* braid_model_load_file_bound(const char* path, size_t num_bound,
                                          const char* const* names, const double* const* values,
                                          const size_t* counts, braid_model** out);
/* copy == 0: the buffer is used in place; keep it alive and unchanged while the model lives. */
braid_status* braid_model_load_buffer(const void* data, size_t size, int copy, braid_model** out);
/* Releases the caller's reference; contexts keep the model alive until they are destroyed. */
braid_status* braid_model_release(braid_model* model);
braid_status* braid_model_num_inputs(const braid_model* model, size_t* out);
braid_status* braid_model_num_outputs(const braid_model* model, size_t* out);
/* Name (valid while the model lives), dtype and rank of input/output `index`; shape may be NULL
 * or have room for `shape_capacity` dims (-1 for a dim fixed at run time). */
braid_status* braid_model_input_info(const braid_model* model, size_t index, const char** name,
                                     braid_dtype* dtype, int64_t* shape, size_t shape_capacity,
                                     size_t* ndim);
braid_status* braid_model_output_info(const braid_model* model, size_t index, const char** name,
                                      braid_dtype* dtype, int64_t* shape, size_t shape_capacity,
                                      size_t* ndim);
/* The kind of input/output `index`. */
braid_status* braid_model_input_kind(const braid_model* model, size_t index, braid_value_kind* out);
braid_status* braid_model_output_kind(const braid_model* model, size_t index,
                                      braid_value_kind* out);
braid_status* braid_model_weight_bytes(const braid_model* model, size_t* out);

/* Contexts. */
braid_status* braid_context_create(braid_model* model, braid_context** out);
/* Waits for a run in flight on another thread, then frees the context. */
braid_status* braid_context_destroy(braid_context* ctx);
/* Zero copy: `data` must stay unchanged until the next run returns. */
braid_status* braid_context_set_input(braid_context* ctx, const char* name, braid_dtype dtype,
                                      const int64_t* shape, size_t ndim, const void* data);
/* Sequence input `name`: `count` elements (0: an empty sequence), element i of dtypes[i],
 * shapes[i] (ndims[i] dims) at data[i]; zero copy, as braid_context_set_input(). */
braid_status* braid_context_set_sequence_input(braid_context* ctx, const char* name, size_t count,
                                               const braid_dtype* dtypes,
                                               const int64_t* const* shapes, const size_t* ndims,
                                               const void* const* data);
/* Optional input `name` bound to no value. */
braid_status* braid_context_set_input_none(braid_context* ctx, const char* name);
/* Each run copies output `name` into `data` (`bytes` must be its size). */
braid_status* braid_context_bind_output(braid_context* ctx, const char* name, void* data,
                                        size_t bytes);
/* Output shape for the bound inputs, before running (static inference). */
braid_status* braid_context_output_shape(braid_context* ctx, const char* name, int64_t* shape,
                                         size_t shape_capacity, size_t* ndim);
braid_status* braid_context_run(braid_context* ctx, const braid_run_options* options);
/* Output of the last run: braid's memory, valid until the next run on this context. */
braid_status* braid_context_output(braid_context* ctx, const char* name, const void** data,
                                   size_t* bytes);
/* Whether output `name` holds a value after the last run (0 only for an optional without one). */
braid_status* braid_context_has_output(braid_context* ctx, const char* name, int* out);
/* Sequence output `name` of the last run: its number of elements, then element `index`'s data
 * (dense row-major, valid until the next run), bytes, dtype and shape (shape may be NULL or
 * have room for `shape_capacity` dims). */
braid_status* braid_context_sequence_length(braid_context* ctx, const char* name, size_t* out);
braid_status* braid_context_sequence_element(braid_context* ctx, const char* name, size_t index,
                                             const void** data, size_t* bytes, braid_dtype* dtype,
                                             int64_t* shape, size_t shape_capacity, size_t* ndim);
braid_status* braid_context_arena_bytes(braid_context* ctx, size_t* out);
braid_status* braid_context_trim(braid_context* ctx);

/* Cancel tokens: braid_cancel_token_cancel() may be called from any thread. */
braid_status* braid_cancel_token_create(braid_cancel_token** out);
braid_status* braid_cancel_token_cancel(braid_cancel_token* token);
braid_status* braid_cancel_token_reset(braid_cancel_token* token);
braid_status* braid_cancel_token_destroy(braid_cancel_token* token);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_C_H */
