#include "operators/roi_align.h"

#include "graph/operator_registry.h"
#include "operators/io.h"
#include "operators/kernel_utils.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace braid::opr {

RoiAlign::RoiAlign(VarNode* x, VarNode* rois, VarNode* batch_indices, Param param,
                   const OperatorConfig& config)
    : ParamOperator(param, config) {
    add_input(x);
    add_input(rois);
    add_input(batch_indices);
    add_output();
}

SymbolVar RoiAlign::make(SymbolVar x, SymbolVar rois, SymbolVar batch_indices, Param param,
                         const OperatorConfig& config) {
    return x.graph()
        .insert_opr(
            std::make_unique<RoiAlign>(x.node(), rois.node(), batch_indices.node(), param, config))
        ->output(0);
}

void RoiAlign::init_output_dtypes() {
    const auto& p = m_param;
    if (p.output_height < 1 || p.output_width < 1 || p.sampling_ratio < 0)
        BRAID_THROW(ValueError,
                    "{}: output size {}x{} and sampling ratio {}: sizes must be >= 1, the ratio "
                    ">= 0",
                    describe(), p.output_height, p.output_width, p.sampling_ratio);
    DType dt = input(0)->dtype();
    if (!dt.is_float())
        BRAID_THROW(DTypeError, "{}: input \"{}\" has dtype {}; expected a float dtype", describe(),
                    input(0)->name(), dt.name());
    if (input(1)->dtype() != dt)
        BRAID_THROW(DTypeError, "{}: rois have dtype {}; expected x's dtype {}", describe(),
                    input(1)->dtype().name(), dt.name());
    DType bi = input(2)->dtype();
    if (bi != dtype::Int64() && bi != dtype::Int32())
        BRAID_THROW(DTypeError, "{}: batch_indices have dtype {}; expected int64 or int32",
                    describe(), bi.name());
    output(0)->set_dtype(dt);
}

bool RoiAlign::infer_output_shapes(const InferCtx& ctx, TensorShape* out) const {
    const TensorShape *x = ctx.shape(0), *rois = ctx.shape(1), *bi = ctx.shape(2);
    if (!x || !rois || !bi) return false;
    if (x->ndim() != 4 || rois->ndim() != 2 || (*rois)[1] != 4 || bi->ndim() != 1 ||
        (*bi)[0] != (*rois)[0])
        BRAID_THROW(ShapeError,
                    "{}: x {}, rois {} and batch_indices {} do not fit; expected x [N, C, H, W], "
                    "rois [R, 4] and batch_indices [R]",
                    describe(), x->to_string(), rois->to_string(), bi->to_string());
    out[0] = TensorShape{(*rois)[0], (*x)[1], size_t(m_param.output_height),
                         size_t(m_param.output_width)};
    return true;
}

namespace {

//! The bilinear neighbours of (y, x) in an h x w plane and their weights; false when the point
//! is more than a pixel outside.
template <typename T> struct Sample {
    size_t at[4];
    T w[4];
};

template <typename T> bool sample_at(T y, T x, size_t h, size_t w, Sample<T>& s) {
    if (y < T(-1) || y > T(h) || x < T(-1) || x > T(w)) return false;
    y = std::max(y, T(0));
    x = std::max(x, T(0));
    size_t y0 = size_t(y), x0 = size_t(x), y1, x1;
    if (y0 >= h - 1) {
        y0 = y1 = h - 1;
        y = T(y0);
    } else {
        y1 = y0 + 1;
    }
    if (x0 >= w - 1) {
        x0 = x1 = w - 1;
        x = T(x0);
    } else {
        x1 = x0 + 1;
    }
    T ly = y - T(y0), lx = x - T(x0), hy = 1 - ly, hx = 1 - lx;
    s = {{y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1},
         {hy * hx, hy * lx, ly * hx, ly * lx}};
    return true;
}

template <typename T>
void roi_align(const T* x, const T* rois, const int64_t* batch, T* y, size_t nr_rois, size_t n,
               size_t c, size_t h, size_t w, const RoiAlignParam& p, const std::string& who) {
    size_t oh = size_t(p.output_height), ow = size_t(p.output_width);
    for (size_t r = 0; r < nr_rois; ++r)
        if (batch[r] < 0 || size_t(batch[r]) >= n)
            BRAID_THROW(ValueError, "{}: batch index {} of roi {} is outside [0, {})", who,
                        batch[r], r, n);
    parallel_range(nr_rois * c, oh * ow * 16, [&](size_t begin, size_t end) {
        for (size_t rc = begin; rc < end; ++rc) {
            size_t r = rc / c, ch = rc % c;
            const T* roi = rois + r * 4;
            T offset = p.half_pixel ? T(0.5) : T(0);
            T scale = T(p.spatial_scale);
            T x1 = roi[0] * scale - offset, y1 = roi[1] * scale - offset;
            T rw = roi[2] * scale - offset - x1, rh = roi[3] * scale - offset - y1;
            if (!p.half_pixel) rw = std::max(rw, T(1)), rh = std::max(rh, T(1));
            T bh = rh / T(oh), bw = rw / T(ow);
            size_t gh = p.sampling_ratio > 0 ? size_t(p.sampling_ratio)
                                             : size_t(std::max<T>(std::ceil(rh / T(oh)), 0));
            size_t gw = p.sampling_ratio > 0 ? size_t(p.sampling_ratio)
                                             : size_t(std::max<T>(std::ceil(rw / T(ow)), 0));
            T count = T(std::max<size_t>(gh * gw, 1));
            const T* plane = x + (size_t(batch[r]) * c + ch) * h * w;
            T* out = y + rc * oh * ow;
            for (size_t ph = 0; ph < oh; ++ph)
                for (size_t pw = 0; pw < ow; ++pw) {
                    T acc = 0;
                    bool first = true;
                    for (size_t iy = 0; iy < gh; ++iy) {
                        T yy = y1 + T(ph) * bh + (T(iy) + T(0.5)) * bh / T(gh);
                        for (size_t ix = 0; ix < gw; ++ix) {
                            T xx = x1 + T(pw) * bw + (T(ix) + T(0.5)) * bw / T(gw);
                            Sample<T> s;
                            T v = 0;
                            if (sample_at(yy, xx, h, w, s)) {
                                if (p.mode == PoolMode::AVERAGE) {
                                    for (int k = 0; k < 4; ++k) v += s.w[k] * plane[s.at[k]];
                                } else {
                                    v = s.w[0] * plane[s.at[0]];
                                    for (int k = 1; k < 4; ++k)
                                        v = std::max(v, s.w[k] * plane[s.at[k]]);
                                }
                            }
                            if (p.mode == PoolMode::AVERAGE)
                                acc += v;
                            else
                                acc = first ? v : std::max(acc, v);
                            first = false;
                        }
                    }
                    out[ph * ow + pw] = p.mode == PoolMode::AVERAGE ? acc / count : acc;
                }
        }
    });
}

} // namespace

void RoiAlign::execute(ExecCtx& ctx) {
    const Tensor &x = ctx.input(0), &rois = ctx.input(1), &bi = ctx.input(2);
    Tensor& y = ctx.output(0);
    const TensorShape& xs = x.shape();
    size_t nr = rois.shape()[0];
    if (y.shape().is_empty()) return;
    std::vector<int64_t> batch(nr);
    convert_elements(bi.dtype(), bi.raw_ptr(), dtype::Int64(), batch.data(), nr);
    if (x.dtype() == dtype::Float64()) {
        roi_align(x.ptr<double>(), rois.ptr<double>(), batch.data(), y.ptr<double>(), nr, xs[0],
                  xs[1], xs[2], xs[3], m_param, describe());
        return;
    }
    Tensor xf = as_float32(x), rf = as_float32(rois), yf = float32_like(y);
    roi_align(xf.ptr<float>(), rf.ptr<float>(), batch.data(), yf.ptr<float>(), nr, xs[0], xs[1],
              xs[2], xs[3], m_param, describe());
    store_float32(yf, y);
}

namespace {

// x as one 1x1x4x6 image, two rois pooled to 2x2: averaged, and the maximum of 2x2 points.
SymbolVarArray roi_align_example(SymbolVar x) {
    auto image = x.reshape(std::vector<long>{1, 1, 4, 6});
    Tensor rois(TensorShape{2, 4}, x.dtype()), bi(TensorShape{2}, dtype::Int64());
    float boxes[] = {0.f, 0.f, 5.f, 3.f, 1.5f, 0.5f, 4.f, 2.5f};
    convert_elements(dtype::Float32(), boxes, x.dtype(), rois.raw_ptr(), 8);
    bi.ptr<int64_t>()[0] = bi.ptr<int64_t>()[1] = 0;
    auto r = ImmutableTensor::make(x.graph(), rois);
    auto b = ImmutableTensor::make(x.graph(), bi);
    return {RoiAlign::make(image, r, b, {PoolMode::AVERAGE, 2, 2, 0, 1.f, true}),
            RoiAlign::make(image, r, b, {PoolMode::MAX, 2, 2, 2, 0.5f, false})};
}

} // namespace

void register_roi_align_operators() {
    OperatorRegistry::instance().add("RoiAlign", "roi_align", dump_param<RoiAlign>,
                                     load_param<RoiAlign>, roi_align_example);
}

} // namespace braid::opr
