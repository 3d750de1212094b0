// The CUDA side of a CUDA comp node (CUDA builds only): its device, stream, allocator and
// cuBLAS handle.
//
// A CUDA comp node ("cuda0", "cuda0:1") keeps the host worker thread every comp node has,
// so ordering across comp nodes works as on the CPU; that thread enqueues kernels on the comp
// node's stream instead of running them. Kernels reach this state with
// `cuda_context(opr.comp_node())`.
#pragma once

#include "graph/comp_node.h"
#include "memory/cuda_allocator.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>

namespace braid {

//! One CUDA comp node's device state. The stream is thread-safe; cublas() and the handle it
//! returns are meant for the comp node's worker thread.
class CudaContext {
public:
    //! Creates a non-blocking stream on `device` for comp node `locator`.
    CudaContext(int device, std::string locator);
    ~CudaContext();
    CudaContext(const CudaContext&) = delete;
    CudaContext& operator=(const CudaContext&) = delete;

    int device() const { return m_device; }
    const std::string& locator() const { return m_locator; }
    cudaStream_t stream() const { return m_stream; }
    //! Number of multiprocessors of the device (for sizing grids).
    int sm_count() const { return m_sm_count; }
    //! This comp node's device allocator (blocks are reused in this stream's order).
    const std::shared_ptr<CudaDeviceAllocator>& allocator() const { return m_allocator; }
    //! The cuBLAS handle bound to this stream, created (and cuBLAS loaded) on first use.
    cublasHandle_t cublas();
    //! Blocks until everything enqueued on the stream so far has finished.
    void synchronize() const;
    //! Makes this context's device current for the calling thread.
    void activate() const;

private:
    int m_device;
    std::string m_locator;
    cudaStream_t m_stream = nullptr;
    int m_sm_count = 1;
    std::shared_ptr<CudaDeviceAllocator> m_allocator;
    std::mutex m_cublas_mutex;
    cublasHandle_t m_cublas = nullptr;
};

//! The CUDA context of comp node `cn`; throws InternalError when `cn` is not a CUDA comp node.
CudaContext& cuda_context(CompNode cn);

//! Throws ValueError naming `locator` when CUDA device `index` cannot be used (no device, a
//! driver error, or an index past the last device).
void check_cuda_device(int index, const std::string& locator);

} // namespace braid
