// Indexing CUDA kernels: gathers move elements as raw bits (any dtype); scatter-adds give each
// thread one (outer, inner) column and walk the index positions in order, so no two threads
// write the same element and sums are deterministic (the CPU's order too).
#include "base/cuda_check.h"
#include "operators/cuda/device_types.cuh"
#include "operators/cuda/indexing_kernels.h"

#include <type_traits>

namespace braid::cuda {

namespace {

constexpr int THREADS = 256;

template <typename T>
__global__ void gather_kernel(const T* x, const int32_t* idx, T* y, int64_t outer, int64_t n,
                              int64_t m, int64_t inner, unsigned long long* bad) {
    int64_t total = outer * m * inner;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t i = e % inner, o = e / inner / m;
        int32_t k = idx[e];
        if (k < 0 || int64_t(k) >= n) {
            atomicMin(bad, (unsigned long long)e);
            y[e] = T(0);
            continue;
        }
        y[e] = x[(o * n + k) * inner + i];
    }
}

template <typename T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, T* y, int64_t count,
                                 int64_t rows, int64_t dim, unsigned long long* bad) {
    // Rows of no elements: one item per id, which only checks it.
    int64_t per = dim > 0 ? dim : 1;
    int64_t total = count * per;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
         e += int64_t(gridDim.x) * blockDim.x) {
        int64_t r = e / per, d = e % per;
        int32_t id = ids[r];
        if (id < 0 || int64_t(id) >= rows) {
            atomicMin(bad, (unsigned long long)r);
            if (dim) y[e] = T(0);
            continue;
        }
        if (dim) y[e] = table[int64_t(id) * dim + d];
    }
}

template <typename T>
void gather_typed(const void* x, const int32_t* idx, void* y, int64_t outer, int64_t n, int64_t m,
                  int64_t inner, unsigned long long* bad, cudaStream_t stream) {
    gather_kernel<T><<<grid_blocks(outer * m * inner, THREADS, 65535), THREADS, 0, stream>>>(
        static_cast<const T*>(x), idx, static_cast<T*>(y), outer, n, m, inner, bad);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void embedding_typed(const void* table, const int32_t* ids, void* y, int64_t count, int64_t rows,
                     int64_t dim, unsigned long long* bad, cudaStream_t stream) {
    embedding_kernel<T>
        <<<grid_blocks(count * (dim > 0 ? dim : 1), THREADS, 65535), THREADS, 0, stream>>>(
            static_cast<const T*>(table), ids, static_cast<T*>(y), count, rows, dim, bad);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

//! A += v: wrapping for integers.
template <typename A> __device__ __forceinline__ A add_wrap(A a, A v) {
    if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return A(U(a) + U(v));
    } else {
        return a + v;
    }
}

//! One thread per (outer, inner) column of acc; positions j in order.
template <typename A, typename VTr>
__global__ void scatter_add_kernel(A* acc, const typename VTr::S* value, const int32_t* idx,
                                   bool per_element, int64_t outer, int64_t n, int64_t m,
                                   int64_t inner, unsigned long long* bad) {
    int64_t cols = outer * inner;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += int64_t(gridDim.x) * blockDim.x) {
        int64_t o = c / inner, i = c % inner;
        A* ac = acc + o * n * inner + i;
        for (int64_t j = 0; j < m; ++j) {
            int64_t vpos = (o * m + j) * inner + i; // value's (and ScatterAdd's idx) position
            int64_t ipos = per_element ? vpos : j;
            int32_t k = idx[ipos];
            if (k < 0 || int64_t(k) >= n) {
                atomicMin(bad, (unsigned long long)ipos);
                continue;
            }
            A* dst = ac + int64_t(k) * inner;
            *dst = add_wrap(*dst, A(VTr::load(value[vpos])));
        }
    }
}

template <typename A, typename VTr>
void scatter_typed(void* acc, const void* value, const int32_t* idx, bool per_element,
                   int64_t outer, int64_t n, int64_t m, int64_t inner, unsigned long long* bad,
                   cudaStream_t stream) {
    scatter_add_kernel<A, VTr><<<grid_blocks(outer * inner, THREADS, 65535), THREADS, 0, stream>>>(
        static_cast<A*>(acc), static_cast<const typename VTr::S*>(value), idx, per_element, outer,
        n, m, inner, bad);
    BRAID_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void launch_gather(const void* x, const int32_t* idx, void* y, int64_t outer, int64_t n, int64_t m,
                   int64_t inner, int elem_size, unsigned long long* bad, cudaStream_t stream) {
    if (outer * m * inner == 0) return;
    switch (elem_size) {
    case 1:
        return gather_typed<uint8_t>(x, idx, y, outer, n, m, inner, bad, stream);
    case 2:
        return gather_typed<uint16_t>(x, idx, y, outer, n, m, inner, bad, stream);
    case 4:
        return gather_typed<uint32_t>(x, idx, y, outer, n, m, inner, bad, stream);
    default:
        return gather_typed<uint64_t>(x, idx, y, outer, n, m, inner, bad, stream);
    }
}

void launch_embedding(const void* table, const int32_t* ids, void* y, int64_t count, int64_t rows,
                      int64_t dim, int elem_size, unsigned long long* bad, cudaStream_t stream) {
    if (count == 0) return;
    switch (elem_size) {
    case 1:
        return embedding_typed<uint8_t>(table, ids, y, count, rows, dim, bad, stream);
    case 2:
        return embedding_typed<uint16_t>(table, ids, y, count, rows, dim, bad, stream);
    case 4:
        return embedding_typed<uint32_t>(table, ids, y, count, rows, dim, bad, stream);
    default:
        return embedding_typed<uint64_t>(table, ids, y, count, rows, dim, bad, stream);
    }
}

bool launch_scatter_add(int acc_dtype, void* acc, int value_dtype, const void* value,
                        const int32_t* idx, bool per_element, int64_t outer, int64_t n, int64_t m,
                        int64_t inner, unsigned long long* bad, cudaStream_t stream) {
    bool empty = outer * inner == 0 || m == 0;
    DtypeCode a = DtypeCode(acc_dtype), v = DtypeCode(value_dtype);
    if (a == DtypeCode::F32) {
        switch (v) {
        case DtypeCode::F32:
            return empty || (scatter_typed<float, F32>(acc, value, idx, per_element, outer, n, m,
                                                       inner, bad, stream),
                             true);
        case DtypeCode::F16:
            return empty || (scatter_typed<float, F16>(acc, value, idx, per_element, outer, n, m,
                                                       inner, bad, stream),
                             true);
        case DtypeCode::BF16:
            return empty || (scatter_typed<float, BF16>(acc, value, idx, per_element, outer, n, m,
                                                        inner, bad, stream),
                             true);
        default:
            return false;
        }
    }
    if (a == DtypeCode::I32 && v == DtypeCode::I32)
        return empty || (scatter_typed<int32_t, I32>(acc, value, idx, per_element, outer, n, m,
                                                     inner, bad, stream),
                         true);
    if (a == DtypeCode::I64 && v == DtypeCode::I64)
        return empty || (scatter_typed<int64_t, I64>(acc, value, idx, per_element, outer, n, m,
                                                     inner, bad, stream),
                         true);
    return false;
}

} // namespace braid::cuda
