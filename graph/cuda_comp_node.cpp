#include "graph/cuda_comp_node.h"

#include "base/cuda_check.h"
#include "base/cuda_cublas.h"
#include "base/error.h"
#include "base/log.h"

namespace braid {

CudaContext::CudaContext(int device, std::string locator)
    : m_device(device), m_locator(std::move(locator)) {
    CudaDeviceGuard guard(m_device);
    BRAID_CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    BRAID_CUDA_CHECK(cudaDeviceGetAttribute(&m_sm_count, cudaDevAttrMultiProcessorCount, m_device));
    m_allocator = std::make_shared<CudaDeviceAllocator>(m_device);
}

CudaContext::~CudaContext() {
    // Comp nodes live until process exit, when the CUDA runtime may already be unloading:
    // errors here are expected and ignored.
    if (m_cublas)
        if (auto* api = loaded_cublas()) (void)api->destroy(m_cublas);
    if (m_stream) (void)cudaStreamDestroy(m_stream);
}

cublasHandle_t CudaContext::cublas() {
    std::lock_guard lk(m_cublas_mutex);
    if (!m_cublas) {
        const auto& api = load_cublas();
        CudaDeviceGuard guard(m_device);
        cublasHandle_t handle = nullptr;
        BRAID_CUBLAS_CHECK(api.create(&handle));
        cublasStatus_t st = api.set_stream(handle, m_stream);
        if (st != CUBLAS_STATUS_SUCCESS) {
            (void)api.destroy(handle);
            BRAID_CUBLAS_CHECK(st);
        }
        m_cublas = handle;
    }
    return m_cublas;
}

void CudaContext::synchronize() const {
    BRAID_CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

void CudaContext::activate() const {
    BRAID_CUDA_CHECK(cudaSetDevice(m_device));
}

CudaContext& cuda_context(CompNode cn) {
    auto* ctx = cn.valid() ? cn.cuda_context() : nullptr;
    BRAID_ASSERT(ctx, "comp node {} is not a CUDA comp node", cn.valid() ? cn.locator() : "null");
    return *ctx;
}

void check_cuda_device(int index, const std::string& locator) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        BRAID_THROW(ValueError, "comp node {}: no CUDA device found (cudaGetDeviceCount: {})",
                    locator, cudaGetErrorString(err));
    }
    if (count == 0)
        BRAID_THROW(ValueError,
                    "comp node {}: no CUDA device found (cudaGetDeviceCount: 0 devices)", locator);
    if (index >= count)
        BRAID_THROW(ValueError, "comp node {}: CUDA device {} does not exist; {} device{} found",
                    locator, index, count, count == 1 ? "" : "s");
}

} // namespace braid
