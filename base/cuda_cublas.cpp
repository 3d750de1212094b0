#include "base/cuda_cublas.h"

#include "base/error.h"
#include "base/shared_library.h"

#include <atomic>
#include <dlfcn.h>
#include <mutex>
#include <string>

namespace braid {

namespace {

std::atomic<const CublasApi*> g_loaded{nullptr};

template <typename Fn> void resolve(void* lib, const char* name, Fn& fn, const std::string& file) {
    fn = reinterpret_cast<Fn>(dlsym(lib, name));
    if (!fn)
        BRAID_THROW(LibraryError, "cuBLAS library {} has no symbol {}: {}", file, name,
                    dlerror() ? dlerror() : "not found");
}

} // namespace

const CublasApi& load_cublas() {
    if (auto* api = g_loaded.load(std::memory_order_acquire)) return *api;
    static std::mutex mutex;
    static CublasApi api;
    std::lock_guard lk(mutex);
    if (auto* loaded = g_loaded.load(std::memory_order_acquire)) return *loaded;
    // The soname of the major version braid was compiled against, then the unversioned name.
    std::string versioned = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    SharedLibrary opened = open_shared_library(versioned, "libcublas.so");
    if (!opened.handle)
        BRAID_THROW(LibraryError, "cannot load cuBLAS ({}): {}", versioned, opened.error);
    void* lib = opened.handle;
    const std::string& file = opened.file;
    resolve(lib, "cublasCreate_v2", api.create, file);
    resolve(lib, "cublasDestroy_v2", api.destroy, file);
    resolve(lib, "cublasSetStream_v2", api.set_stream, file);
    resolve(lib, "cublasSgemm_v2", api.sgemm, file);
    resolve(lib, "cublasGemmEx", api.gemm_ex, file);
    resolve(lib, "cublasGemmStridedBatchedEx", api.gemm_strided_batched_ex, file);
    resolve(lib, "cublasGetStatusString", api.status_string, file);
    resolve(lib, "cublasGetStatusName", api.status_name, file);
    g_loaded.store(&api, std::memory_order_release);
    return api;
}

const CublasApi* loaded_cublas() {
    return g_loaded.load(std::memory_order_acquire);
}

} // namespace braid
