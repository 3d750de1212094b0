// ConvInteger: the exact int32 sums of a 2-D integer convolution (ONNX ConvInteger).
//
// x [N, C, H, W] (uint8 or int8), w [O, C/groups, KH, KW] (uint8 or int8), x_zero_point (one
// element of x's dtype) and w_zero_point (one element, or O: one per output channel, of w's
// dtype) -> y [N, O, OH, OW] int32, the geometry of Conv2d (operators/conv.h; Conv2dParam's
// `exact` is ignored: the sums are always exact):
//   y[n, o, p] = sum over the window of (x - x_zero_point) * (w[o] - w_zero_point[o]),
// where padding contributes nothing (x is padded with its zero point, as ONNX Runtime does).
// A window of more than 258 elements (KH * KW) is refused (ShapeError): the portable kernel
// computes in float32, exact up to 258 products of 8-bit values per sum.
//
// Kernels (CPU only; the ONNX importer composes the integer convolution of float32 operators
// for other devices):
//  - oneDNN's u8 x s8 -> s32 convolution where the CPU has VNNI or AMX (the only int8 kernels
//    of oneDNN that sum full-range data exactly, operators/dnnl_kernels.h). Weights of uint8
//    are shifted to int8 by -128; the shift and the weight zero point are put back with box
//    sums of x: sum (x - xz)(w - wz) = sum (x - xz)(w - 128) + (128 - wz) * sum (x - xz), the
//    last sum over the window's valid positions and the group's channels, one per output
//    pixel. Without VNNI (AVX2, AVX-512 before VNNI) oneDNN's int8 kernels are exact for
//    sources below 128: x is split into its low 7 bits and its top bit, convolved apart, and
//    y = low + 128 * high (two convolutions).
//  - where oneDNN runs neither (no oneDNN, below AVX2): float32 convolutions of (x - xz) and
//    (w - wz), in chunks of input channels whose sums stay exact (at most 258 products
//    each), added in int32.
#pragma once

#include "operators/conv.h"

#include <memory>

namespace braid::opr {

//! The most products of 8-bit values (each at most 255 * 255 in magnitude) whose sum float32
//! holds exactly: every partial sum stays below 2^24.
constexpr size_t EXACT_INT8_TERMS = ((size_t(1) << 24) - 1) / (255 * 255); // 258

//! y = the integer convolution of x and w around their zero points; see the file comment.
class ConvInteger final : public ParamOperator<ConvInteger, Conv2dParam> {
public:
    ConvInteger(VarNode* x, VarNode* w, VarNode* x_zero_point, VarNode* w_zero_point, Param param,
                const OperatorConfig& config);
    //! Throws ValueError for bad params, DTypeError for inputs other than uint8 or int8 and
    //! zero points of another dtype than their tensor's, and ShapeError as Conv2d does, for
    //! zero points of the wrong size and for windows of more than 258 elements.
    static SymbolVar make(SymbolVar x, SymbolVar w, SymbolVar x_zero_point, SymbolVar w_zero_point,
                          Param param = {}, const OperatorConfig& config = {});

    const char* type_name() const override { return "ConvInteger"; }
    void init_output_dtypes() override;
    bool infer_output_shapes(const InferCtx& ctx, TensorShape* out) const override;
    size_t workspace_bytes() const override;
    void execute(ExecCtx& ctx) override;

private:
    //! oneDNN's kernel: returns false, having written nothing, where it does not run the case.
    bool execute_int8(const Tensor& x, const Tensor& w, int32_t x_zero_point,
                      const std::vector<int32_t>& w_zero_point, Tensor& y, Workspace& workspace);
    //! oneDNN's kernel where it sums exactly only 7-bit sources (no VNNI): x's low 7 bits and
    //! its top bit convolved apart, y = low + 128 * high. False where oneDNN runs neither.
    bool conv_in_halves(const Tensor& x, const Tensor& w8, int32_t x_zero_point, Tensor& y,
                        kern::DnnlConstantWeights* kept, Workspace& workspace);
    //! The portable kernel: float32 convolutions of exact chunks.
    void execute_float32(const Tensor& x, const Tensor& w, int32_t x_zero_point,
                         const std::vector<int32_t>& w_zero_point, Tensor& y, Workspace& workspace);

    //! Constant uint8 weights shifted to int8, made on the first run.
    Tensor m_shifted_weights;
    //! The oneDNN kernel's weights, kept while they are constants.
    std::shared_ptr<kern::DnnlConstantWeights> m_constant_weights;
};

} // namespace braid::opr
