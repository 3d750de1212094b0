#include "operators/cuda/cudnn_library.h"

#if BRAID_WITH_CUDNN

#include "base/cuda_check.h"
#include "base/error.h"
#include "base/log.h"
#include "base/shared_library.h"
#include "memory/cuda_allocator.h"

#include <dlfcn.h>
#include <mutex>
#include <string>
#include <unordered_map>

namespace braid {

namespace {

template <typename Fn> bool resolve(void* lib, const char* name, Fn& fn, std::string& missing) {
    fn = reinterpret_cast<Fn>(dlsym(lib, name));
    if (!fn && missing.empty()) missing = name;
    return fn != nullptr;
}

//! Opens cuDNN and fills the table; returns an error message, empty on success.
std::string open_cudnn(CudnnApi& api) {
    // The soname of the major version braid was compiled against, then the unversioned name.
    std::string versioned = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    SharedLibrary opened = open_shared_library(versioned, "libcudnn.so");
    if (!opened.handle) return "cannot load cuDNN (" + versioned + "): " + opened.error;
    void* lib = opened.handle;
    const std::string& file = opened.file;
    std::string missing;
    resolve(lib, "cudnnGetVersion", api.get_version, missing);
    resolve(lib, "cudnnGetErrorString", api.error_string, missing);
    resolve(lib, "cudnnCreate", api.create, missing);
    resolve(lib, "cudnnDestroy", api.destroy, missing);
    resolve(lib, "cudnnSetStream", api.set_stream, missing);
    resolve(lib, "cudnnCreateTensorDescriptor", api.create_tensor_desc, missing);
    resolve(lib, "cudnnDestroyTensorDescriptor", api.destroy_tensor_desc, missing);
    resolve(lib, "cudnnSetTensor4dDescriptor", api.set_tensor_4d, missing);
    resolve(lib, "cudnnCreateFilterDescriptor", api.create_filter_desc, missing);
    resolve(lib, "cudnnDestroyFilterDescriptor", api.destroy_filter_desc, missing);
    resolve(lib, "cudnnSetFilter4dDescriptor", api.set_filter_4d, missing);
    resolve(lib, "cudnnCreateConvolutionDescriptor", api.create_conv_desc, missing);
    resolve(lib, "cudnnDestroyConvolutionDescriptor", api.destroy_conv_desc, missing);
    resolve(lib, "cudnnSetConvolution2dDescriptor", api.set_conv_2d, missing);
    resolve(lib, "cudnnSetConvolutionGroupCount", api.set_conv_groups, missing);
    resolve(lib, "cudnnSetConvolutionMathType", api.set_conv_math, missing);
    resolve(lib, "cudnnGetConvolutionForwardAlgorithm_v7", api.get_fwd_algos, missing);
    resolve(lib, "cudnnGetConvolutionForwardWorkspaceSize", api.get_fwd_workspace, missing);
    resolve(lib, "cudnnConvolutionForward", api.conv_forward, missing);
    resolve(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", api.get_bwd_data_algos, missing);
    resolve(lib, "cudnnGetConvolutionBackwardDataWorkspaceSize", api.get_bwd_data_workspace,
            missing);
    resolve(lib, "cudnnConvolutionBackwardData", api.conv_backward_data, missing);
    resolve(lib, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", api.get_bwd_filter_algos,
            missing);
    resolve(lib, "cudnnGetConvolutionBackwardFilterWorkspaceSize", api.get_bwd_filter_workspace,
            missing);
    resolve(lib, "cudnnConvolutionBackwardFilter", api.conv_backward_filter, missing);
    if (!missing.empty()) return "cuDNN library " + file + " has no symbol " + missing;
    // The legacy convolution API braid uses is the one of the major version it was built with.
    size_t version = api.get_version();
    if (version / 10000 != size_t(CUDNN_MAJOR))
        return "cuDNN library " + file + " is version " + std::to_string(version) +
               ", braid was built against major version " + std::to_string(CUDNN_MAJOR);
    return {};
}

//! One thread's handles, one per device; destroyed when the thread ends.
struct ThreadHandles {
    std::unordered_map<int, cudnnHandle_t> handles;
    ~ThreadHandles() {
        // Worker threads may outlive the CUDA runtime at process exit: errors are ignored.
        if (auto* api = try_load_cudnn())
            for (auto& [device, handle] : handles) (void)api->destroy(handle);
    }
};

} // namespace

const CudnnApi* try_load_cudnn() {
    static CudnnApi api;
    static const CudnnApi* loaded = [] {
        std::string error = open_cudnn(api);
        if (!error.empty()) {
            logger()->warn("{}; Conv2d and its gradients on CUDA comp nodes use im2col / col2im "
                           "and cuBLAS instead",
                           error);
            return static_cast<const CudnnApi*>(nullptr);
        }
        return static_cast<const CudnnApi*>(&api);
    }();
    return loaded;
}

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
    const CudnnApi* api = try_load_cudnn();
    BRAID_ASSERT(api, "cudnn_handle() without a loaded cuDNN");
    thread_local ThreadHandles local;
    auto it = local.handles.find(device);
    if (it == local.handles.end()) {
        CudaDeviceGuard guard(device);
        cudnnHandle_t handle = nullptr;
        BRAID_CUDNN_CHECK(api->create(&handle));
        it = local.handles.emplace(device, handle).first;
    }
    BRAID_CUDNN_CHECK(api->set_stream(it->second, stream));
    return it->second;
}

namespace detail {

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
    const CudnnApi* api = try_load_cudnn();
    throw LibraryError(fmt::format("{} failed: {} (cudnnStatus_t {}) at {}:{}", call,
                                   api ? api->error_string(status) : "cuDNN is not loaded",
                                   int(status), file, line));
}

} // namespace detail

} // namespace braid

#endif // BRAID_WITH_CUDNN
