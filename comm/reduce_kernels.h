// Element-wise reduction and copy kernels shared by the CPU communicator backends.
//
// float16 and bfloat16 are accumulated in float32 and rounded once per output element;
// integer sums wrap around (two's complement), like MPI and NCCL in practice. Kernels work
// in cache-sized chunks, so an output may alias one of the inputs exactly (in place).
// Large outputs (STREAM_MIN_BYTES and up) are written with non-temporal stores: the data
// would not stay in cache anyway, and skipping the read-for-ownership of every destination
// line saves a third of the memory traffic. Both functions end with a store fence, so a
// barrier after them publishes the data. Stateless; thread-safe.
#pragma once

#include "comm/communicator.h"

#include <cstddef>

namespace braid::comm {

/*!
 * For i < count: the reduction by `op` of ins[0][i] .. ins[n_in-1][i] (element offset
 * `offset` into each input) is written to outs[0][i] .. outs[n_out-1][i] (same offset).
 * Each chunk is fully read before it is written, so any output may be one of the inputs.
 */
void reduce_to_many(DType dt, ReduceOp op, const void* const* ins, size_t n_in, void* const* outs,
                    size_t n_out, size_t offset, size_t count);

//! Outputs at least this large (bytes per call) are written with non-temporal stores.
constexpr size_t STREAM_MIN_BYTES = size_t(1) << 20;

//! memcpy, with non-temporal stores from STREAM_MIN_BYTES on; `dst` and `src` must not
//! overlap.
void copy_bytes(void* dst, const void* src, size_t bytes);

//! `dst[i] = op(dst[i], src[i])` for i < count (float16/bfloat16 rounded at every call).
void reduce_into(DType dt, ReduceOp op, void* dst, const void* src, size_t count);

} // namespace braid::comm
