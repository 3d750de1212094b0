#include "onnx_internal.h"

#include "base/error.h"
#include "base/isolated_call.h"
#include "base/log.h"
#include "collective/registry.h"
#include "graph/computing_graph.h"
#include "operators/io.h"

#include <onnx/checker.h>
#include <onnx/version_converter/convert.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace braid::onnx_import {

namespace {

//! Opset models are upgraded to when they are older (and the ONNX converter can).
constexpr int64_t TARGET_OPSET = 13;
//! The newest version of the default operator set braid imports. Versions after the linked ONNX
//! checker's own newest (`checker_opset()`) are checked by braid instead: every attribute a node
//! carries must be one the checker's schema of the op knows or one `NEWER_ATTRIBUTES` lists, and
//! the converters read the inputs those versions added (Reduce and Pad axes, DFT's axis, ...).
constexpr int64_t NEWEST_OPSET = 21;
//! Attributes ops gained after the checker's newest operator set that the converters read.
const std::map<std::string, std::set<std::string>> NEWER_ATTRIBUTES = {
    {"Split", {"num_outputs"}},
    {"Resize", {"antialias", "axes", "keep_aspect_ratio_policy"}},
    {"ReduceMax", {"noop_with_empty_axes"}},
    {"ReduceMin", {"noop_with_empty_axes"}},
    {"ReduceMean", {"noop_with_empty_axes"}},
    {"ReduceProd", {"noop_with_empty_axes"}},
    {"ReduceSumSquare", {"noop_with_empty_axes"}},
    {"ReduceL1", {"noop_with_empty_axes"}},
    {"ReduceL2", {"noop_with_empty_axes"}},
    {"ReduceLogSum", {"noop_with_empty_axes"}},
    {"ReduceLogSumExp", {"noop_with_empty_axes"}},
    // saturate concerns float8 targets only, which braid does not import.
    {"Cast", {"saturate"}},
    {"CastLike", {"saturate"}},
};

//! The newest version of the default operator set the linked ONNX checker knows.
int64_t checker_opset() {
    return onnx::OpSchemaRegistry::DomainToVersionRange::Instance()
        .Map()
        .at(onnx::ONNX_DOMAIN)
        .second;
}

//! The one operator set besides the default one that braid maps (optimizers, Gradient).
constexpr const char* TRAINING_DOMAIN = "ai.onnx.preview.training";

int64_t default_opset(const onnx::ModelProto& m) {
    for (auto& o : m.opset_import())
        if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
    return 1;
}

std::string dims_text(const onnx::TypeProto_Tensor& t) {
    std::string s = "{";
    if (t.has_shape())
        for (int i = 0; i < t.shape().dim_size(); ++i) {
            auto& d = t.shape().dim(i);
            s += (i ? "," : "") + (d.has_dim_value()
                                       ? std::to_string(d.dim_value())
                                       : (d.dim_param().empty() ? "?" : d.dim_param()));
        }
    return s + "}";
}

} // namespace

// ---------------------------------------------------------------- tensors
DType dtype_of(int32_t t, const std::string& where) {
    switch (t) {
    case onnx::TensorProto::FLOAT:
        return dtype::Float32();
    case onnx::TensorProto::DOUBLE:
        return dtype::Float64();
    case onnx::TensorProto::FLOAT16:
        return dtype::Float16();
    case onnx::TensorProto::BFLOAT16:
        return dtype::BFloat16();
    case onnx::TensorProto::INT8:
        return dtype::Int8();
    case onnx::TensorProto::UINT8:
        return dtype::Uint8();
    case onnx::TensorProto::INT32:
        return dtype::Int32();
    case onnx::TensorProto::INT64:
        return dtype::Int64();
    case onnx::TensorProto::BOOL:
        return dtype::Bool();
    case onnx::TensorProto::INT16:
        return dtype::Int16();
    case onnx::TensorProto::UINT16:
        return dtype::Uint16();
    case onnx::TensorProto::UINT32:
        return dtype::Uint32();
    case onnx::TensorProto::UINT64:
        return dtype::Uint64();
    default:
        break;
    }
    const char* name = onnx::TensorProto_DataType_IsValid(t)
                           ? onnx::TensorProto_DataType_Name(onnx::TensorProto_DataType(t)).c_str()
                           : "invalid";
    throw UnsupportedOnnxError(
        fmt::format("{}: dtype {} ({}) is not supported (float32, float64, float16, bfloat16, "
                    "int8, uint8, int16, uint16, int32, uint32, int64, uint64, bool)",
                    where, name, t));
}

Tensor tensor_of(const onnx::TensorProto& t, const std::string& dir, const std::string& where,
                 ExternalData* external_files) {
    std::string what = fmt::format("{}: tensor \"{}\"", where, t.name());
    DType dt = dtype_of(t.data_type(), what);
    std::vector<size_t> dims;
    for (int64_t d : t.dims()) {
        if (d < 0) BRAID_THROW(SerializationError, "{}: negative dim {}", what, d);
        dims.push_back(size_t(d));
    }
    TensorShape shape(dims);
    size_t n = shape.total_nr_elems(), bytes = shape.nr_bytes(dt);
    auto expect = [&](size_t have, const char* field) {
        if (have != n)
            BRAID_THROW(SerializationError, "{}: {} holds {} values; the shape {} needs {}", what,
                        field, have, shape.to_string(), n);
    };
    // Check that the data is all there before allocating for the shape the file claims.
    struct {
        std::string path;
        size_t offset = 0;
    } external;
    if (t.data_location() == onnx::TensorProto::EXTERNAL) {
        std::string file;
        size_t length = bytes;
        auto number = [&](const std::string& key, const std::string& text) {
            size_t v = 0;
            auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            if (ec != std::errc() || end != text.data() + text.size())
                BRAID_THROW(SerializationError, "{}: external data {} \"{}\" is not a number", what,
                            key, text);
            return v;
        };
        for (auto& kv : t.external_data()) {
            if (kv.key() == "location") file = kv.value();
            if (kv.key() == "offset") external.offset = number("offset", kv.value());
            if (kv.key() == "length") length = number("length", kv.value());
        }
        if (file.empty() || file.find("..") != std::string::npos || file[0] == '/')
            BRAID_THROW(SerializationError,
                        "{}: external data location \"{}\" is not a file next to the model", what,
                        file);
        if (length != bytes)
            BRAID_THROW(SerializationError, "{}: external data has {} bytes; the shape needs {}",
                        what, length, bytes);
        external.path = dir + "/" + file;
        ExternalData local;
        ExternalData& ext = external_files ? *external_files : local;
        auto it = ext.files.find(external.path);
        if (it == ext.files.end())
            it = ext.files.emplace(external.path, serial::map_file(external.path)).first;
        const serial::ModelBytes& mapped = it->second;
        if (external.offset > mapped.size || mapped.size - external.offset < bytes)
            BRAID_THROW(SerializationError,
                        "{}: external data file \"{}\" has {} bytes, too few for {} at offset {}",
                        what, file, mapped.size, bytes, external.offset);
        const uint8_t* src = mapped.data + external.offset;
        if (bytes >= 4096 && reinterpret_cast<uintptr_t>(src) % MODEL_DATA_ALIGNMENT == 0) {
            // In place: the storage shares ownership of the whole mapping.
            std::shared_ptr<void> keep(mapped.keep_alive, const_cast<uint8_t*>(src));
            ext.mapped_bytes += bytes;
            return Tensor(Storage::wrap(const_cast<uint8_t*>(src), bytes, Device::cpu(), keep), 0,
                          TensorLayout(shape, dt));
        }
        Tensor res(shape, dt);
        if (bytes) std::memcpy(res.raw_ptr(), src, bytes);
        return res;
    } else if (t.has_raw_data()) {
        if (t.raw_data().size() != bytes)
            BRAID_THROW(SerializationError, "{}: raw_data has {} bytes; the shape {} needs {}",
                        what, t.raw_data().size(), shape.to_string(), bytes);
    } else {
        switch (t.data_type()) {
        case onnx::TensorProto::FLOAT:
            expect(size_t(t.float_data_size()), "float_data");
            break;
        case onnx::TensorProto::INT64:
            expect(size_t(t.int64_data_size()), "int64_data");
            break;
        case onnx::TensorProto::DOUBLE:
            expect(size_t(t.double_data_size()), "double_data");
            break;
        case onnx::TensorProto::UINT32:
        case onnx::TensorProto::UINT64:
            expect(size_t(t.uint64_data_size()), "uint64_data");
            break;
        default:
            expect(size_t(t.int32_data_size()), "int32_data");
        }
    }
    Tensor res(shape, dt);
    auto* dst = static_cast<uint8_t*>(res.raw_ptr());
    if (t.has_raw_data()) {
        if (bytes) std::memcpy(dst, t.raw_data().data(), bytes);
        return res;
    }
    switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
        if (n) std::memcpy(dst, t.float_data().data(), bytes);
        break;
    case onnx::TensorProto::INT64:
        if (n) std::memcpy(dst, t.int64_data().data(), bytes);
        break;
    case onnx::TensorProto::DOUBLE:
        if (n) std::memcpy(dst, t.double_data().data(), bytes);
        break;
    case onnx::TensorProto::INT32:
        if (n) std::memcpy(dst, t.int32_data().data(), bytes);
        break;
    case onnx::TensorProto::UINT64:
        if (n) std::memcpy(dst, t.uint64_data().data(), bytes);
        break;
    case onnx::TensorProto::UINT32:
        for (size_t i = 0; i < n; ++i) {
            uint32_t v = uint32_t(t.uint64_data(int(i)));
            std::memcpy(dst + i * 4, &v, 4);
        }
        break;
    default: {
        // int8, uint8, int16, uint16, bool, float16, bfloat16: one value per int32_data entry.
        size_t esize = dt.size();
        for (size_t i = 0; i < n; ++i) {
            int32_t v = t.int32_data(int(i));
            std::memcpy(dst + i * esize, &v, esize); // little-endian low bytes
        }
    }
    }
    return res;
}

// ---------------------------------------------------------------- NodeCtx
ComputingGraph& NodeCtx::graph() const {
    return *m_imp.graph;
}

std::string NodeCtx::where() const {
    return fmt::format("{}: node \"{}\" ({}, opset {})", m_imp.source, m_node.name(),
                       m_node.op_type(), m_opset);
}

SymbolVar NodeCtx::in(size_t i) const {
    if (!has_input(i)) invalid(fmt::format("input {} is missing", i));
    return value_of(m_node.input(int(i)));
}

const std::vector<SymbolVar>& NodeCtx::sequence(size_t i) const {
    if (!has_input(i)) invalid(fmt::format("input {} is missing", i));
    auto it = m_imp.sequences.find(m_node.input(int(i)));
    if (it == m_imp.sequences.end())
        invalid(fmt::format("input {} (\"{}\") is not a sequence built by an earlier node", i,
                            m_node.input(int(i))));
    return it->second;
}

void NodeCtx::set_sequence_output(size_t i, std::vector<SymbolVar> elements) const {
    m_imp.sequences[m_node.output(int(i))] = std::move(elements);
}

bool NodeCtx::is_sequence(size_t i) const {
    return has_input(i) && m_imp.sequences.count(m_node.input(int(i))) > 0;
}

bool NodeCtx::is_none(size_t i) const {
    return has_input(i) && m_imp.nones.count(m_node.input(int(i))) > 0;
}

void NodeCtx::set_none_output(size_t i) const {
    m_imp.nones.insert(m_node.output(int(i)));
}

void NodeCtx::forward(size_t in, size_t out) const {
    if (!has_input(in)) invalid(fmt::format("input {} is missing", in));
    std::string from = m_node.input(int(in));
    if (!m_imp.value(from).defined()) value_of(from); // the error naming it
    m_imp.alias(from, m_node.output(int(out)));
}

Importer::Value Importer::value(const std::string& name) const {
    Value v;
    if (auto it = values.find(name); it != values.end()) v.var = it->second;
    if (auto it = constants.find(name); it != constants.end()) v.constant = it->second;
    if (auto it = sequences.find(name); it != sequences.end()) v.elements = it->second;
    v.none = nones.count(name) > 0;
    return v;
}

void Importer::set_value(const std::string& name, const Value& v) {
    values.erase(name);
    constants.erase(name);
    sequences.erase(name);
    nones.erase(name);
    if (v.var) values[name] = *v.var;
    if (v.constant) constants[name] = *v.constant;
    if (v.elements) sequences[name] = *v.elements;
    if (v.none) nones.insert(name);
}

std::unique_ptr<Importer> Importer::nested() const {
    auto sub = std::make_unique<Importer>();
    sub->graph = graph;
    sub->source = source;
    sub->dir = dir;
    sub->opset = opset;
    sub->model = model;
    sub->values = values;
    sub->constants = constants;
    sub->sequences = sequences;
    sub->nones = nones;
    return sub;
}

SymbolVar NodeCtx::value_of(const std::string& name) const {
    auto it = m_imp.values.find(name);
    if (it != m_imp.values.end()) return it->second;
    if (m_imp.constants.count(name)) return m_imp.constant_var(name);
    if (m_imp.sequences.count(name))
        invalid(fmt::format("input \"{}\" is a sequence; this input takes a tensor", name));
    if (m_imp.nones.count(name))
        invalid(fmt::format("input \"{}\" is an optional without a value", name));
    invalid(fmt::format("input \"{}\" is neither a graph input, an initializer nor the output "
                        "of an earlier node",
                        name));
}

const Tensor* NodeCtx::constant(size_t i) const {
    std::vector<std::string> inputs;
    return constant(i, inputs);
}

const Tensor* NodeCtx::constant(size_t i, std::vector<std::string>& inputs) const {
    if (!has_input(i)) return nullptr;
    const std::string& name = m_node.input(int(i));
    auto it = m_imp.constants.find(name);
    if (it != m_imp.constants.end()) return &it->second;
    auto v = m_imp.values.find(name);
    if (v == m_imp.values.end()) return nullptr;
    std::optional<Tensor> value = m_imp.fold(v->second, inputs);
    if (!value) return nullptr;
    return &(m_imp.constants[name] = std::move(*value));
}

const Tensor& NodeCtx::constant_input(size_t i) const {
    std::vector<std::string> inputs;
    const Tensor* t = constant(i, inputs);
    if (!t && !inputs.empty())
        throw ShapeInputError(
            fmt::format("{}: input {} (\"{}\") is a shape argument computed from the graph "
                        "input(s) {} at run time; braid needs its value when the model is "
                        "imported: bind {} (ImportOptions::input_values, --bind NAME=V,...)",
                        where(), i, m_node.input(int(i)), fmt::join(inputs, ", "),
                        inputs.size() == 1 ? "it" : "them"),
            inputs);
    if (!t)
        unsupported(fmt::format("input {} (\"{}\") must be a constant (an initializer or a "
                                "Constant node)",
                                i, has_input(i) ? m_node.input(int(i)) : ""));
    return *t;
}

std::vector<float> NodeCtx::floats_input(size_t i) const {
    const Tensor& t = constant_input(i);
    std::vector<float> v(t.shape().total_nr_elems());
    convert_elements(t.dtype(), t.contiguous().raw_ptr(), dtype::Float32(), v.data(), v.size());
    return v;
}

std::vector<int64_t> NodeCtx::ints_input(size_t i) const {
    const Tensor* t = &constant_input(i);
    std::vector<int64_t> v(t->shape().total_nr_elems());
    for (size_t k = 0; k < v.size(); ++k) {
        if (t->dtype() == dtype::Int64())
            v[k] = t->ptr<int64_t>()[k];
        else if (t->dtype() == dtype::Int32())
            v[k] = t->ptr<int32_t>()[k];
        else if (t->dtype().is_float()) {
            float f;
            convert_elements(t->dtype(), t->raw_ptr() + k * t->dtype().size(), dtype::Float32(), &f,
                             1);
            v[k] = int64_t(f);
        } else
            invalid(fmt::format("input {} has dtype {}; expected int32, int64 or a float", i,
                                t->dtype().name()));
    }
    return v;
}

const onnx::AttributeProto* NodeCtx::attr(const std::string& name) const {
    for (auto& a : m_node.attribute())
        if (a.name() == name) return &a;
    return nullptr;
}

int64_t NodeCtx::attr_int(const std::string& name, int64_t def) const {
    auto* a = attr(name);
    return a ? a->i() : def;
}

float NodeCtx::attr_float(const std::string& name, float def) const {
    auto* a = attr(name);
    return a ? a->f() : def;
}

std::string NodeCtx::attr_string(const std::string& name, const std::string& def) const {
    auto* a = attr(name);
    return a ? a->s() : def;
}

std::vector<int64_t> NodeCtx::attr_ints(const std::string& name) const {
    auto* a = attr(name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}

void NodeCtx::unsupported(const std::string& what) const {
    throw UnsupportedOnnxError(fmt::format("{}: {}", where(), what));
}

void NodeCtx::invalid(const std::string& what) const {
    throw NodeError(fmt::format("{}: {}", where(), what));
}

SymbolVar NodeCtx::known_output(size_t i, Tensor value) const {
    const std::string& name = m_node.output(int(i));
    m_imp.constants[name] = std::move(value);
    return m_imp.constant_var(name);
}

SymbolVar Importer::constant_var(const std::string& name) {
    auto it = values.find(name);
    if (it != values.end()) return it->second;
    auto v = opr::ImmutableTensor::make(*graph, constants.at(name));
    values[name] = v;
    return v;
}

std::optional<Tensor> Importer::fold(SymbolVar var, std::vector<std::string>& inputs) {
    if (const Tensor* sv = var.node()->static_value()) return *sv;
    // Depends on constants only? Walk the operators it is computed from.
    std::vector<OperatorNode*> stack{var.node()->owner()};
    std::set<OperatorNode*> seen;
    while (!stack.empty()) {
        OperatorNode* opr = stack.back();
        stack.pop_back();
        if (!seen.insert(opr).second) continue;
        if (auto* in = dynamic_cast<InputNode*>(opr)) {
            if (std::find(inputs.begin(), inputs.end(), in->input_name()) == inputs.end())
                inputs.push_back(in->input_name());
            continue;
        }
        for (VarNode* v : opr->inputs()) stack.push_back(v->owner());
    }
    if (!inputs.empty() || !var.node()->shape_known()) return std::nullopt;
    // Shape arguments are small; a large value is not computed at import.
    if (var.shape().total_nr_elems() > (size_t(1) << 20)) return std::nullopt;
    auto exec = graph->compile({var});
    exec->run();
    return exec->output(0).copy();
}

// ---------------------------------------------------------------- import
namespace {
Tensor constant_value(const NodeCtx& ctx, const std::string& dir);
} // namespace

//! Refuses an attribute the ONNX checker did not check because the node's operator set is newer
//! than it knows, unless the op's converter reads it.
void check_newer_attributes(const NodeCtx& ctx, const onnx::NodeProto& node) {
    const onnx::OpSchema* schema =
        onnx::OpSchemaRegistry::Schema(node.op_type(), int(checker_opset()), onnx::ONNX_DOMAIN);
    // An op added since: its converter (if any) reads the attributes it knows and checks them.
    if (!schema) return;
    auto newer = NEWER_ATTRIBUTES.find(node.op_type());
    for (auto& a : node.attribute()) {
        if (schema->attributes().count(a.name())) continue;
        if (newer != NEWER_ATTRIBUTES.end() && newer->second.count(a.name())) continue;
        ctx.unsupported(
            fmt::format("attribute \"{}\" (added after opset {})", a.name(), checker_opset()));
    }
}

void Importer::convert_nodes(const onnx::GraphProto& g) {
    for (auto& node : g.node()) {
        NodeCtx ctx(*this, node, opset);
        bool training = node.domain() == TRAINING_DOMAIN;
        if (opset > checker_opset() && !training) check_newer_attributes(ctx, node);
        if (!node.domain().empty() && node.domain() != "ai.onnx" && !training) {
            std::string version = "not imported";
            for (auto& o : model->opset_import())
                if (o.domain() == node.domain()) version = std::to_string(o.version());
            ctx.unsupported(fmt::format("operator set domain \"{}\" (version {}) is not supported",
                                        node.domain(), version));
        }
        if (node.op_type() == "Constant") {
            // A known value: later nodes may read it as an attribute-like input. An import of a
            // kept model finds it among the initializers, without its attribute.
            auto [it, fresh] = constants.try_emplace(node.output(0));
            if (fresh) it->second = constant_value(ctx, dir);
            continue;
        }
        const Converter* conv =
            find_converter(training ? node.domain() + "." + node.op_type() : node.op_type());
        if (!conv) ctx.unsupported("this op is not supported");
        SymbolVarArray outs;
        // Every operator the node becomes names it in errors, also at run time.
        std::string origin =
            fmt::format("ONNX node \"{}\" ({}, opset {})", node.name(), node.op_type(), opset);
        ComputingGraph::OriginScope scope(*graph, origin);
        try {
            outs = (*conv)(ctx);
        } catch (const SerializationError&) {
            throw;
        } catch (const Error& e) {
            // Shape and dtype errors of braid's operators: name the ONNX node too (the
            // operator's description names it already where the error came from one).
            std::string msg = e.what();
            if (msg.find(origin) != std::string::npos)
                BRAID_THROW(NodeError, "{}: {}", source, msg);
            BRAID_THROW(NodeError, "{}: {}", ctx.where(), msg);
        }
        for (size_t i = 0; i < outs.size() && i < size_t(node.output_size()); ++i)
            if (!node.output(int(i)).empty()) values[node.output(int(i))] = outs[i];
    }
}

SymbolVar Importer::output_var(const std::string& name, const std::string& what) {
    auto it = values.find(name);
    if (it != values.end()) return it->second;
    if (constants.count(name)) return constant_var(name);
    if (sequences.count(name))
        throw UnsupportedOnnxError(what + ": a sequence, where a tensor is expected");
    if (nones.count(name))
        throw UnsupportedOnnxError(what + ": an optional without a value, where a tensor is "
                                          "expected");
    BRAID_THROW(SerializationError, "{}: no node computes it", what);
}

namespace {

//! Every node input and graph output is defined before it is used (a graph input, an
//! initializer or an earlier node's output). ONNX's checker lets an undefined graph output
//! through, and its version converter then crashes on it.
void check_dataflow(const onnx::GraphProto& g, const std::string& source) {
    std::set<std::string> defined;
    for (auto& in : g.input()) defined.insert(in.name());
    for (auto& t : g.initializer()) defined.insert(t.name());
    for (auto& n : g.node()) {
        for (auto& in : n.input())
            if (!in.empty() && !defined.count(in))
                BRAID_THROW(SerializationError,
                            "{}: node \"{}\" ({}) reads \"{}\", which no input, initializer or "
                            "earlier node defines",
                            source, n.name(), n.op_type(), in);
        for (auto& out : n.output()) defined.insert(out);
    }
    for (auto& out : g.output())
        if (!defined.count(out.name()))
            BRAID_THROW(SerializationError, "{}: output \"{}\": no node computes it", source,
                        out.name());
}

//! Whether the version converter would lose part of `g`, which is then imported at its own
//! opset: a node carrying a graph (If, Loop, Scan: the converter does not convert the nodes
//! inside), or a sequence or optional input or output (the converter drops their types).
bool converter_loses_parts(const onnx::GraphProto& g) {
    for (auto& n : g.node())
        for (auto& a : n.attribute())
            if (a.has_g() || a.graphs_size() > 0) return true;
    for (auto* list : {&g.input(), &g.output()})
        for (auto& v : *list)
            if (v.type().has_sequence_type() || v.type().has_optional_type()) return true;
    return false;
}

//! A value bound to the graph input `in`, in its declared dtype (converted) and, when the
//! declared shape is static, in that shape (the element counts must agree).
Tensor bound_value(const onnx::ValueInfoProto& in, const Tensor& value, const std::string& source) {
    std::string what = fmt::format("{}: value bound to input \"{}\"", source, in.name());
    if (!in.type().has_tensor_type()) throw UnsupportedOnnxError(what + ": not a tensor input");
    auto& tt = in.type().tensor_type();
    DType dt = dtype_of(tt.elem_type(), what);
    Tensor v = value.contiguous();
    if (v.dtype() != dt) {
        Tensor c(v.shape(), dt);
        convert_elements(v.dtype(), v.raw_ptr(), dt, c.raw_ptr(), v.shape().total_nr_elems());
        v = c;
    }
    if (!tt.has_shape()) return v;
    std::vector<size_t> dims;
    for (auto& d : tt.shape().dim()) {
        if (!d.has_dim_value()) return v; // a symbolic dim: the value's own shape
        dims.push_back(size_t(d.dim_value()));
    }
    TensorShape declared(dims);
    if (declared.total_nr_elems() != v.shape().total_nr_elems())
        BRAID_THROW(ShapeError, "{}: {} values; the input's shape {} holds {}", what,
                    v.shape().total_nr_elems(), declared.to_string(), declared.total_nr_elems());
    Tensor r(declared, dt);
    if (size_t bytes = r.shape().nr_bytes(dt)) // an empty tensor may have no memory at all
        std::memcpy(r.raw_ptr(), v.raw_ptr(), bytes);
    return r;
}

//! The value of a Constant node: a tensor, or one of the scalar and list attributes.
Tensor constant_value(const NodeCtx& ctx, const std::string& dir) {
    if (auto* a = ctx.attr("value")) return tensor_of(a->t(), dir, ctx.where());
    auto list = [](DType dt, auto values, bool scalar) {
        Tensor t(scalar ? TensorShape{} : TensorShape{size_t(values.size())}, dt);
        using T = std::conditional_t<std::is_same_v<std::decay_t<decltype(values[0])>, float>,
                                     float, int64_t>;
        for (size_t i = 0; i < values.size(); ++i) t.ptr<T>()[i] = values[i];
        return t;
    };
    if (auto* a = ctx.attr("value_float")) return list(dtype::Float32(), std::vector{a->f()}, true);
    if (auto* a = ctx.attr("value_int")) return list(dtype::Int64(), std::vector{a->i()}, true);
    if (auto* a = ctx.attr("value_floats"))
        return list(dtype::Float32(), std::vector<float>(a->floats().begin(), a->floats().end()),
                    false);
    if (auto* a = ctx.attr("value_ints"))
        return list(dtype::Int64(), std::vector<int64_t>(a->ints().begin(), a->ints().end()),
                    false);
    ctx.unsupported("a Constant without a tensor, float, int, floats or ints value");
}

//! Whether ONNX's version converter can adapt `g` from `opset` without reading shapes the
//! model does not give. Its Gemm 6 -> 7 adapter indexes the shapes of A and B as matrices
//! without checking their rank, and reads past the end of a shorter (or unknown, empty) shape:
//! a crash found by fuzzing the importer. Such a model keeps its own opset instead, as a model
//! the converter has no adapter for does.
bool converter_reads_only_known_shapes(const onnx::GraphProto& g, int64_t opset) {
    if (opset >= 7) return true;
    std::unordered_map<std::string, int> rank;
    for (auto& t : g.initializer()) rank[t.name()] = t.dims_size();
    auto add = [&](const onnx::ValueInfoProto& v) {
        if (v.type().has_tensor_type() && v.type().tensor_type().has_shape())
            rank[v.name()] = v.type().tensor_type().shape().dim_size();
    };
    for (auto& v : g.input()) add(v);
    for (auto& v : g.value_info()) add(v);
    for (auto& n : g.node()) {
        if (n.op_type() != "Gemm" || !(n.domain().empty() || n.domain() == "ai.onnx")) continue;
        for (int i = 0; i < 2; ++i) {
            auto it = i < n.input_size() ? rank.find(n.input(i)) : rank.end();
            if (it == rank.end() || it->second < 2) return false;
        }
    }
    return true;
}

//! How long ONNX's version converter may run on one model.
constexpr std::chrono::seconds VERSION_CONVERSION_LIMIT{120};

/*!
 * `model` converted to TARGET_OPSET by ONNX's version converter, run in a child process
 * (run_isolated): the converter's adapters read node inputs' shapes and attributes without
 * checking them (a hostile file crashed the Gemm 6 -> 7 adapter), and a model loaded by a
 * server must not take it down. The child sends back the converted model without the
 * initializers it left unchanged; they are moved over from `model`. Throws SerializationError
 * when the converter throws, crashes or runs past VERSION_CONVERSION_LIMIT.
 */
onnx::ModelProto converted_in_child(onnx::ModelProto& model, const std::string& source) {
    std::string bytes = run_isolated(
        [&] {
            onnx::ModelProto converted =
                onnx::version_conversion::ConvertVersion(model, int(TARGET_OPSET));
            std::unordered_map<std::string, const onnx::TensorProto*> original;
            for (auto& t : model.graph().initializer()) original[t.name()] = &t;
            // Kept: a length-prefixed list of the unchanged initializers' names, then the
            // model without them.
            std::string kept;
            auto* inits = converted.mutable_graph()->mutable_initializer();
            for (int i = inits->size() - 1; i >= 0; --i) {
                auto it = original.find(inits->Get(i).name());
                if (it == original.end() ||
                    it->second->SerializeAsString() != inits->Get(i).SerializeAsString())
                    continue;
                kept += inits->Get(i).name();
                kept.push_back('\0');
                inits->DeleteSubrange(i, 1);
            }
            uint64_t n = kept.size();
            return std::string(reinterpret_cast<const char*>(&n), sizeof(n)) + kept +
                   converted.SerializeAsString();
        },
        fmt::format("{}: ONNX's version converter (opset {} to {})", source, default_opset(model),
                    TARGET_OPSET),
        VERSION_CONVERSION_LIMIT);
    uint64_t n = 0;
    if (bytes.size() >= sizeof(n)) std::memcpy(&n, bytes.data(), sizeof(n));
    onnx::ModelProto converted;
    if (bytes.size() < sizeof(n) + n ||
        !converted.ParseFromArray(bytes.data() + sizeof(n) + n, int(bytes.size() - sizeof(n) - n)))
        BRAID_THROW(SerializationError, "{}: ONNX's version converter returned a malformed model",
                    source);
    std::unordered_set<std::string> kept;
    for (size_t begin = sizeof(n), end = sizeof(n) + n; begin < end;) {
        size_t zero = bytes.find('\0', begin);
        kept.insert(bytes.substr(begin, zero - begin));
        begin = zero + 1;
    }
    for (auto& t : *model.mutable_graph()->mutable_initializer())
        if (kept.count(t.name())) converted.mutable_graph()->add_initializer()->Swap(&t);
    return converted;
}

//! A graph input or output as the file declares it: kind, dtype and dims (-1 for a symbolic or
//! unknown dim, 1 in the default shape). A sequence's or optional's element without a shape
//! fits any shape (any_shape); a tensor without one is a scalar.
ModelIO declared(const onnx::ValueInfoProto& v, const std::string& source, const char* kind) {
    std::string what = fmt::format("{}: {} \"{}\"", source, kind, v.name());
    ModelIO io;
    io.name = v.name();
    const onnx::TypeProto* type = &v.type();
    bool optional = type->has_optional_type();
    if (optional) type = &type->optional_type().elem_type();
    bool sequence = type->has_sequence_type();
    if (sequence) type = &type->sequence_type().elem_type();
    if (!type->has_tensor_type())
        throw UnsupportedOnnxError(fmt::format(
            "{}: only tensors, sequences of tensors and optional tensors or sequences are "
            "supported",
            what));
    io.kind = optional ? (sequence ? ValueKind::OPTIONAL_SEQUENCE : ValueKind::OPTIONAL)
                       : (sequence ? ValueKind::SEQUENCE : ValueKind::TENSOR);
    auto& tt = type->tensor_type();
    io.dtype = dtype_of(tt.elem_type(), what);
    std::vector<size_t> dims;
    if (tt.has_shape())
        for (auto& d : tt.shape().dim()) {
            long n = d.has_dim_value() ? long(d.dim_value()) : -1;
            io.shape.push_back(n);
            dims.push_back(n < 0 ? 1 : size_t(n));
        }
    io.any_shape = io.kind != ValueKind::TENSOR && !tt.has_shape();
    io.default_shape = TensorShape(dims);
    return io;
}

//! Sequence input `io` as one graph input per element, at the element shapes the options give.
void add_sequence_input(Importer& imp, LoadedModel& res, const ModelIO& io,
                        const ImportOptions& options, const std::string& source) {
    auto given = options.sequence_inputs.find(io.name);
    if (given == options.sequence_inputs.end())
        throw UnsupportedOnnxError(fmt::format(
            "{}: input \"{}\" is a sequence, whose length is fixed when the model runs (the "
            "embedding API and braid-run import such a model per length); one graph takes "
            "tensor inputs only",
            source, io.name));
    std::vector<SymbolVar> elements;
    for (size_t i = 0; i < given->second.size(); ++i) {
        const TensorShape& shape = given->second[i];
        if (!io.accepts(shape))
            BRAID_THROW(ShapeError,
                        "{}: input \"{}\", element {}: shape {} does not fit the "
                        "model's {}",
                        source, io.name, i, shape.to_string(), io.shape_string());
        ModelIO e;
        e.name = element_name(io.name, i);
        e.dtype = io.dtype;
        for (size_t d : shape.dims()) e.shape.push_back(long(d));
        e.default_shape = shape;
        e.var = opr::Input::make(*res.graph, e.name, e.dtype, shape);
        elements.push_back(e.var);
        res.inputs.push_back(e);
    }
    imp.sequences[io.name] = std::move(elements);
}

//! Checks `model` and upgrades it to TARGET_OPSET where ONNX's converter can; returns the opset
//! it is to be imported at. `file`: the model's path when it came from a file ("" for bytes),
//! so that the checker finds external data files next to it rather than in the working
//! directory.
int64_t prepare(onnx::ModelProto& model, const ImportOptions& options, const std::string& source,
                const std::string& file) {
    bool external = false;
    for (auto& t : model.graph().initializer())
        external = external || t.data_location() == onnx::TensorProto::EXTERNAL;
    // A model of a newer IR version than the checker's (IR 9 and 10 add data types and
    // function overloads, nothing that changes what a graph of known types means) is checked
    // as if it were of the checker's version; a type or construct the checker does not know is
    // still refused by it or by the import.
    const int64_t ir_version = model.ir_version();
    const bool newer_ir = ir_version > int64_t(onnx::Version::IR_VERSION);
    if (newer_ir) model.set_ir_version(int64_t(onnx::Version::IR_VERSION));
    // A default operator set newer than the checker's would fail its per-node schema checks
    // (an attribute or input added since); braid checks such a model itself: the data flow
    // below, the attributes as each node converts, the rest by the converters.
    const int64_t model_opset = default_opset(model);
    if (model_opset > NEWEST_OPSET)
        BRAID_THROW(SerializationError,
                    "{}: operator set ai.onnx version {} is newer than braid imports (up to {})",
                    source, model_opset, NEWEST_OPSET);
    try {
        // The checker looks for external data relative to the model only when it reads the
        // file itself (the proto is small then: the weights are outside it). Reading the file
        // again would bring back the newer IR version, so such a model's external data is
        // checked by the import alone (which reads it).
        if (model_opset > checker_opset()) {
            // checked by braid, as said above
        } else if (external && !file.empty()) {
            if (!newer_ir) onnx::checker::check_model(file);
        } else {
            onnx::checker::check_model(model);
        }
    } catch (const std::exception& e) {
        BRAID_THROW(SerializationError, "{}: not a valid ONNX model{}: {}", source,
                    newer_ir ? fmt::format(" (IR version {}, checked as {})", ir_version,
                                           int64_t(onnx::Version::IR_VERSION))
                             : "",
                    e.what());
    }
    if (newer_ir) model.set_ir_version(ir_version);
    // An operator set of another domain is only a declaration: a model may import one that
    // no node uses (exporters add ai.onnx.ml by default). A node of an unsupported domain is
    // refused below, naming it.
    check_dataflow(model.graph(), source);
    int64_t opset = model_opset;
    if (opset < TARGET_OPSET && !converter_loses_parts(model.graph()) &&
        converter_reads_only_known_shapes(model.graph(), opset)) {
        try {
            model = options.isolate_version_converter
                        ? converted_in_child(model, source)
                        : onnx::version_conversion::ConvertVersion(model, int(TARGET_OPSET));
            opset = TARGET_OPSET;
        } catch (const std::exception& e) {
            // The converter has no adapter for some op (or failed on a malformed model):
            // keep the model's own opset; the op converters handle the older forms they know
            // and check what they read.
            logger()->debug("{}; importing at the model's own opset {}", e.what(), opset);
        }
    }
    return opset;
}

//! Frees a tensor's bytes in a parsed model: protobuf's clear_raw_data() keeps the buffer.
void release_raw_data(onnx::TensorProto& t) {
    t.clear_raw_data();
    t.mutable_raw_data()->shrink_to_fit();
}

//! Keeps `model` in `options.prepared` for later imports, where that is set and still empty,
//! without tensor data: its Constant nodes' values already imported (`constants`) join the
//! shared initializers, and it is moved, not copied (a copy held them twice: a text
//! recognizer's 9 MB of weights are Constant nodes).
void keep_prepared(onnx::ModelProto& model, const std::map<std::string, Tensor>& constants,
                   const ImportOptions& options, int64_t opset) {
    if (!options.prepared || !options.initializers) return;
    std::lock_guard lk(options.prepared->mutex);
    if (options.prepared->model) return;
    for (auto& t : *model.mutable_graph()->mutable_initializer()) release_raw_data(t);
    for (auto& node : *model.mutable_graph()->mutable_node()) {
        auto it = node.op_type() == "Constant" && node.output_size() == 1
                      ? constants.find(node.output(0))
                      : constants.end();
        if (it == constants.end()) continue;
        (*options.initializers)[it->first] = it->second;
        // Deleted, not cleared: protobuf's clear_*() keeps a field's objects and buffers for
        // reuse, which held the text recognizer's 9 MB of Constant weights.
        node.mutable_attribute()->DeleteSubrange(0, node.attribute_size());
    }
    options.prepared->model = std::make_shared<onnx::ModelProto>(std::move(model));
    options.prepared->opset = opset;
}

//! Imports a model `prepare` checked and upgraded to `opset`. Where `options.prepared` is set
//! and still empty, the model moves into it when the import returns or throws
//! (keep_prepared()), leaving `model` empty.
LoadedModel import_prepared(onnx::ModelProto& model, int64_t opset, const ImportOptions& options,
                            const std::string& source, const std::string& dir) {
    register_all_operators();
    // ONNX's own shape inference is not run: braid infers every shape itself, naming the
    // node on a contradiction, and libonnx 1.12's inference functions crash on some malformed
    // nodes (ConvTranspose without its attributes' shapes, found by fuzzing the importer).

    const auto& g = model.graph();
    LoadedModel res;
    GraphOptions gopt = options.graph_options;
    if (!options.comp_node.empty()) gopt.default_comp_node = options.comp_node;
    res.graph = ComputingGraph::make(gopt);
    Importer imp;
    // However the import ends (a failed one too: a later import at other shapes starts from
    // the kept model), the model is kept with keep_prepared().
    struct Keep {
        onnx::ModelProto& model;
        const Importer& imp;
        const ImportOptions& options;
        int64_t opset;
        ~Keep() {
            try {
                keep_prepared(model, imp.constants, options, opset);
            } catch (const std::exception& e) {
                logger()->warn("{}: the model is not kept for later imports: {}", imp.source,
                               e.what());
            }
        }
    } keep{model, imp, options, opset};
    imp.graph = res.graph.get();
    imp.dir = dir;
    imp.source = source;
    // Each initializer's bytes are released from the parsed model once copied, so the import
    // holds one copy of the weights at a time; external data stays in place where aligned.
    if (options.initializers && !options.initializers->empty()) {
        imp.constants = *options.initializers;
    } else {
        for (auto& t : *model.mutable_graph()->mutable_initializer()) {
            imp.constants[t.name()] = tensor_of(t, dir, source + ": initializer", &imp.external);
            release_raw_data(t);
        }
        if (options.initializers) *options.initializers = imp.constants;
    }
    for (auto& [name, value] : options.input_values) {
        const onnx::ValueInfoProto* in = nullptr;
        for (auto& i : g.input())
            if (i.name() == name) in = &i;
        if (!in)
            BRAID_THROW(SerializationError,
                        "{}: a value is bound to \"{}\", which is not an input of the model",
                        source, name);
        imp.constants[name] = bound_value(*in, value, source);
    }
    for (auto& in : g.input()) {
        if (imp.constants.count(in.name())) continue; // an initializer listed as an input
        ModelIO io = declared(in, source, "input");
        bool optional = is_optional(io.kind);
        if (optional && options.none_inputs.count(io.name)) {
            imp.nones.insert(io.name);
            continue;
        }
        if (holds_sequence(io.kind)) {
            add_sequence_input(imp, res, io, options, source);
            continue;
        }
        io.kind = ValueKind::TENSOR;
        io.any_shape = false; // an optional's value: the graph's input has the shape given
        auto given = options.input_shapes.find(io.name);
        if (given != options.input_shapes.end()) {
            if (!io.accepts(given->second))
                BRAID_THROW(ShapeError, "{}: input \"{}\": shape {} does not fit the model's {}",
                            source, io.name, given->second.to_string(),
                            dims_text(in.type().tensor_type()));
            io.default_shape = given->second;
        }
        io.var = opr::Input::make(*res.graph, io.name, io.dtype, io.default_shape);
        imp.values[io.name] = io.var;
        res.inputs.push_back(io);
    }

    imp.opset = opset;
    imp.model = &model;
    imp.convert_nodes(g);

    auto add_output = [&](const std::string& name, SymbolVar v) {
        ModelIO io;
        io.name = name;
        io.dtype = v.dtype();
        if (v.node()->shape_known()) {
            io.default_shape = v.shape();
            for (size_t d : v.shape().dims()) io.shape.push_back(long(d));
        }
        io.var = v;
        res.outputs.push_back(io);
    };
    for (auto& out : g.output()) {
        std::string what = fmt::format("{}: output \"{}\"", source, out.name());
        auto seq = imp.sequences.find(out.name());
        if ((seq != imp.sequences.end() || imp.nones.count(out.name())) &&
            !options.sequence_outputs)
            throw UnsupportedOnnxError(
                what + ": a sequence or an optional; the embedding API and braid-run give "
                       "such outputs, one graph has tensor outputs only");
        if (imp.nones.count(out.name())) { // an optional without a value: no output
            res.none_outputs.insert(out.name());
            continue;
        }
        if (seq != imp.sequences.end()) {
            auto& indices = res.sequence_outputs[out.name()];
            for (size_t i = 0; i < seq->second.size(); ++i) {
                indices.push_back(res.outputs.size());
                add_output(element_name(out.name(), i), seq->second[i]);
            }
            continue;
        }
        add_output(out.name(), imp.output_var(out.name(), what));
    }
    if (res.outputs.empty() && g.output_size() == 0)
        BRAID_THROW(SerializationError, "{}: the model has no outputs", source);
    res.info.producer = model.producer_name();
    res.info.nr_operators = res.graph->operators().size();
    res.info.mapped_bytes = imp.external.mapped_bytes;
    return res;
}

} // namespace

LoadedModel import_bytes(std::span<const uint8_t> bytes, const ImportOptions& options,
                         const std::string& source) {
    onnx::ModelProto model;
    if (bytes.size() > size_t(INT32_MAX) || !model.ParseFromArray(bytes.data(), int(bytes.size())))
        BRAID_THROW(SerializationError, "{}: not an ONNX model (protobuf parse failed, {} bytes)",
                    source, bytes.size());
    int64_t opset = prepare(model, options, source, "");
    return import_prepared(model, opset, options, source, ".");
}

namespace {

//! Parses the file straight from the stream: a copy of the file's bytes next to the parsed
//! model (two, through a stringstream) would add to the process's peak memory.
onnx::ModelProto parse_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) BRAID_THROW(SerializationError, "{}: cannot open: {}", path, std::strerror(errno));
    auto size = f.tellg();
    f.seekg(0);
    onnx::ModelProto model;
    if (size <= 0 || !model.ParseFromIstream(&f))
        BRAID_THROW(SerializationError, "{}: not an ONNX model (protobuf parse failed, {} bytes)",
                    path, int64_t(size));
    return model;
}

} // namespace

namespace {

DeclaredIO declared_of(const onnx::ModelProto& model, const ImportOptions& options,
                       const std::string& path) {
    std::set<std::string> inits;
    for (auto& t : model.graph().initializer()) inits.insert(t.name());
    DeclaredIO io;
    for (auto& in : model.graph().input())
        if (!inits.count(in.name()) && !options.input_values.count(in.name()))
            io.inputs.push_back(declared(in, path, "input"));
    for (auto& out : model.graph().output()) {
        io.outputs.push_back(declared(out, path, "output"));
        io.outputs.back().default_shape = {};
    }
    return io;
}

} // namespace

DeclaredIO declared_io(const std::string& path, const ImportOptions& options) {
    return declared_of(parse_file(path), options, path);
}

LoadedModel import_file(const std::string& path, const ImportOptions& options,
                        DeclaredIO* declared) {
    auto slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    if (options.prepared && options.initializers) {
        std::unique_lock lk(options.prepared->mutex);
        if (options.prepared->model) {
            onnx::ModelProto model = *options.prepared->model;
            int64_t opset = options.prepared->opset;
            lk.unlock();
            if (declared) *declared = declared_of(model, options, path);
            return import_prepared(model, opset, options, path, dir);
        }
    }
    onnx::ModelProto model = parse_file(path);
    if (declared) *declared = declared_of(model, options, path);
    int64_t opset = prepare(model, options, path, path);
    return import_prepared(model, opset, options, path, dir);
}

std::string element_name(const std::string& name, size_t i) {
    return fmt::format("{}[{}]", name, i);
}

bool is_onnx_path(const std::string& path) {
    return path.size() >= 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
}

std::vector<std::string> supported_ops() {
    auto names = converter_names();
    names.push_back("Constant");
    std::sort(names.begin(), names.end());
    return names;
}

} // namespace braid::onnx_import
