// OnnxVariants: an ONNX model imported per distinct fed shape and shape-input value.
#include "embed_internal.h"

#include "base/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace braid::embed {

bool has_symbolic_dim(const ModelIO& io) {
    return std::find(io.shape.begin(), io.shape.end(), -1) != io.shape.end();
}

OnnxVariants::OnnxVariants(std::string path, onnx_import::ImportOptions base,
                           std::vector<ModelIO> inputs,
                           const std::vector<std::string>& shape_inputs)
    : m_path(std::move(path)), m_base(std::move(base)), m_inputs(std::move(inputs)),
      m_shape_inputs(shape_inputs.begin(), shape_inputs.end()) {
    if (!m_base.initializers)
        m_base.initializers = std::make_shared<std::map<std::string, Tensor>>();
    if (!m_base.prepared) m_base.prepared = std::make_shared<onnx_import::PreparedModel>();
    m_base.sequence_outputs = true; // gathered back by the context (graph_outputs_of)
}

std::string OnnxVariants::key(const std::vector<TensorShape>& shapes,
                              const std::vector<InputValue>* fed) const {
    // Per input that the import depends on: its shape, for a shape input its value, for a
    // sequence its elements' shapes, for an optional whether it holds a value.
    std::string k;
    for (size_t i = 0; i < m_inputs.size(); ++i) {
        bool value = fed && m_shape_inputs.count(m_inputs[i].name) > 0;
        bool structured = m_inputs[i].kind != braid::ValueKind::TENSOR;
        if (!value && !structured && !has_symbolic_dim(m_inputs[i])) continue;
        k += fmt::format("{}:", i);
        const InputValue* in = fed ? &(*fed)[i] : nullptr;
        if (in && in->none) {
            k += "none";
        } else if (in && in->sequence) {
            k += fmt::format("seq{}", in->elements.size());
            for (auto& e : in->elements) k += e.shape().to_string();
        } else {
            k += shapes[i].to_string();
        }
        if (value && !in->tensor.empty()) {
            Tensor t = in->tensor.contiguous();
            k += '=';
            k.append(reinterpret_cast<const char*>(t.raw_ptr()), t.nr_bytes());
        }
        k += '\0';
    }
    return k;
}

std::shared_ptr<const LoadedModel> OnnxVariants::get(const std::vector<InputValue>& fed) {
    std::lock_guard lk(m_mutex);
    std::vector<TensorShape> shapes;
    for (auto& in : fed) shapes.push_back(in.tensor.shape());
    std::string k = key(shapes, &fed);
    for (auto it = m_variants.begin(); it != m_variants.end(); ++it)
        if (it->first == k) {
            m_variants.splice(m_variants.begin(), m_variants, it);
            return m_variants.front().second;
        }
    onnx_import::ImportOptions opt = m_base;
    for (size_t i = 0; i < m_inputs.size(); ++i) {
        const std::string& name = m_inputs[i].name;
        if (fed[i].none) {
            opt.none_inputs.insert(name);
        } else if (fed[i].sequence) {
            auto& shapes = opt.sequence_inputs[name];
            for (auto& e : fed[i].elements) shapes.push_back(e.shape());
        } else {
            opt.input_shapes[name] = fed[i].tensor.shape();
            if (m_shape_inputs.count(name))
                opt.input_values[name] = fed[i].tensor.copy(); // the caller's memory may change
        }
    }
    std::shared_ptr<const LoadedModel> variant;
    while (!variant) {
        try {
            variant = std::make_shared<LoadedModel>(onnx_import::import_file(m_path, opt));
        } catch (const onnx_import::ShapeInputError& e) {
            // Inputs read as shapes: imported again with their fed values.
            bool more = false;
            for (auto& name : e.inputs()) {
                auto in = std::find_if(m_inputs.begin(), m_inputs.end(),
                                       [&](const ModelIO& io) { return io.name == name; });
                if (in == m_inputs.end() || opt.input_values.count(name)) throw;
                const InputValue& v = fed[size_t(in - m_inputs.begin())];
                if (v.tensor.empty()) throw; // a sequence or no value: no value to read
                opt.input_values[name] = v.tensor.copy();
                m_shape_inputs.insert(name);
                more = true;
            }
            if (!more) throw;
        }
    }
    m_variants.emplace_front(key(shapes, &fed), variant);
    if (m_variants.size() > MAX_VARIANTS) m_variants.pop_back();
    return variant;
}

void OnnxVariants::add(std::shared_ptr<const LoadedModel> variant) {
    std::vector<TensorShape> shapes;
    for (auto& io : m_inputs) {
        auto in = std::find_if(variant->inputs.begin(), variant->inputs.end(),
                               [&](const ModelIO& v) { return v.name == io.name; });
        // An input made a constant, or a sequence or optional input: no such variant.
        if (in == variant->inputs.end() || io.kind != braid::ValueKind::TENSOR) return;
        shapes.push_back(in->default_shape);
    }
    std::lock_guard lk(m_mutex);
    if (!m_shape_inputs.empty()) return; // its key would need their values
    m_variants.emplace_front(key(shapes, nullptr), std::move(variant));
}

std::vector<std::string> OnnxVariants::shape_inputs() const {
    std::lock_guard lk(m_mutex);
    return {m_shape_inputs.begin(), m_shape_inputs.end()};
}

bool OnnxVariants::reads_values() const {
    std::lock_guard lk(m_mutex);
    return !m_shape_inputs.empty();
}

size_t OnnxVariants::size() const {
    std::lock_guard lk(m_mutex);
    return m_variants.size();
}

} // namespace braid::embed
