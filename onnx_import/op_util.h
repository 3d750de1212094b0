// What the converter files share: axis checks, constant index tensors and the
// compositions several ONNX ops are built from.
#pragma once

#include "onnx_internal.h"

#include "base/error.h"
#include "operators/conv.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace braid::onnx_import {

using ConverterTable = std::map<std::string, Converter>;

//! Runs `convert`, naming node `c` and its subgraph `label` ("then_branch", "body, element 2")
//! in any error, of the same class.
template <typename F> auto in_subgraph(const NodeCtx& c, const std::string& label, F&& convert) {
    std::string context = fmt::format("{}, {}", c.where(), label);
    try {
        return convert();
    } catch (const ShapeInputError& e) {
        throw ShapeInputError(context + ": " + e.what(), e.inputs());
    } catch (const UnsupportedOnnxError& e) {
        throw UnsupportedOnnxError(context + ": " + e.what());
    } catch (const std::exception&) {
        std::rethrow_exception(with_error_context(std::current_exception(), context, ""));
    }
}
//! Adds the converters of neural-network ops (convolution, pooling, normalization, losses,
//! resizing: ops_nn.cpp) to `table`.
void add_nn_converters(ConverterTable& table);

//! Adds the shape and indexing ops: Reshape, Transpose, Slice, Pad, Gather, ... (ops_shape.cpp).
void add_shape_converters(ConverterTable& table);
//! Adds the quantization converters (ops_quant.cpp).
void add_quant_converters(ConverterTable& table);
//! Adds the converters of ai.onnx.preview.training (optimizers, Gradient) and of the signal
//! windows (ops_train_signal.cpp).
void add_training_and_signal_converters(ConverterTable& table);
//! Adds the scatters, GatherND, TopK, ReverseSequence, MaxUnpool and BitShift (ops_index.cpp).
void add_index_converters(ConverterTable& table);
//! Adds the sequence and optional ops (ops_sequence.cpp).
void add_sequence_converters(ConverterTable& table);
//! If, Loop and Scan (ops_control.cpp).
void add_control_converters(ConverterTable& table);
//! Adds Einsum (ops_einsum.cpp).
void add_einsum_converter(ConverterTable& table);
//! Adds the recurrent layers RNN, GRU and LSTM (ops_rnn.cpp).
void add_rnn_converters(ConverterTable& table);
//! The Conv node `c`'s convolution (its attributes: pads, strides, dilations, group) of x by
//! w, without bias; 1-D to 3-D. `exact`: x and w hold integers whose products must sum
//! exactly (Conv2dParam::exact).
SymbolVar conv_with(const NodeCtx& c, SymbolVar x, SymbolVar w, bool exact = false);
//! The geometry of the Conv-like node `c` (its attributes) for a 2-D x and w, where it pads
//! each spatial axis alike at both ends; otherwise (another rank, uneven padding) none.
std::optional<opr::Conv2dParam> plain_conv2d_param(const NodeCtx& c, SymbolVar x, SymbolVar w);

//! Refuses to build an index or weight table of more than 2^24 elements at import (a hostile
//! attribute could ask for billions), naming the node and `what`.
void check_size(const NodeCtx& c, double elements, const std::string& what);

//! `axis` counted from the front; negative values count from the end. Out of range: an error
//! naming the node.
int norm_axis(const NodeCtx& c, int64_t axis, size_t rank);
//! The axes of a node (attribute "axes", else input `input`, else none), counted from the
//! front and sorted.
std::vector<int> axes_of(const NodeCtx& c, size_t rank, size_t input);
//! The rank of v; unsupported when it is known only at run time.
size_t rank_of(const NodeCtx& c, const SymbolVar& v);
inline SymbolVarArray one(SymbolVar v) {
    return {v};
}
//! A constant int32 tensor.
SymbolVar int32_constant(ComputingGraph& g, const std::vector<int64_t>& values,
                         const TensorShape& shape);
//! numpy take: x's slices along `axis` at the int32 positions `ids` (any shape, values in
//! range; 1-D when their count is known only at run time); the result has ids' dims in place
//! of `axis`.
SymbolVar take(SymbolVar x, int axis, SymbolVar ids);
//! take() with positions known at import.
SymbolVar take(SymbolVar x, int axis, const std::vector<int64_t>& ids);
//! x reversed along `axis`.
SymbolVar flip(SymbolVar x, int axis);
//! x with `before` and `after` elements added along `axis` (filled with `value`), or removed
//! where they are negative.
SymbolVar pad_axis(SymbolVar x, int axis, int64_t before, int64_t after, double value);
//! The dtype the converters compute integers of dtype `dt` in: int32 for 8- and 16-bit ones,
//! int64 for uint32, `dt` itself for the others (braid's kernels take int32, int64 and uint64).
DType compute_dtype(DType dt);
//! v converted to compute_dtype(v.dtype()).
SymbolVar widen(SymbolVar v);
//! A value computed in compute_dtype(dt) as `dt`, wrapping modulo 2^bits as ONNX's (numpy's)
//! integer arithmetic does (braid's TypeCvt saturates).
SymbolVar narrow(SymbolVar v, DType dt);

} // namespace braid::onnx_import
