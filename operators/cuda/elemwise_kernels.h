// Launch interface of the elementwise CUDA kernels (operators/cuda/elemwise.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! The elementwise modes, numbered like braid::opr::ElemMode (operators/cuda/elemwise.cpp
//! checks every value).
enum class ElemKernelMode : int {
    NEG,
    ABS,
    SIGN,
    RELU,
    EXP,
    EXPM1,
    LOG,
    LOG1P,
    SQRT,
    RSQRT,
    SQUARE,
    SIN,
    COS,
    TANH,
    SIGMOID,
    GELU,
    GELU_TANH,
    SILU,
    ERF,
    FLOOR,
    CEIL,
    ROUND,
    LOGICAL_NOT,
    ADD,
    SUB,
    MUL,
    TRUE_DIV,
    FLOOR_DIV,
    MOD,
    POW,
    MAX,
    MIN,
    LT,
    LEQ,
    EQ,
    NEQ,
    LOGICAL_AND,
    LOGICAL_OR,
    LOGICAL_XOR,
    CLIP,
    WHERE,
    COND_LEQ_MOV,
    FMA3,
    NR_MODES
};

//! Values the kernels write into ElemwiseLaunch::error_flag (0: no error).
enum ElemKernelError : int {
    ELEM_ERR_NONE = 0,
    ELEM_ERR_DIV_ZERO = 1,     //!< integer FLOOR_DIV or MOD by zero
    ELEM_ERR_NEGATIVE_EXP = 2, //!< integer POW with a negative exponent
};

//! One elementwise launch. The output is contiguous with `n` elements.
struct ElemwiseLaunch {
    static constexpr int MAX_NDIM = 7;
    ElemKernelMode mode = ElemKernelMode::NEG;
    //! DtypeCode the mode computes on: the inputs' dtype (for WHERE: the branches' dtype;
    //! WHERE's condition is bool). The output has it too, except for the modes with a bool
    //! output (comparisons and logical modes).
    int dtype = 0;
    int arity = 1;
    const void* in[3] = {nullptr, nullptr, nullptr};
    void* out = nullptr;
    int64_t n = 0;
    //! Flat: each input is either the output's size (same element order) or one element.
    bool flat = true;
    bool scalar[3] = {false, false, false}; //!< flat only: input i is a single element
    //! Strided (flat == false): the output shape and each input's broadcast strides.
    int ndim = 0;
    int64_t shape[MAX_NDIM] = {};
    int64_t stride[3][MAX_NDIM] = {};
    int* error_flag = nullptr; //!< device-visible; an ElemKernelError is stored on failure
    int64_t max_blocks = 1024;
};

//! Enqueues the elementwise kernel for `launch` on `stream`; false when the mode has no
//! kernel for the dtype (the CPU kernel has none either).
bool launch_elemwise(const ElemwiseLaunch& launch, cudaStream_t stream);

} // namespace braid::cuda
