#include "operators/conv_direct.h"

#include "base/cpu_isa.h"
#include "base/thread_pool.h"
#include "operators/kernel_utils.h"
#include "operators/simd_vec.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace braid::opr {
namespace {

//! One batch item's convolution as the tiles read it. Positions q = r·w + col run over the
//! input's grid (r < oh output rows, col < w); position q is output pixel (r, col) when
//! col < ow, and is computed and dropped otherwise. Tap t = (i, j) of input channel c reads
//! x[c·plane + q + off[t]], off[t] = (i − ph)·w + (j − pw), where that lies inside the input
//! (masked otherwise: the zero padding).
struct DirectJob {
    const float* x;       //!< input [c][h][w]
    size_t h, w, plane;   //!< input rows, columns, h · w
    const float* weights; //!< [o][k], k = c · taps + tap
    size_t c, k, taps;    //!< input channels, c · taps, kh · kw
    size_t kh, kw;        //!< kernel rows, columns
    ptrdiff_t ph, pw;     //!< padding
    const ptrdiff_t* off; //!< per tap
    size_t o, ow, pixels; //!< output channels, columns, oh · ow
    float* y;             //!< output [o][oh][ow]
    DirectOutputOps ops;  //!< applied in registers before the store
};

// ---- AVX-512: 8 channels x 48 positions, 24 accumulators of the 32 registers.
BRAID_TARGET_REGION("avx512f")
namespace direct_avx512 {

using Vec = simd::Avx512;
constexpr int TILE_MR = 8, TILE_NV = 3;

#include "operators/conv_direct_tiles.inc"

} // namespace direct_avx512
BRAID_TARGET_REGION_END

// ---- AVX2 + FMA: 6 channels x 16 positions, 12 accumulators of the 16 registers.
BRAID_TARGET_REGION("avx2,fma")
namespace direct_avx2 {

using Vec = simd::Avx2;
constexpr int TILE_MR = 6, TILE_NV = 2;

#include "operators/conv_direct_tiles.inc"

} // namespace direct_avx2
BRAID_TARGET_REGION_END

//! Multiply-adds below which a band is not split off for another thread: about 5 us of the
//! tile's work. Most of a speech embedding's convolutions have 2-4 million multiply-adds; split
//! only above PARALLEL_MIN_MACS per band (2 million), they ran on one thread, and the model took
//! 0.56 ms at 2 threads as at 1; split down to this, 0.43 ms. (Bands of 200 thousand gained
//! 1% more.)
constexpr double DIRECT_BAND_MIN_MACS = 5e5;

} // namespace

bool conv_direct_applies(const Conv2dParam& pr, const TensorShape& xs, const TensorShape& ws) {
    if (pr.groups != 1 || pr.stride_h != 1 || pr.stride_w != 1 || pr.dilation_h != 1 ||
        pr.dilation_w != 1)
        return false;
    size_t kh = ws[2], kw = ws[3];
    if (kh == 1 && kw == 1 && pr.pad_h == 0 && pr.pad_w == 0) return false;
    if (kh > DIRECT_MAX_KERNEL || kw > DIRECT_MAX_KERNEL) return false;
    // Output columns beyond the input's (padding wider than the kernel's reach) have no
    // position on the input's grid.
    if (2 * size_t(pr.pad_w) + 1 > kw) return false;
    if (!cpu_isa_at_least(CpuIsa::AVX2)) return false;
    if (xs[1] * xs[2] * xs[3] * sizeof(float) > DIRECT_MAX_INPUT_BYTES) return false;
    // Positions of one item: at least a quarter of a tile, or most of its lanes would be
    // computed for nothing. A voice-activity model's 1-D convolutions over 4 frames (129 -> 128
    // channels, a twelfth of an AVX-512 tile) took 21 us against 15 us in im2col + GEMM; a speech
    // embedding's last ones over 10x2 to 6x2 maps (a quarter to a half) are faster here: the
    // model 0.535 ms, against 0.575 ms with a whole tile required.
    if (xs[2] + 2 * size_t(pr.pad_h) < kh || xs[3] + 2 * size_t(pr.pad_w) < kw) return false;
    size_t oh = xs[2] + 2 * size_t(pr.pad_h) - kh + 1, ow = xs[3] + 2 * size_t(pr.pad_w) - kw + 1;
    size_t positions = (oh - 1) * xs[3] + ow;
    size_t tile =
        cpu_isa_at_least(CpuIsa::AVX512) ? direct_avx512::TILE_WIDTH : direct_avx2::TILE_WIDTH;
    return 4 * positions >= tile;
}

bool conv_direct_forward(const Conv2dParam& pr, const Tensor& x, const Tensor& w, Tensor& y,
                         const ConvEpilogue* epilogue, const DirectOutputOps* ops) {
    const auto &xs = x.shape(), &ws = w.shape(), &ys = y.shape();
    if (!conv_direct_applies(pr, xs, ws)) return false;
    if (ys.is_empty()) return true;
    bool avx512 = cpu_isa_at_least(CpuIsa::AVX512);
    size_t n = xs[0], c = xs[1], h = xs[2], iw = xs[3];
    size_t o = ws[0], kh = ws[2], kw = ws[3], taps = kh * kw;
    size_t oh = ys[2], ow = ys[3], pixels = oh * ow;
    std::vector<ptrdiff_t> off(taps);
    for (size_t i = 0; i < kh; ++i)
        for (size_t j = 0; j < kw; ++j)
            off[i * kw + j] = (ptrdiff_t(i) - pr.pad_h) * ptrdiff_t(iw) + ptrdiff_t(j) - pr.pad_w;

    // Tasks: (batch item, band of output rows). A batch of fewer items than threads splits each
    // item into bands, as long as each band stays worth its dispatch (DIRECT_BAND_MIN_MACS).
    size_t threads = kernel_threads(), k = c * taps;
    size_t bands = 1;
    if (n < threads) {
        double macs = double(o) * double(k) * double(pixels);
        size_t worth = size_t(macs / DIRECT_BAND_MIN_MACS);
        bands = std::max<size_t>(1, std::min({oh, (threads + n - 1) / n, worth}));
    }
    const float *xp = x.ptr<float>(), *wp = w.ptr<float>();
    float* yp = y.ptr<float>();
    parallel_for(n * bands, 1, [&](size_t begin, size_t end) {
        for (size_t task = begin; task < end; ++task) {
            size_t item = task / bands, band = task % bands;
            size_t r0 = oh * band / bands, r1 = oh * (band + 1) / bands;
            if (r0 == r1) continue;
            DirectJob job{xp + item * c * h * iw,
                          h,
                          iw,
                          h * iw,
                          wp,
                          c,
                          k,
                          taps,
                          kh,
                          kw,
                          pr.pad_h,
                          pr.pad_w,
                          off.data(),
                          o,
                          ow,
                          pixels,
                          yp + item * o * pixels,
                          ops ? *ops : DirectOutputOps{}};
            if (avx512)
                direct_avx512::direct_rows(job, r0, r1);
            else
                direct_avx2::direct_rows(job, r0, r1);
            if (epilogue) (*epilogue)(job.y + r0 * ow, 0, o, (r1 - r0) * ow, pixels);
        }
    });
    return true;
}

} // namespace braid::opr
