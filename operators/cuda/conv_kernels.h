// Launch interface of the im2col and col2im CUDA kernels (operators/cuda/conv.cu), the paths of
// Conv2d and of its gradient operators used when cuDNN is not available.
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

/*!
 * Enqueues the transpose of im2col for one batch item: dx[c][iy][ix] = the sum of
 * cols[(c * kh + r) * kw + s][oy * ow + ox] over every kernel tap (r, s) and output pixel
 * (oy, ox) that reads x[c][iy][ix] (oy*sh - ph + r*dh = iy and ox*sw - pw + s*dw = ix), 0 when
 * none does. The float32 columns are summed in float32 and rounded once into `dx`, of dtype code
 * `dtype` (float32, float16 or bfloat16). One thread per dx element: no atomics, so the result
 * does not depend on scheduling. False for another dtype.
 */
bool launch_col2im(const float* cols, void* dx, const Im2colGeometry& g, int dtype,
                   cudaStream_t stream);

} // namespace braid::cuda
