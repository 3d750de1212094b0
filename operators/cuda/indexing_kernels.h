// Launch interface of the indexing CUDA kernels (operators/cuda/indexing.cu): Gather,
// IndexingOneHot, Embedding, and their transposes ScatterAdd and IndexAdd.
//
// Every kernel checks its indices: an index out of range writes nothing (a gather writes 0)
// and lowers `*bad` (device memory, set to UINT64_MAX by the caller) to its position with an
// atomic minimum, so the caller reports the first bad position like the CPU kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! y[o, j, i] = x[o, idx[o, j, i], i] over the (outer, m, inner) output; x is (outer, n,
//! inner); elements of `elem_size` bytes (1, 2, 4 or 8). A bad index's position is the flat
//! position in idx.
void launch_gather(const void* x, const int32_t* idx, void* y, int64_t outer, int64_t n, int64_t m,
                   int64_t inner, int elem_size, unsigned long long* bad, cudaStream_t stream);

//! y[i, :] = table[ids[i], :] for `count` ids and rows of `dim` elements of `elem_size`
//! bytes; the table has `rows` rows. A bad id's position is its index in ids. Ids are checked
//! even when `dim` is 0.
void launch_embedding(const void* table, const int32_t* ids, void* y, int64_t count, int64_t rows,
                      int64_t dim, int elem_size, unsigned long long* bad, cudaStream_t stream);

/*!
 * Accumulating scatter into `acc` (outer, n, inner), in place: with `per_element` (ScatterAdd)
 * acc[o, idx[o, j, i], i] += value[o, j, i], idx and value (outer, m, inner); else (IndexAdd)
 * acc[o, idx[j], i] += value[o, j, i], idx of m entries. Positions j are added in order for
 * each (o, i), so the result is deterministic. `acc_dtype` is float32 (for float inputs: the
 * values, of dtype `value_dtype`, convert to float32), int32 or int64 (value_dtype the same,
 * wrapping adds). A bad index's position is its flat position in idx. False for other dtypes.
 */
bool launch_scatter_add(int acc_dtype, void* acc, int value_dtype, const void* value,
                        const int32_t* idx, bool per_element, int64_t outer, int64_t n, int64_t m,
                        int64_t inner, unsigned long long* bad, cudaStream_t stream);

} // namespace braid::cuda
