#include "graph/loaded_model.h"

#include "base/error.h"

namespace braid {
namespace {

const ModelIO& find_io(const std::vector<ModelIO>& ios, const std::string& name, const char* kind) {
    for (auto& io : ios)
        if (io.name == name) return io;
    std::string known;
    for (auto& io : ios) known += (known.empty() ? "" : ", ") + io.name;
    BRAID_THROW(GraphError, "the model has no {} named \"{}\" ({}s: {})", kind, name, kind,
                known.empty() ? "none" : known);
}

} // namespace

const char* value_kind_name(ValueKind kind) {
    switch (kind) {
    case ValueKind::TENSOR:
        return "tensor";
    case ValueKind::SEQUENCE:
        return "sequence";
    case ValueKind::OPTIONAL:
        return "optional";
    case ValueKind::OPTIONAL_SEQUENCE:
        return "optional sequence";
    }
    return "?";
}

bool ModelIO::accepts(const TensorShape& actual) const {
    if (any_shape) return true;
    if (actual.ndim() != shape.size()) return false;
    for (size_t i = 0; i < shape.size(); ++i)
        if (shape[i] >= 0 && size_t(shape[i]) != actual[i]) return false;
    return true;
}

std::string ModelIO::shape_string() const {
    if (any_shape) return "any";
    std::string s = "{";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "}";
}

const ModelIO& LoadedModel::input(const std::string& name) const {
    return find_io(inputs, name, "input");
}

const ModelIO& LoadedModel::output(const std::string& name) const {
    return find_io(outputs, name, "output");
}

std::unique_ptr<Executable> LoadedModel::compile() const {
    std::vector<OutputSpec> specs;
    for (auto& o : outputs) specs.emplace_back(o.var);
    return graph->compile(specs);
}

} // namespace braid
