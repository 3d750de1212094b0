// load(): a model file to a graph. The file-level checks live in model_file.cpp; this file
// rebuilds the operators through their registered loaders, checking every index it follows.
#include "base/log.h"
#include "collective/registry.h"
#include "graph/input_node.h"
#include "memory/memory_budget.h"
#include "serialization/format.h"
#include "serialization/sharded_model.h"

#include <fmt/ranges.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace braid {

namespace {

const char* kind_name(fbs::ParamKind k) {
    switch (k) {
    case fbs::ParamKind::INT:
        return "int";
    case fbs::ParamKind::FLOAT:
        return "float";
    case fbs::ParamKind::BOOL:
        return "bool";
    case fbs::ParamKind::STRING:
        return "string";
    case fbs::ParamKind::INT_LIST:
        return "int list";
    case fbs::ParamKind::FLOAT_LIST:
        return "float list";
    case fbs::ParamKind::TENSOR:
        return "tensor";
    }
    return "unknown kind";
}

//! How deep stored graphs (ParamReader::read_graph) may nest.
constexpr int MAX_GRAPH_NESTING = 32;

//! Reads one operator's params from the flatbuffer.
class FileParamReader final : public ParamReader {
public:
    FileParamReader(const fbs::Operator* opr, const ModelImage& tensors, std::string context)
        : m_opr(opr), m_tensors(tensors), m_context(std::move(context)) {
        if (opr->params())
            for (auto* p : *opr->params()) {
                std::string name = serial::str(p->name());
                if (!m_fields.emplace(name, p).second)
                    BRAID_THROW(SerializationError, "{}: corrupt: param \"{}\" appears twice",
                                m_context, name);
            }
    }

    bool has(std::string_view name) const override {
        return m_fields.count(std::string(name)) != 0;
    }
    int64_t read_int(std::string_view name) const override {
        return field(name, fbs::ParamKind::INT)->int_value();
    }
    double read_float(std::string_view name) const override {
        return field(name, fbs::ParamKind::FLOAT)->float_value();
    }
    bool read_bool(std::string_view name) const override {
        return field(name, fbs::ParamKind::BOOL)->int_value() != 0;
    }
    std::string read_string(std::string_view name) const override {
        return serial::str(field(name, fbs::ParamKind::STRING)->string_value());
    }
    std::vector<int64_t> read_ints(std::string_view name) const override {
        auto* v = field(name, fbs::ParamKind::INT_LIST)->int_list();
        return v ? std::vector<int64_t>(v->begin(), v->end()) : std::vector<int64_t>{};
    }
    std::vector<double> read_floats(std::string_view name) const override {
        auto* v = field(name, fbs::ParamKind::FLOAT_LIST)->float_list();
        return v ? std::vector<double>(v->begin(), v->end()) : std::vector<double>{};
    }
    Tensor read_tensor(std::string_view name) const override { return *read_shared_tensor(name); }
    std::shared_ptr<Tensor> read_shared_tensor(std::string_view name) const override {
        return m_tensors.tensor(field(name, fbs::ParamKind::TENSOR)->tensor());
    }
    StoredGraph read_graph(std::string_view name) const override {
        std::shared_ptr<Tensor> t = read_shared_tensor(name);
        if (t->dtype() != dtype::Uint8() || t->shape().ndim() != 1)
            BRAID_THROW(SerializationError,
                        "{}: param \"{}\" is a {} tensor of shape {}; a stored "
                        "graph is a 1-D uint8 tensor",
                        m_context, name, t->dtype().name(), t->shape().to_string());
        // Graphs nest (an If inside a branch); a file nesting them without end is refused
        // before the recursion could exhaust the stack.
        thread_local int depth = 0;
        if (depth >= MAX_GRAPH_NESTING)
            BRAID_THROW(SerializationError, "{}: param \"{}\": graphs nested more than {} deep",
                        m_context, name, MAX_GRAPH_NESTING);
        ++depth;
        struct Leave {
            ~Leave() { --depth; }
        } leave;
        LoadedModel m;
        try {
            auto image = ModelImage::from_buffer(
                std::span(reinterpret_cast<const uint8_t*>(t->raw_ptr()), t->shape()[0]));
            m = load(*image);
        } catch (const Error&) {
            std::rethrow_exception(with_error_context(
                std::current_exception(), fmt::format("{}: param \"{}\"", m_context, name), ""));
        }
        StoredGraph g;
        g.graph = m.graph;
        for (auto& in : m.inputs) g.inputs[in.name] = in.var;
        for (auto& out : m.outputs) g.outputs.push_back(out.var);
        return g;
    }
    uint32_t version() const override { return m_opr->version(); }
    const std::string& context() const override { return m_context; }

    //! Fields the loader never read (logged: a sign of a params version mismatch).
    std::vector<std::string> unread() const {
        std::vector<std::string> res;
        for (auto& [name, _] : m_fields)
            if (!m_read.count(name)) res.push_back(name);
        return res;
    }

private:
    const fbs::Param* field(std::string_view name, fbs::ParamKind kind) const {
        auto it = m_fields.find(std::string(name));
        if (it == m_fields.end())
            BRAID_THROW(SerializationError, "{}: param \"{}\" is missing", m_context, name);
        if (it->second->kind() != kind)
            BRAID_THROW(SerializationError, "{}: param \"{}\" is a {}, expected a {}", m_context,
                        name, kind_name(it->second->kind()), kind_name(kind));
        m_read.insert(it->first);
        return it->second;
    }

    const fbs::Operator* m_opr;
    const ModelImage& m_tensors;
    std::string m_context;
    std::map<std::string, const fbs::Param*> m_fields;
    mutable std::set<std::string> m_read;
};

//! The part of a sharded model (serialization/sharded_model.h) that one rank loads.
struct ShardedPart {
    uint32_t rank = 0;
    std::string suffix;       //!< "@<rank>": its inputs' and outputs' names end with it
    std::vector<bool> needed; //!< per operator: computes one of its outputs
};

std::optional<ShardedPart> sharded_part(const ModelDescription& desc, const LoadOptions& options,
                                        const std::string& src,
                                        const std::vector<uint32_t>& output_vars) {
    std::string ranks_text, mesh = "?";
    for (auto& [k, v] : desc.info.metadata) {
        if (k == SHARDED_RANKS_KEY) ranks_text = v;
        if (k == SHARDED_MESH_KEY) mesh = v;
    }
    if (ranks_text.empty()) return std::nullopt;
    long ranks =
        ranks_text.size() <= 6 && ranks_text.find_first_not_of("0123456789") == std::string::npos
            ? std::stol(ranks_text)
            : 0;
    if (ranks < 1)
        BRAID_THROW(SerializationError,
                    "{}: metadata \"{}\" is \"{}\"; expected a number of "
                    "ranks from 1",
                    src, SHARDED_RANKS_KEY, ranks_text);
    const CollectiveBinding& bind = options.collective;
    if (bind.rank < 0)
        BRAID_THROW(SerializationError,
                    "{}: a model sharded over {} ranks ({}); load it as one "
                    "of its ranks: braid-run --devices {}, mpirun -np {} braid-run --backend "
                    "mpi, or braid-launch -n {}",
                    src, ranks, mesh, ranks, ranks, ranks);
    if (bind.rank >= ranks || (bind.world_size > 0 && bind.world_size != ranks))
        BRAID_THROW(SerializationError,
                    "{}: a model sharded over {} ranks ({}), loaded as rank "
                    "{} of {}; run it on {} ranks",
                    src, ranks, mesh, bind.rank, bind.world_size > 0 ? bind.world_size : ranks,
                    ranks);
    ShardedPart part;
    part.rank = uint32_t(bind.rank);
    part.suffix = "@" + std::to_string(bind.rank);
    auto mine = [&](const std::string& name) {
        return name.size() > part.suffix.size() &&
               name.compare(name.size() - part.suffix.size(), part.suffix.size(), part.suffix) == 0;
    };
    std::vector<long> producer(desc.vars.size(), -1);
    for (size_t i = 0; i < desc.operators.size(); ++i)
        for (uint32_t v : desc.operators[i].outputs)
            if (v < producer.size()) producer[v] = long(i);
    part.needed.assign(desc.operators.size(), false);
    std::vector<uint32_t> stack;
    for (size_t i = 0; i < desc.outputs.size(); ++i)
        if (mine(desc.outputs[i].name)) stack.push_back(output_vars.at(i));
    while (!stack.empty()) {
        uint32_t v = stack.back();
        stack.pop_back();
        if (v >= producer.size() || producer[v] < 0 || part.needed[producer[v]]) continue;
        part.needed[producer[v]] = true;
        for (uint32_t in : desc.operators[producer[v]].inputs) stack.push_back(in);
    }
    return part;
}

LoadedModel build_graph(const ModelImage& image, const LoadOptions& options) {
    register_all_operators();
    const fbs::Model* model = image.root();
    const ModelDescription& desc = image.description();
    const std::string& src = image.source();

    // A sharded model: only the loading rank's part, under plain names, its collectives as
    // recorded (the binding's rank and world size chose the part).
    std::vector<uint32_t> output_vars;
    for (size_t i = 0; i < desc.outputs.size(); ++i)
        output_vars.push_back(model->outputs()->Get(flatbuffers::uoffset_t(i))->var());
    const std::optional<ShardedPart> part = sharded_part(desc, options, src, output_vars);
    CollectiveBinding binding = options.collective;
    std::map<std::string, TensorShape> input_shapes = options.input_shapes;
    if (part) {
        binding.rank = -1;
        binding.world_size = 0;
        input_shapes.clear();
        for (auto& [name, shape] : options.input_shapes) input_shapes[name + part->suffix] = shape;
    }

    // Load-time input shapes must name inputs and fit their recorded shapes.
    for (auto& [name, shape] : input_shapes) {
        const ModelIO* io = nullptr;
        for (auto& in : desc.inputs)
            if (in.name == name) io = &in;
        if (!io)
            BRAID_THROW(SerializationError,
                        "{}: LoadOptions::input_shapes names \"{}\", which is "
                        "not an input of the model",
                        src, name);
        if (!io->accepts(shape))
            BRAID_THROW(ShapeError, "input \"{}\": shape {} does not fit the model's {}", name,
                        shape.to_string(), io->shape_string());
    }

    LoadedModel res;
    GraphOptions gopt = options.graph_options;
    if (!options.comp_node.empty()) gopt.default_comp_node = options.comp_node;
    res.graph = ComputingGraph::make(gopt);
    MemoryBudget budget = MemoryBudget::resolve(gopt.memory_budget);
    // The shape each input is fed with when nothing else is given must fit the budget too.
    for (auto& in : desc.inputs) {
        auto given = input_shapes.find(in.name);
        const TensorShape& shape = given != input_shapes.end() ? given->second : in.default_shape;
        budget.check(shape.nr_bytes(in.dtype), fmt::format("{}: input \"{}\" {} {}", src, in.name,
                                                           shape.to_string(), in.dtype.name()));
    }
    CompNode forced_cn;
    if (!options.comp_node.empty()) forced_cn = CompNode::load(options.comp_node);

    std::vector<SymbolVar> vars(desc.vars.size());
    auto& registry = OperatorRegistry::instance();
    bool shapes_as_recorded = input_shapes.empty();
    // Vars computed from a collective's output may take other shapes than recorded when the
    // binding gives another world size (ALL_GATHER's dim 0 is N times its input's).
    bool world_rebound = binding.world_size > 0;
    std::vector<bool> after_collective(desc.vars.size(), false);

    for (size_t i = 0; i < desc.operators.size(); ++i) {
        if (part && !part->needed[i]) continue; // another rank's
        const ModelOperator& mo = desc.operators[i];
        std::string what = fmt::format("{}: operator #{} {} \"{}\"", src, i, mo.type_name, mo.name);
        const OperatorDescriptor* traits = registry.find(mo.type_name);
        if (!traits)
            BRAID_THROW(SerializationError,
                        "{}: unknown operator type \"{}\" (operator #{} \"{}\"): this build of "
                        "braid does not have it",
                        src, mo.type_name, i, mo.name);
        if (!traits->load)
            BRAID_THROW(SerializationError, "{}: operator type \"{}\" has no loader registered",
                        what, mo.type_name);
        if (mo.version == 0 || mo.version > traits->version)
            BRAID_THROW(SerializationError,
                        "{}: params version {} is not supported (this build reads 1 to {})", what,
                        mo.version, traits->version);
        SymbolVarArray inputs;
        bool world_dependent = traits->rank_dependent;
        for (uint32_t k : mo.inputs) {
            if (!vars[k].valid())
                BRAID_THROW(SerializationError,
                            "{}: corrupt: input var #{} is not produced by an earlier operator",
                            what, k);
            inputs.push_back(vars[k]);
            world_dependent = world_dependent || after_collective[k];
        }
        for (size_t a = 0; a < mo.outputs.size(); ++a) {
            if (vars[mo.outputs[a]].valid())
                BRAID_THROW(SerializationError, "{}: corrupt: output var #{} is produced twice",
                            what, mo.outputs[a]);
            for (size_t b = 0; b < a; ++b)
                if (mo.outputs[a] == mo.outputs[b])
                    BRAID_THROW(SerializationError, "{}: corrupt: output var #{} listed twice",
                                what, mo.outputs[a]);
        }

        std::optional<FileParamReader> reader;
        SymbolVarArray outs;
        try {
            reader.emplace(model->operators()->Get(flatbuffers::uoffset_t(i)), image,
                           fmt::format("{} \"{}\"", mo.type_name, mo.name));
            CompNode cn = forced_cn.valid() ? forced_cn : CompNode::load(mo.comp_node);
            OperatorConfig config(mo.name, cn);
            OprLoadContext ctx{*res.graph, inputs,           *reader,     config,
                               binding,    options.bindings, input_shapes};
            outs = traits->load(ctx);
        } catch (const SerializationError& e) {
            BRAID_THROW(SerializationError, "{}: {}", src, e.what());
        } catch (const std::exception& e) {
            // Shape, dtype and graph errors from make(), a bad comp node, allocation failures:
            // the file describes a graph this build cannot construct.
            BRAID_THROW(SerializationError, "{}: {}", what, e.what());
        }
        if (outs.size() != mo.outputs.size())
            BRAID_THROW(SerializationError, "{}: the loader made {} outputs, the model records {}",
                        what, outs.size(), mo.outputs.size());
        for (size_t k = 0; k < outs.size(); ++k) {
            const ModelVar& mv = desc.vars[mo.outputs[k]];
            SymbolVar v = outs[k];
            if (!v.valid() || v.node()->graph() != res.graph.get())
                BRAID_THROW(SerializationError, "{}: the loader returned an invalid var", what);
            if (v.dtype() != mv.dtype)
                BRAID_THROW(SerializationError, "{}: var \"{}\" loads as {}, the model records {}",
                            what, mv.name, v.dtype().name(), mv.dtype.name());
            if (v.node()->shape_known())
                budget.check(v.node()->shape().nr_bytes(v.dtype()),
                             fmt::format("{}: var \"{}\" {} {}", what, mv.name,
                                         v.node()->shape().to_string(), v.dtype().name()));
            after_collective[mo.outputs[k]] = world_dependent;
            if (shapes_as_recorded && !(world_rebound && world_dependent) && mv.shape_known &&
                v.node()->shape_known() && v.node()->shape() != mv.shape)
                BRAID_THROW(SerializationError,
                            "{}: var \"{}\" loads with shape {}, the model records {}", what,
                            mv.name, v.node()->shape().to_string(), mv.shape.to_string());
            if (!mv.name.empty()) v.node()->set_name(mv.name);
            vars[mo.outputs[k]] = v;
        }
        auto unread = reader->unread();
        if (!unread.empty())
            logger()->warn("{}: params not read by the loader: {}", what, fmt::join(unread, ", "));
    }

    auto bind = [&](std::vector<ModelIO>& ios, bool is_input) {
        auto* list = is_input ? model->inputs() : model->outputs();
        for (size_t i = 0; i < ios.size(); ++i) {
            ModelIO& io = ios[i];
            if (part && !io.name.ends_with(part->suffix)) continue; // another rank's
            uint32_t idx = list->Get(flatbuffers::uoffset_t(i))->var();
            SymbolVar v = vars[idx];
            std::string what =
                fmt::format("{}: {} \"{}\"", src, is_input ? "input" : "output", io.name);
            if (!v.valid())
                BRAID_THROW(SerializationError, "{}: corrupt: var #{} is produced by no operator",
                            what, idx);
            if (v.dtype() != io.dtype)
                BRAID_THROW(SerializationError, "{}: corrupt: dtype {} differs from its var's {}",
                            what, io.dtype.name(), v.dtype().name());
            if (is_input) {
                auto* in = dynamic_cast<InputNode*>(v.node()->owner());
                if (!in || in->input_name() != io.name)
                    BRAID_THROW(SerializationError,
                                "{}: corrupt: var #{} is not the output of an input operator of "
                                "that name",
                                what, idx);
                auto it = input_shapes.find(io.name);
                if (it != input_shapes.end()) io.default_shape = it->second;
            }
            io.var = v;
        }
    };
    res.inputs = desc.inputs;
    res.outputs = desc.outputs;
    for (size_t a = 0; a < res.inputs.size(); ++a)
        for (size_t b = 0; b < a; ++b)
            if (res.inputs[a].name == res.inputs[b].name)
                BRAID_THROW(SerializationError, "{}: corrupt: two inputs are named \"{}\"", src,
                            res.inputs[a].name);
    for (size_t a = 0; a < res.outputs.size(); ++a)
        for (size_t b = 0; b < a; ++b)
            if (res.outputs[a].name == res.outputs[b].name)
                BRAID_THROW(SerializationError, "{}: corrupt: two outputs are named \"{}\"", src,
                            res.outputs[a].name);
    bind(res.inputs, true);
    bind(res.outputs, false);
    if (part) {
        // This rank's inputs and outputs, under the model's plain names.
        for (auto* ios : {&res.inputs, &res.outputs}) {
            std::erase_if(*ios,
                          [&](const ModelIO& io) { return !io.name.ends_with(part->suffix); });
            for (auto& io : *ios) io.name.resize(io.name.size() - part->suffix.size());
        }
    }
    if (res.outputs.empty()) BRAID_THROW(SerializationError, "{}: corrupt: no outputs", src);

    res.info = desc.info;
    res.info.mapped_bytes = image.mapped_bytes();
    return res;
}

} // namespace

// ---------------------------------------------------------------- ModelImage
struct ModelImage::Impl {
    serial::ModelBytes bytes;
    const fbs::Model* root = nullptr;
    ModelDescription desc;
    size_t map_min_bytes = 4096;
    std::mutex mutex; //!< guards the tensors below
    std::vector<std::shared_ptr<Tensor>> tensors;
    size_t mapped_bytes = 0, weight_bytes = 0;
};

ModelImage::ModelImage(serial::ModelBytes bytes, bool verify_integrity, size_t map_min_bytes)
    : m_impl(std::make_unique<Impl>()) {
    m_impl->bytes = std::move(bytes);
    m_impl->root = serial::check_model(m_impl->bytes, verify_integrity);
    m_impl->desc = serial::describe_verified(m_impl->bytes, m_impl->root);
    m_impl->map_min_bytes = map_min_bytes;
    m_impl->tensors.resize(m_impl->desc.tensors.size());
}

ModelImage::~ModelImage() = default;

std::shared_ptr<ModelImage> ModelImage::open(const std::string& path, bool verify_integrity,
                                             size_t map_min_bytes) {
    return std::shared_ptr<ModelImage>(
        new ModelImage(serial::map_file(path), verify_integrity, map_min_bytes));
}

std::shared_ptr<ModelImage> ModelImage::from_buffer(std::span<const uint8_t> buffer, bool borrow,
                                                    bool verify_integrity, size_t map_min_bytes) {
    serial::ModelBytes bytes;
    if (borrow && !buffer.empty() &&
        reinterpret_cast<uintptr_t>(buffer.data()) % MODEL_DATA_ALIGNMENT == 0) {
        bytes.data = buffer.data();
        bytes.size = buffer.size();
        bytes.mapped = true; // tensors are used in place, read-only
        bytes.source = "<buffer>";
    } else {
        bytes = serial::copy_buffer(buffer);
        bytes.mapped = borrow; // the aligned private copy serves in place
    }
    return std::shared_ptr<ModelImage>(
        new ModelImage(std::move(bytes), verify_integrity, map_min_bytes));
}

const ModelDescription& ModelImage::description() const {
    return m_impl->desc;
}

const std::string& ModelImage::source() const {
    return m_impl->bytes.source;
}

const fbs::Model* ModelImage::root() const {
    return m_impl->root;
}

size_t ModelImage::mapped_bytes() const {
    std::lock_guard lk(m_impl->mutex);
    return m_impl->mapped_bytes;
}

size_t ModelImage::weight_bytes() const {
    std::lock_guard lk(m_impl->mutex);
    return m_impl->weight_bytes;
}

std::shared_ptr<Tensor> ModelImage::tensor(uint32_t idx) const {
    auto& m = *m_impl;
    std::lock_guard lk(m.mutex);
    BRAID_ASSERT(idx < m.tensors.size(), "tensor index {} checked by describe_verified", idx);
    if (m.tensors[idx]) return m.tensors[idx];
    const ModelTensor& t = m.desc.tensors[idx];
    const uint8_t* src = m.bytes.data + m.root->data_offset() + t.offset;
    TensorLayout layout(t.shape, t.dtype);
    Tensor value;
    if (m.bytes.mapped && t.size >= m.map_min_bytes &&
        reinterpret_cast<uintptr_t>(src) % MODEL_DATA_ALIGNMENT == 0) {
        // In place: the storage shares ownership of the whole mapping, and its identity
        // (block_id) is this tensor's first byte, distinct from every other tensor's.
        std::shared_ptr<void> keep(m.bytes.keep_alive, const_cast<uint8_t*>(src));
        value = Tensor(Storage::wrap(const_cast<uint8_t*>(src), t.size, Device::cpu(), keep), 0,
                       layout);
        m.mapped_bytes += t.size;
    } else {
        value = Tensor(t.shape, t.dtype);
        if (t.size) std::memcpy(value.raw_ptr(), src, t.size);
    }
    m.weight_bytes += t.size;
    m.tensors[idx] = std::make_shared<Tensor>(std::move(value));
    return m.tensors[idx];
}

LoadedModel load(const ModelImage& image, const LoadOptions& options) {
    return build_graph(image, options);
}

LoadedModel load(const std::string& path, const LoadOptions& options) {
    auto image = ModelImage::open(path, options.verify_integrity, options.map_min_bytes);
    return build_graph(*image, options);
}

LoadedModel load(std::span<const uint8_t> buffer, const LoadOptions& options) {
    auto image =
        ModelImage::from_buffer(buffer, false, options.verify_integrity, options.map_min_bytes);
    return build_graph(*image, options);
}

} // namespace braid
