// Max pooling of NCHW planes with AVX-512 or AVX2 vectors, for horizontal strides 1 and 2 (the
// 3x3/2 pool after a ResNet stem, the 3x3/1, 5x5/1 ... pools of spatial pyramids): per output
// row, the maximum of its window's input rows into a row buffer padded with -inf, then each
// output vector the maximum of kw (strided) reads of that buffer. The same results as the
// portable loops in pooling.cpp, NaN propagation included. Internal to operators/.
#pragma once

#include <cstddef>

namespace braid::opr {

//! A pooling window over one plane: input h x w, output oh x ow, window kh x kw, strides and
//! paddings.
struct PoolGeometry {
    ptrdiff_t h, w, oh, ow, kh, kw, sh, sw, ph, pw;
};

//! True when max_pool_vector() runs `g`: a horizontal stride of 1 or 2, and AVX2 or AVX-512
//! allowed (base/cpu_isa.h).
bool max_pool_vector_applies(const PoolGeometry& g);

//! Max pooling of planes [begin, end) of x (h·w floats each) into y (oh·ow floats each).
void max_pool_vector(const PoolGeometry& g, const float* x, float* y, size_t begin, size_t end);

} // namespace braid::opr
