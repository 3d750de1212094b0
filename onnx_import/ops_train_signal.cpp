// ONNX's training ops (domain ai.onnx.preview.training: Adagrad, Momentum, Adam and Gradient)
// and the signal ops (the Hann, Hamming and Blackman windows, DFT, STFT, MelWeightMatrix), as
// braid compositions. The optimizers follow
// the update rules of ONNX's operator definitions; Gradient is braid's autodiff.
#include "op_util.h"

#include "graph/grad.h"
#include "operators/concat_split.h"
#include "operators/elemwise.h"
#include "operators/io.h"
#include "operators/matmul.h"
#include "operators/reduce.h"
#include "operators/subtensor.h"
#include "operators/tensor_manip.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

namespace braid::onnx_import {

using namespace braid::opr;

namespace {

constexpr const char* TRAINING = "ai.onnx.preview.training.";

//! The number of tensors each optimizer input group holds: (inputs - 2) / groups.
size_t nr_tensors(const NodeCtx& c, size_t groups) {
    size_t n = c.nr_inputs() >= 2 ? (c.nr_inputs() - 2) / groups : 0;
    if (n == 0 || c.nr_inputs() != 2 + groups * n ||
        size_t(c.node().output_size()) != (groups - 1) * n)
        c.invalid(fmt::format("{} inputs and {} outputs do not fit R, T and {} groups of tensors",
                              c.nr_inputs(), c.node().output_size(), groups));
    return n;
}

SymbolVar scalar_f32(SymbolVar v) {
    v = v.reshape(std::vector<long>{});
    return v.dtype() == dtype::Float32() ? v : TypeCvt::make(v, dtype::Float32());
}

SymbolVarArray adagrad(const NodeCtx& c) {
    size_t n = nr_tensors(c, 3);
    SymbolVar r = scalar_f32(c.in(0)), t = scalar_f32(c.in(1));
    double decay = c.attr_float("decay_factor", 0.f), eps = c.attr_float("epsilon", 0.f),
           norm = c.attr_float("norm_coefficient", 0.f);
    SymbolVar rate = r / (t * decay + 1.0);
    SymbolVarArray xs, hs;
    for (size_t i = 0; i < n; ++i) {
        SymbolVar x = c.in(2 + i), g = c.in(2 + n + i), h = c.in(2 + 2 * n + i);
        SymbolVar gr = x * norm + g;
        SymbolVar h_new = h + square(gr);
        xs.push_back(x - rate * gr / (sqrt(h_new) + eps));
        hs.push_back(h_new);
    }
    xs.insert(xs.end(), hs.begin(), hs.end());
    return xs;
}

SymbolVarArray momentum(const NodeCtx& c) {
    size_t n = nr_tensors(c, 3);
    SymbolVar r = scalar_f32(c.in(0)), t = scalar_f32(c.in(1));
    double alpha = c.attr_float("alpha", 0.f), beta = c.attr_float("beta", 0.f),
           norm = c.attr_float("norm_coefficient", 0.f);
    std::string mode = c.attr_string("mode", "standard");
    if (mode != "standard" && mode != "nesterov") c.invalid("mode \"" + mode + "\"");
    // The first step (T = 0) takes the whole gradient.
    SymbolVar b = where(less(scalar_like(t, 0), t), scalar_like(t, beta), scalar_like(t, 1));
    SymbolVarArray xs, vs;
    for (size_t i = 0; i < n; ++i) {
        SymbolVar x = c.in(2 + i), g = c.in(2 + n + i), v = c.in(2 + 2 * n + i);
        SymbolVar gr = x * norm + g;
        SymbolVar v_new = v * alpha + b * gr;
        xs.push_back(mode == "standard" ? x - r * v_new : x - r * (gr + v_new * alpha));
        vs.push_back(v_new);
    }
    xs.insert(xs.end(), vs.begin(), vs.end());
    return xs;
}

SymbolVarArray adam(const NodeCtx& c) {
    size_t n = nr_tensors(c, 4);
    SymbolVar r = scalar_f32(c.in(0)), t = scalar_f32(c.in(1));
    double alpha = c.attr_float("alpha", 0.9f), beta = c.attr_float("beta", 0.999f),
           eps = c.attr_float("epsilon", 1e-6f), norm = c.attr_float("norm_coefficient", 0.f),
           post = c.attr_float("norm_coefficient_post", 0.f);
    // Bias correction from the second step on (T > 0).
    SymbolVar corrected =
        r * sqrt(1.0 - pow(scalar_like(t, beta), t)) / (1.0 - pow(scalar_like(t, alpha), t));
    SymbolVar rate = where(less(scalar_like(t, 0), t), corrected, r);
    SymbolVarArray xs, vs, hs;
    for (size_t i = 0; i < n; ++i) {
        SymbolVar x = c.in(2 + i), g = c.in(2 + n + i), v = c.in(2 + 2 * n + i),
                  h = c.in(2 + 3 * n + i);
        SymbolVar gr = x * norm + g;
        SymbolVar v_new = v * alpha + gr * (1 - alpha);
        SymbolVar h_new = h * beta + square(gr) * (1 - beta);
        SymbolVar x_new = x - rate * (v_new / (sqrt(h_new) + eps));
        xs.push_back(post != 0 ? x_new * (1 - post) : x_new);
        vs.push_back(v_new), hs.push_back(h_new);
    }
    xs.insert(xs.end(), vs.begin(), vs.end());
    xs.insert(xs.end(), hs.begin(), hs.end());
    return xs;
}

//! d y / d x for each x named by the attributes (y summed when it has several elements).
SymbolVarArray gradient(const NodeCtx& c) {
    auto* xs = c.attr("xs");
    if (!xs || !c.has_attr("y")) c.invalid("needs the xs and y attributes");
    SymbolVar y = c.value_of(c.attr_string("y", ""));
    SymbolVarArray wrt;
    for (auto& name : xs->strings()) wrt.push_back(c.value_of(name));
    if (y.shape().ndim() != 0 || y.shape().total_nr_elems() != 1) {
        std::vector<int> all;
        for (size_t i = 0; i < y.shape().ndim(); ++i) all.push_back(int(i));
        y = reduce_sum(y, all, false);
    }
    return grad(y, wrt);
}

//! A window of `size` points: sum_k a_k cos(2 pi k n / N) with N = size (periodic) or size - 1.
Converter window(std::vector<double> a) {
    return [a](const NodeCtx& c) {
        int64_t size = c.ints_input(0).at(0);
        if (size < 0) c.invalid(fmt::format("negative size {}", size));
        DType dt = dtype_of(int32_t(c.attr_int("output_datatype", 1)), c.where());
        double period = c.attr_int("periodic", 1) ? double(size) : double(size - 1);
        check_size(c, double(size), "the window");
        std::vector<float> w(static_cast<size_t>(size));
        for (int64_t i = 0; i < size; ++i) {
            double v = 0;
            for (size_t k = 0; k < a.size(); ++k)
                v += a[k] * std::cos(2 * std::numbers::pi * double(k) * double(i) / period);
            w[size_t(i)] = float(v);
        }
        Tensor t(TensorShape{size_t(size)}, dt);
        convert_elements(dtype::Float32(), w.data(), dt, t.raw_ptr(), w.size());
        return one(c.known_output(0, t));
    };
}

//! The discrete Fourier transform of x along `axis`, `len` points (zero padded or truncated),
//! as products with constant cosine and sine matrices. x's last dim holds 1 (real) or 2 (real,
//! imaginary) values; so does the output's (2).
SymbolVar dft_along(const NodeCtx& c, SymbolVar x, int axis, size_t len, bool onesided,
                    bool inverse) {
    size_t rank = x.shape().ndim();
    if (len == 0) c.invalid("dft_length is 0");
    size_t n = x.shape()[size_t(axis)];
    size_t bins = onesided ? len / 2 + 1 : len;
    // Signal along the last axis: [..., n], real and imaginary parts.
    std::vector<int> perm;
    for (size_t d = 0; d + 1 < rank; ++d)
        if (int(d) != axis) perm.push_back(int(d));
    perm.push_back(axis);
    perm.push_back(int(rank) - 1);
    SymbolVar t = transpose(x, perm); // [..., n, parts]
    auto ts = t.shape().dims();
    long batch = 1;
    for (size_t d = 0; d + 2 < ts.size(); ++d) batch *= long(ts[d]);
    auto part = [&](long i) {
        return subtensor(t, {AxisIndex::index(int(rank) - 1, i)}).reshape({batch, long(n)});
    };
    SymbolVar re = part(0), im = x.shape()[rank - 1] == 2 ? part(1) : SymbolVar{};
    // cos and sin of 2 pi k m / len for the first min(n, len) samples (zero padding adds
    // nothing; truncation drops samples).
    size_t used = std::min(n, len);
    if (used < n) {
        re = subtensor(re, {AxisIndex::slice(1, 0, long(used))});
        if (im.node()) im = subtensor(im, {AxisIndex::slice(1, 0, long(used))});
    }
    check_size(c, double(used) * double(bins), "the DFT matrix");
    Tensor cs(TensorShape{used, bins}, dtype::Float32()),
        sn(TensorShape{used, bins}, dtype::Float32());
    for (size_t m = 0; m < used; ++m)
        for (size_t k = 0; k < bins; ++k) {
            double a = 2 * std::numbers::pi * double((k * m) % len) / double(len);
            cs.ptr<float>()[m * bins + k] = float(std::cos(a));
            sn.ptr<float>()[m * bins + k] = float(std::sin(a));
        }
    SymbolVar cv = ImmutableTensor::make(c.graph(), cs), sv = ImmutableTensor::make(c.graph(), sn);
    if (re.dtype() != dtype::Float32()) c.unsupported(fmt::format("dtype {}", re.dtype().name()));
    // Forward e^{-i a}: (r + i j)(cos - i sin); inverse e^{+i a}, divided by len.
    double s = inverse ? -1 : 1;
    SymbolVar out_re = matmul(re, cv), out_im = matmul(re, sv) * -s;
    if (im.node()) {
        out_re = out_re + matmul(im, sv) * s;
        out_im = out_im + matmul(im, cv);
    }
    if (inverse) out_re = out_re / double(len), out_im = out_im / double(len);
    std::vector<long> shape(ts.begin(), ts.end() - 2);
    shape.push_back(long(bins));
    shape.push_back(1);
    SymbolVar y = concat({out_re.reshape(shape), out_im.reshape(shape)}, int(rank) - 1);
    // Back to the input's axis order.
    std::vector<int> back(rank);
    for (size_t d = 0; d < rank; ++d) back[size_t(perm[d])] = int(d);
    return transpose(y, back);
}

//! The signal's last dim: 1 (real) or 2 (complex), checked.
void check_signal(const NodeCtx& c, const SymbolVar& x, size_t min_rank) {
    size_t rank = rank_of(c, x);
    if (rank < min_rank || (x.shape()[rank - 1] != 1 && x.shape()[rank - 1] != 2))
        c.invalid(fmt::format("input {} needs a last dim of 1 (real) or 2 (complex)",
                              x.shape().to_string()));
}

SymbolVarArray dft(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    check_signal(c, x, 2);
    size_t rank = x.shape().ndim();
    int axis = 0;
    if (c.opset() >= 20) {
        // DFT-20: the axis is input 2 (default -2), counted over the signal's own rank.
        int64_t a = c.has_input(2) ? c.ints_input(2).at(0) : -2;
        if (a < -int64_t(rank) || a > int64_t(rank) - 2 || a == -1)
            c.invalid(fmt::format("axis {} for an input of rank {} (its last dim holds the "
                                  "real and imaginary parts)",
                                  a, rank));
        axis = int(a < 0 ? a + int64_t(rank) : a);
    } else {
        axis = norm_axis(c, c.attr_int("axis", 1), rank - 1);
    }
    bool inverse = c.attr_int("inverse", 0) != 0, onesided = c.attr_int("onesided", 0) != 0;
    if (inverse && onesided) c.invalid("onesided with inverse");
    size_t len = c.has_input(1) ? size_t(c.ints_input(1).at(0)) : x.shape()[size_t(axis)];
    return one(dft_along(c, x, axis, len, onesided, inverse));
}

//! The short-time Fourier transform: signal [batch, length, 1 or 2] cut into frames of
//! frame_length samples every frame_step samples, each multiplied by the window (when given)
//! and transformed: [batch, frames, bins, 2].
SymbolVarArray stft(const NodeCtx& c) {
    SymbolVar x = c.in(0);
    check_signal(c, x, 3);
    if (x.shape().ndim() != 3) c.invalid("the signal is not [batch, length, 1 or 2]");
    int64_t step = c.ints_input(1).at(0);
    SymbolVar window = c.has_input(2) ? c.in(2) : SymbolVar{};
    if (window.node() && rank_of(c, window) != 1) c.invalid("the window is not 1-D");
    int64_t length = c.has_input(3)  ? c.ints_input(3).at(0)
                     : window.node() ? int64_t(window.shape()[0])
                                     : 0;
    if (length <= 0) c.invalid("no frame_length and no window give the frame length");
    if (window.node() && int64_t(window.shape()[0]) != length)
        c.invalid(
            fmt::format("the window has {} points; frame_length is {}", window.shape()[0], length));
    int64_t samples = int64_t(x.shape()[1]);
    if (step <= 0 || length > samples)
        c.invalid(fmt::format("frame_step {} and frame_length {} do not fit a signal of {}", step,
                              length, samples));
    int64_t frames = (samples - length) / step + 1;
    check_size(c, double(frames) * double(length), "the frame positions");
    std::vector<int64_t> ids;
    for (int64_t f = 0; f < frames; ++f)
        for (int64_t m = 0; m < length; ++m) ids.push_back(f * step + m);
    // [batch, frames, length, parts]
    SymbolVar framed =
        take(x, 1, int32_constant(c.graph(), ids, TensorShape{size_t(frames), size_t(length)}));
    if (window.node()) framed = framed * window.astype(x.dtype()).reshape({long(length), 1});
    bool onesided = c.attr_int("onesided", 1) != 0;
    return one(dft_along(c, framed, 2, size_t(length), onesided, false));
}

//! The mel filter bank as a constant: triangles between mel-spaced bins of the one-sided
//! spectrum, as ONNX's MelWeightMatrix defines them.
SymbolVarArray mel_weight_matrix(const NodeCtx& c) {
    int64_t mels = c.ints_input(0).at(0), dft_length = c.ints_input(1).at(0);
    int64_t rate = c.ints_input(2).at(0);
    double low = c.floats_input(3).at(0), high = c.floats_input(4).at(0);
    if (mels <= 0 || dft_length <= 0 || rate <= 0)
        c.invalid(fmt::format("num_mel_bins {}, dft_length {} and sample_rate {} must be positive",
                              mels, dft_length, rate));
    DType dt = dtype_of(int32_t(c.attr_int("output_datatype", 1)), c.where());
    size_t spectrum = size_t(dft_length / 2 + 1);
    check_size(c, double(spectrum) * double(mels), "the mel weight matrix");
    auto mel = [](double hz) { return 2595 * std::log10(1 + hz / 700); };
    double low_mel = mel(low), step = (mel(high) - low_mel) / double(mels + 2);
    std::vector<int64_t> bin(size_t(mels + 2));
    for (size_t i = 0; i < bin.size(); ++i) {
        double hz = 700 * (std::pow(10.0, (double(i) * step + low_mel) / 2595) - 1);
        bin[i] = int64_t(std::floor(double(dft_length + 1) * hz / double(rate)));
        if (bin[i] < 0 || bin[i] >= int64_t(spectrum))
            c.invalid(fmt::format("the edges {} to {} Hz give spectrum bin {}, outside 0 to {}",
                                  low, high, bin[i], spectrum - 1));
    }
    std::vector<double> w(spectrum * size_t(mels), 0.0);
    auto at = [&](int64_t j, int64_t i) -> double& {
        return w[size_t(j) * size_t(mels) + size_t(i)];
    };
    for (int64_t i = 0; i < mels; ++i) {
        int64_t left = bin[size_t(i)], centre = bin[size_t(i) + 1], right = bin[size_t(i) + 2];
        if (centre == left)
            at(centre, i) = 1;
        else
            for (int64_t j = left; j <= centre; ++j)
                at(j, i) = double(j - left) / double(centre - left);
        for (int64_t j = centre; j < right; ++j)
            at(j, i) = double(right - j) / double(right - centre);
    }
    Tensor t(TensorShape{spectrum, size_t(mels)}, dt);
    convert_elements(dtype::Float64(), w.data(), dt, t.raw_ptr(), w.size());
    return one(c.known_output(0, t));
}

} // namespace

void add_training_and_signal_converters(ConverterTable& t) {
    t[std::string(TRAINING) + "Adagrad"] = adagrad;
    t[std::string(TRAINING) + "Momentum"] = momentum;
    t[std::string(TRAINING) + "Adam"] = adam;
    t[std::string(TRAINING) + "Gradient"] = gradient;
    t["HannWindow"] = window({0.5, -0.5});
    t["HammingWindow"] = window({25.0 / 46.0, -21.0 / 46.0});
    t["BlackmanWindow"] = window({0.42, -0.5, 0.08});
    t["DFT"] = dft;
    t["STFT"] = stft;
    t["MelWeightMatrix"] = mel_weight_matrix;
}

} // namespace braid::onnx_import
