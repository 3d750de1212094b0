#include "graph/param_io.h"

namespace braid {

TensorShape ParamReader::read_shape(std::string_view name) const {
    auto dims = read_ints(name);
    if (dims.size() > TensorShape::MAX_NDIM)
        BRAID_THROW(SerializationError, "{}: param \"{}\" has {} dims (at most {})", context(),
                    name, dims.size(), TensorShape::MAX_NDIM);
    TensorShape shape;
    shape.set_ndim(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
        if (dims[i] < 0)
            BRAID_THROW(SerializationError, "{}: param \"{}\" has a negative dim {}", context(),
                        name, dims[i]);
        shape[i] = size_t(dims[i]);
    }
    if (!shape.packed_bytes(dtype::Uint8()))
        BRAID_THROW(SerializationError, "{}: param \"{}\" is a shape {} of more than 2^56 elements",
                    context(), name, shape.to_string());
    return shape;
}

DType ParamReader::read_dtype(std::string_view name) const {
    std::string s = read_string(name);
    try {
        return DType::from_name(s);
    } catch (const DTypeError&) {
        throw_bad_value(name, s);
    }
}

void ParamWriter::write_graph(std::string_view name, const SymbolVarArray&) {
    BRAID_THROW(SerializationError, "param \"{}\": this params writer cannot store a graph", name);
}

StoredGraph ParamReader::read_graph(std::string_view name) const {
    BRAID_THROW(SerializationError, "{}: param \"{}\": this params reader cannot load a graph",
                context(), name);
}

void ParamReader::throw_bad_value(std::string_view name, std::string_view value) const {
    BRAID_THROW(SerializationError, "{}: param \"{}\" has an invalid value \"{}\"", context(), name,
                value);
}

SymbolVar OprLoadContext::input(size_t i) const {
    if (i >= inputs.size())
        BRAID_THROW(SerializationError, "{}: needs input {}, the model gives {} inputs",
                    params.context(), i, inputs.size());
    return inputs[i];
}

void OprLoadContext::expect_inputs(size_t lo, size_t hi) const {
    if (inputs.size() < lo || inputs.size() > hi) {
        if (lo == hi)
            BRAID_THROW(SerializationError, "{}: takes {} inputs, the model gives {}",
                        params.context(), lo, inputs.size());
        BRAID_THROW(SerializationError, "{}: takes {} to {} inputs, the model gives {}",
                    params.context(), lo, hi, inputs.size());
    }
}

} // namespace braid
