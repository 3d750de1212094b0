// The CUDA kernels convolutional networks train with (Pooling, PoolingBackward, BatchNorm,
// Conv2dBackwardData, Conv2dBackwardFilter, ArgReduce), run on cuda0 and compared with the same
// graphs on cpu0 over several shapes, geometries and dtypes, with ties and NaN where the CPU
// kernel defines which element wins; and the gradients of a small convolutional network. Skipped
// when no CUDA device is present.
#include "cuda_checker.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

using namespace braid;
using namespace braid::test;

namespace {

const DType kFloatDtypes[] = {dtype::Float32(), dtype::Float16(), dtype::BFloat16()};

//! Stores `v` into element i of `t` in its dtype.
void store(Tensor& t, size_t i, double v) {
    store_from_double(t.dtype(), t.raw_ptr(), i, v);
}

//! Inputs listed in `tied` get integers in [-2, 2] (so windows and rows hold ties), with NaN at
//! every `nan_every`-th element when non-zero; the others get uniform values in [-1, 1).
std::function<void(std::mt19937&, Tensor&, size_t)> tie_fill(std::vector<size_t> tied,
                                                             size_t nan_every = 0) {
    return [tied, nan_every](std::mt19937& rng, Tensor& t, size_t idx) {
        if (std::find(tied.begin(), tied.end(), idx) == tied.end()) {
            t = random_tensor(t.shape(), t.dtype(), rng, -1.0, 1.0);
            return;
        }
        std::uniform_int_distribution<int> d(-2, 2);
        for (size_t i = 0; i < t.shape().total_nr_elems(); ++i)
            store(t, i, nan_every && i % nan_every == nan_every / 2 ? NAN : double(d(rng)));
    };
}

// ---------------------------------------------------------------- pooling

struct PoolCase {
    TensorShape x;
    int kh, kw, sh, sw, ph, pw;
};

const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 8, 8}, 2, 2, 2, 2, 0, 0},   // the usual 2x2
    {{1, 2, 7, 9}, 3, 3, 2, 2, 1, 1},   // overlapping windows, padding, odd sizes
    {{2, 1, 5, 6}, 3, 2, 1, 2, 1, 0},   // uneven window and stride
    {{1, 3, 11, 7}, 4, 4, 3, 3, 2, 2},  // padding half the window
    {{3, 2, 1, 1}, 1, 1, 1, 1, 0, 0},   // 1x1 planes
    {{1, 1, 6, 7}, 2, 2, 3, 3, 0, 0},   // stride larger than the window: gaps
    {{2, 4, 33, 17}, 3, 3, 2, 2, 1, 1}, // many planes, odd sizes
    {{1, 2, 5, 5}, 5, 5, 1, 1, 0, 0},   // one window covering the plane
};

opr::PoolingParam pool_param(const PoolCase& pc, opr::PoolMode mode, bool include_pad) {
    return {mode, pc.kh, pc.kw, pc.sh, pc.sw, pc.ph, pc.pw, include_pad};
}

TensorShape pooled_shape(const PoolCase& pc) {
    return {pc.x[0], pc.x[1], (pc.x[2] + 2 * size_t(pc.ph) - size_t(pc.kh)) / size_t(pc.sh) + 1,
            (pc.x[3] + 2 * size_t(pc.pw) - size_t(pc.kw)) / size_t(pc.sw) + 1};
}

//! Every mode: max, average over the full window, average over the inside part.
const std::pair<opr::PoolMode, bool> kPoolModes[] = {
    {opr::PoolMode::MAX, true}, {opr::PoolMode::AVERAGE, true}, {opr::PoolMode::AVERAGE, false}};

std::string pool_name(const char* what, const PoolCase& pc, const opr::PoolingParam& p, DType dt) {
    return std::string(what) + " " + dt.name() + " " + pc.x.to_string() + " " + describe_param(p);
}

} // namespace

TEST(CudaPooling, MaxAndAverageMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : kFloatDtypes)
        for (auto& pc : kPoolCases)
            for (auto [mode, include_pad] : kPoolModes) {
                auto p = pool_param(pc, mode, include_pad);
                auto c = make_case(pool_name("pooling", pc, p, dt), {pc.x}, {dt},
                                   [p](const SymbolVarArray& in) {
                                       return SymbolVarArray{opr::Pooling::make(in[0], p)};
                                   });
                set_tolerance(c, dt, 1e-6, 1e-6);
                check_cuda_matches_cpu(c);
            }
}

TEST(CudaPooling, MaxPoolingTiesAndNanMatchCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : kFloatDtypes)
        for (auto& pc : kPoolCases)
            for (size_t nan_every : {size_t(0), size_t(7)}) {
                auto p = pool_param(pc, opr::PoolMode::MAX, true);
                auto c = make_case(pool_name("max pooling ties", pc, p, dt) +
                                       (nan_every ? " with NaN" : ""),
                                   {pc.x}, {dt}, [p](const SymbolVarArray& in) {
                                       return SymbolVarArray{opr::Pooling::make(in[0], p)};
                                   });
                c.fill = tie_fill({0}, nan_every);
                c.rtol = c.atol = 0; // a pick of an input value: exact
                check_cuda_matches_cpu(c);
            }
}

TEST(CudaPooling, BackwardMatchesCpuForEveryModeWithTies) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : kFloatDtypes)
        for (auto& pc : kPoolCases)
            for (auto [mode, include_pad] : kPoolModes)
                for (bool ties : {false, true}) {
                    auto p = pool_param(pc, mode, include_pad);
                    auto c = make_case(
                        pool_name("pooling backward", pc, p, dt) + (ties ? " ties" : ""),
                        {pc.x, pooled_shape(pc)}, {dt, dt}, [p](const SymbolVarArray& in) {
                            return SymbolVarArray{opr::PoolingBackward::make(in[0], in[1], p)};
                        });
                    // Ties in x decide which element a max window's gradient goes to.
                    if (ties) c.fill = tie_fill({0}, mode == opr::PoolMode::MAX ? 11 : 0);
                    set_tolerance(c, dt, 1e-6, 1e-6);
                    check_cuda_matches_cpu(c);
                }
}

// ---------------------------------------------------------------- batch norm

TEST(CudaBatchNorm, EveryRankStatisticShapeAndDtypeMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    struct BnCase {
        TensorShape x, stat;
    };
    const std::vector<BnCase> cases = {
        {{4, 3}, {3}},
        {{2, 5, 7}, {1, 5, 1}},
        {{2, 3, 4, 5}, {3}},
        {{3, 7, 9, 9}, {1, 7, 1, 1}},
        {{1, 2, 3, 4, 5}, {1, 2, 1, 1, 1}},
        {{0, 3, 4, 4}, {3}},
        {{2, 1, 33, 31}, {1}},
    };
    for (DType dt : kFloatDtypes)
        for (bool float32_stats : {false, true})
            for (float eps : {1e-5f, 1e-2f})
                for (auto& bc : cases) {
                    DType st = float32_stats ? dtype::Float32() : dt;
                    auto c = make_case(std::string("batch_norm ") + dt.name() + " " +
                                           bc.x.to_string() + " stats " + st.name() + " " +
                                           bc.stat.to_string() + " eps " + std::to_string(eps),
                                       {bc.x, bc.stat, bc.stat, bc.stat, bc.stat},
                                       {dt, st, st, st, st}, [eps](const SymbolVarArray& in) {
                                           return SymbolVarArray{opr::batch_norm(
                                               in[0], in[1], in[2], in[3], in[4], eps)};
                                       });
                    c.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
                        // The variance (input 4) is positive; everything else in [-2, 2).
                        t = idx == 4 ? random_tensor(t.shape(), t.dtype(), rng, 0.05, 2.0)
                                     : random_tensor(t.shape(), t.dtype(), rng);
                    };
                    set_tolerance(c, dt, 1e-6, 1e-6);
                    check_cuda_matches_cpu(c);
                }
}

TEST(CudaBatchNorm, InPlaceOnAnIntermediateMatchesCpu) {
    // The planner may let y overwrite x: BatchNorm of a computed value whose only reader it is.
    BRAID_REQUIRE_CUDA();
    auto c = make_case("batch_norm of relu(x) in place", {{3, 4, 5, 6}, {4}, {4}, {4}, {4}}, {},
                       [](const SymbolVarArray& in) {
                           SymbolVar h = opr::relu(in[0]);
                           return SymbolVarArray{
                               opr::batch_norm(h, in[1], in[2], in[3], in[4], 1e-3f) * 2.0};
                       });
    c.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
        t = random_tensor(t.shape(), t.dtype(), rng, idx == 4 ? 0.05 : -2.0, 2.0);
    };
    c.rtol = c.atol = 1e-6;
    check_cuda_matches_cpu(c);
}

// ---------------------------------------------------------------- convolution gradients

namespace {

struct ConvCase {
    TensorShape x, w;
    opr::Conv2dParam p;
};

opr::Conv2dParam conv_param(int stride, int pad, int dilation, int groups) {
    opr::Conv2dParam p;
    p.stride_h = p.stride_w = stride;
    p.pad_h = p.pad_w = pad;
    p.dilation_h = p.dilation_w = dilation;
    p.groups = groups;
    return p;
}

std::vector<ConvCase> conv_cases() {
    opr::Conv2dParam uneven;
    uneven.stride_h = 2;
    uneven.stride_w = 1;
    uneven.pad_h = 0;
    uneven.pad_w = 2;
    uneven.dilation_h = 1;
    uneven.dilation_w = 2;
    return {
        {{1, 1, 5, 5}, {1, 1, 3, 3}, conv_param(1, 0, 1, 1)},
        {{2, 3, 9, 7}, {4, 3, 3, 3}, conv_param(1, 1, 1, 1)},
        {{2, 4, 10, 11}, {6, 2, 3, 3}, conv_param(2, 1, 1, 2)}, // groups, stride 2
        {{1, 6, 8, 8}, {6, 1, 3, 3}, conv_param(1, 1, 1, 6)},   // depthwise
        {{3, 8, 6, 5}, {5, 8, 1, 1}, conv_param(1, 0, 1, 1)},   // pointwise
        {{1, 2, 12, 12}, {3, 2, 3, 3}, conv_param(1, 2, 2, 1)}, // dilation
        {{2, 3, 9, 10}, {2, 3, 2, 3}, uneven},
        {{2, 2, 10, 9}, {4, 2, 3, 2}, conv_param(3, 1, 1, 1)}, // stride 3: last rows unread
        {{0, 3, 5, 5}, {2, 3, 3, 3}, conv_param(1, 0, 1, 1)},  // empty batch
        {{1, 16, 32, 32}, {32, 16, 3, 3}, conv_param(1, 1, 1, 1)},
    };
}

TensorShape conv_out_shape(const ConvCase& cv) {
    auto out = [](size_t in, size_t k, int s, int p, int d) {
        return (in + 2 * size_t(p) - size_t(d) * (k - 1) - 1) / size_t(s) + 1;
    };
    return {cv.x[0], cv.w[0], out(cv.x[2], cv.w[2], cv.p.stride_h, cv.p.pad_h, cv.p.dilation_h),
            out(cv.x[3], cv.w[3], cv.p.stride_w, cv.p.pad_w, cv.p.dilation_w)};
}

std::string conv_name(const char* what, const ConvCase& cv, DType dt) {
    return std::string(what) + " " + dt.name() + " x " + cv.x.to_string() + " w " +
           cv.w.to_string() + " stride " + std::to_string(cv.p.stride_h) + "x" +
           std::to_string(cv.p.stride_w) + " pad " + std::to_string(cv.p.pad_h) + "x" +
           std::to_string(cv.p.pad_w) + " dilation " + std::to_string(cv.p.dilation_h) + "x" +
           std::to_string(cv.p.dilation_w) + " groups " + std::to_string(cv.p.groups);
}

//! Convolution tolerances: sums of up to a few thousand products in another order (float32),
//! one rounding of the result (float16, bfloat16).
void set_conv_tolerance(OprCase& c, DType dt) {
    c.low = -1;
    c.high = 1;
    c.rtol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 2e-2;
    c.atol = dt == dtype::Float32() ? 1e-4 : dt == dtype::Float16() ? 5e-3 : 3e-2;
}

} // namespace

TEST(CudaConvGrad, BackwardDataMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : kFloatDtypes)
        for (auto& cv : conv_cases()) {
            opr::Conv2dBackwardData::Param p{cv.p, uint32_t(cv.x[2]), uint32_t(cv.x[3])};
            auto c =
                make_case(conv_name("conv2d backward data", cv, dt), {cv.w, conv_out_shape(cv)},
                          {dt, dt}, [p](const SymbolVarArray& in) {
                              return SymbolVarArray{opr::Conv2dBackwardData::make(in[0], in[1], p)};
                          });
            set_conv_tolerance(c, dt);
            check_cuda_matches_cpu(c);
        }
}

TEST(CudaConvGrad, BackwardFilterMatchesCpu) {
    BRAID_REQUIRE_CUDA();
    for (DType dt : kFloatDtypes)
        for (auto& cv : conv_cases()) {
            opr::Conv2dBackwardFilter::Param p{cv.p, uint32_t(cv.w[2]), uint32_t(cv.w[3])};
            auto c = make_case(conv_name("conv2d backward filter", cv, dt),
                               {cv.x, conv_out_shape(cv)}, {dt, dt}, [p](const SymbolVarArray& in) {
                                   return SymbolVarArray{
                                       opr::Conv2dBackwardFilter::make(in[0], in[1], p)};
                               });
            set_conv_tolerance(c, dt);
            check_cuda_matches_cpu(c);
        }
}

// ---------------------------------------------------------------- ArgReduce

TEST(CudaArgReduce, ArgmaxAndArgminWithTiesAndNanMatchCpu) {
    BRAID_REQUIRE_CUDA();
    struct ArgCase {
        TensorShape x;
        int axis;
        bool keepdims;
    };
    const std::vector<ArgCase> cases = {
        {{7}, 0, false},       {{3, 5}, -1, false},    {{3, 5}, 0, true},     {{4, 33}, 1, false},
        {{2, 3, 4}, 1, false}, {{5, 1000}, -1, false}, {{1000, 3}, 0, false}, {{2, 70, 3}, 1, true},
        {{6, 1}, 1, false},    {{3, 4097}, 1, false},  {{0, 4}, 1, false},    {{2, 3, 5}, 2, true},
    };
    const DType dtypes[] = {dtype::Float32(), dtype::Float16(), dtype::BFloat16(), dtype::Int32(),
                            dtype::Int64()};
    for (DType dt : dtypes)
        for (auto mode : {opr::ArgReduceMode::ARGMAX, opr::ArgReduceMode::ARGMIN})
            for (auto& ac : cases)
                for (int fill = 0; fill < 3; ++fill) { // random, ties, ties with NaN
                    if (fill == 2 && !dt.is_float()) continue;
                    opr::ArgReduce::Param p{mode, ac.axis, ac.keepdims};
                    auto c =
                        make_case(std::string(opr::arg_reduce_mode_name(mode)) + " " + dt.name() +
                                      " " + ac.x.to_string() + " axis " + std::to_string(ac.axis) +
                                      (fill == 1   ? " ties"
                                       : fill == 2 ? " ties and NaN"
                                                   : ""),
                                  {ac.x}, {dt}, [p](const SymbolVarArray& in) {
                                      return SymbolVarArray{opr::ArgReduce::make(in[0], p)};
                                  });
                    if (fill == 0) {
                        c.low = -100; // integer dtypes round: few ties
                        c.high = 100;
                    } else {
                        c.fill = tie_fill({0}, fill == 2 ? 13 : 0);
                    }
                    c.rtol = c.atol = 0; // indices
                    check_cuda_matches_cpu(c);
                }
}

// ---------------------------------------------------------------- a small network

TEST(CudaTraining, ConvNetGradientsMatchCpu) {
    // conv -> batch norm -> relu -> pooling -> matmul -> squared-error loss; every gradient
    // runs on the device (Conv2dBackwardData/Filter, PoolingBackward, BatchNorm's rule).
    BRAID_REQUIRE_CUDA();
    for (auto [mode, include_pad] : kPoolModes) {
        opr::PoolingParam pool{mode, 3, 3, 2, 2, 1, 1, include_pad};
        std::string name = std::string("conv net gradients, ") + describe_param(pool);
        // x, conv weight, bn scale, bias, mean, var, dense weight, target
        auto c = make_case(
            name, {{4, 3, 10, 10}, {8, 3, 3, 3}, {8}, {8}, {8}, {8}, {200, 5}, {4, 5}}, {},
            [pool](const SymbolVarArray& in) {
                SymbolVar h = opr::conv2d(in[0], in[1], 1, 1);
                h = opr::batch_norm(h, in[2], in[3], in[4], in[5], 1e-3f);
                h = opr::Pooling::make(opr::relu(h), pool); // [4, 8, 5, 5]
                SymbolVar logits = opr::matmul(h.reshape({4, 200}), in[6]);
                SymbolVar diff = logits - in[7];
                SymbolVar loss = opr::reduce_mean(diff * diff);
                SymbolVarArray outs = grad(loss, {in[0], in[1], in[2], in[3], in[4], in[5], in[6]});
                outs.push_back(loss);
                return outs;
            });
        c.fill = [](std::mt19937& rng, Tensor& t, size_t idx) {
            t = random_tensor(t.shape(), t.dtype(), rng, idx == 5 ? 0.25 : -1.0, 1.0);
        };
        c.rtol = 1e-3;
        c.atol = 1e-5;
        check_cuda_matches_cpu(c);
    }
}
