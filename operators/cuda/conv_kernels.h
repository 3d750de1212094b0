// Launch interface of the im2col CUDA kernel (operators/cuda/conv.cu), the Conv2d path used when
// cuDNN is not available.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace braid::cuda {

//! Geometry of one NCHW batch item of a convolution.
struct Im2colGeometry {
    int64_t c, h, w; //!< input channels (all groups), height, width
    int64_t oh, ow;  //!< output height and width
    int kh, kw;      //!< kernel size
    int sh, sw;      //!< strides
    int ph, pw;      //!< zero padding
    int dh, dw;      //!< dilations
};

//! Enqueues cols[(c * kh + r) * kw + s][oy * ow + ox] = x[c][oy*sh - ph + r*dh][ox*sw - pw + s*dw]
//! (0 outside the input) for one batch item `x` [c, h, w], so that group g's rows
//! [g * cg * kh * kw, (g + 1) * cg * kh * kw) are its GEMM operand. Elements of `elem_size`
//! bytes (1, 2, 4 or 8) are moved as bits.
void launch_im2col(const void* x, void* cols, const Im2colGeometry& g, int elem_size,
                   cudaStream_t stream);

} // namespace braid::cuda
