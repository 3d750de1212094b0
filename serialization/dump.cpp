// dump(): a graph to a model file (format: model.fbs).
#include "base/hash.h"
#include "collective/registry.h"
#include "graph/input_node.h"
#include "serialization/format.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <unistd.h>
#include <unordered_map>

namespace braid {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

size_t align_up(size_t v, size_t a) {
    return (v + a - 1) / a * a;
}

//! The parameter tensors of a model, each distinct content stored once.
class TensorTable {
public:
    struct Entry {
        Tensor value; //!< contiguous host tensor
        uint64_t content_hash;
        uint64_t offset; //!< from the data section's start
    };

    //! Index of `t`'s content, added when new. `what` names the param for messages.
    uint32_t add(const Tensor& t, const std::string& what) {
        if (t.empty()) BRAID_THROW(SerializationError, "{}: the tensor is empty", what);
        if (t.device().kind != Device::Kind::CPU)
            BRAID_THROW(SerializationError,
                        "{}: the tensor lives on {}; only host tensors can be dumped", what,
                        t.device().to_string());
        Tensor c = t.contiguous();
        uint64_t hash = xxhash64(c.raw_ptr(), c.nr_bytes());
        auto range = m_by_hash.equal_range(hash);
        for (auto it = range.first; it != range.second; ++it) {
            auto& e = m_entries[it->second].value;
            if (e.dtype() == c.dtype() && e.shape() == c.shape() &&
                std::memcmp(e.raw_ptr(), c.raw_ptr(), c.nr_bytes()) == 0)
                return uint32_t(it->second);
        }
        uint64_t offset = align_up(m_data_size, MODEL_DATA_ALIGNMENT);
        m_data_size = offset + c.nr_bytes();
        m_entries.push_back({c, hash, offset});
        m_by_hash.emplace(hash, m_entries.size() - 1);
        return uint32_t(m_entries.size() - 1);
    }

    const std::vector<Entry>& entries() const { return m_entries; }
    uint64_t data_size() const { return m_data_size; }

private:
    std::vector<Entry> m_entries;
    std::unordered_multimap<uint64_t, size_t> m_by_hash;
    uint64_t m_data_size = 0;
};

//! One recorded param field.
struct FieldRecord {
    std::string name;
    fbs::ParamKind kind;
    int64_t int_value = 0;
    double float_value = 0;
    std::string string_value;
    std::vector<int64_t> int_list;
    std::vector<double> float_list;
    uint32_t tensor = 0;
};

//! Records an operator's params for the flatbuffer.
class RecordingParamWriter final : public ParamWriter {
public:
    RecordingParamWriter(TensorTable& tensors, std::string context)
        : m_tensors(tensors), m_context(std::move(context)) {}

    void write_int(std::string_view name, int64_t value) override {
        add(name, fbs::ParamKind::INT).int_value = value;
    }
    void write_float(std::string_view name, double value) override {
        add(name, fbs::ParamKind::FLOAT).float_value = value;
    }
    void write_bool(std::string_view name, bool value) override {
        add(name, fbs::ParamKind::BOOL).int_value = value;
    }
    void write_string(std::string_view name, std::string_view value) override {
        add(name, fbs::ParamKind::STRING).string_value = value;
    }
    void write_ints(std::string_view name, const std::vector<int64_t>& values) override {
        add(name, fbs::ParamKind::INT_LIST).int_list = values;
    }
    void write_floats(std::string_view name, const std::vector<double>& values) override {
        add(name, fbs::ParamKind::FLOAT_LIST).float_list = values;
    }
    void write_tensor(std::string_view name, const Tensor& value) override {
        uint32_t idx = m_tensors.add(value, fmt::format("{}: param \"{}\"", m_context, name));
        add(name, fbs::ParamKind::TENSOR).tensor = idx;
    }

    void write_graph(std::string_view name, const SymbolVarArray& outputs) override {
        // A model of its own, verified on its own when loaded, stored as a byte tensor.
        std::vector<uint8_t> bytes;
        dump(outputs, bytes);
        Tensor t(TensorShape{bytes.size()}, dtype::Uint8());
        std::memcpy(t.raw_ptr(), bytes.data(), bytes.size());
        write_tensor(name, t);
    }

    std::vector<FieldRecord>& fields() { return m_fields; }

private:
    FieldRecord& add(std::string_view name, fbs::ParamKind kind) {
        for (auto& f : m_fields)
            if (f.name == name)
                BRAID_THROW(SerializationError, "{}: param \"{}\" written twice", m_context, name);
        m_fields.push_back({});
        m_fields.back().name = name;
        m_fields.back().kind = kind;
        return m_fields.back();
    }

    TensorTable& m_tensors;
    std::string m_context;
    std::vector<FieldRecord> m_fields;
};

//! A model ready to be written: the flatbuffer and the tensors of the data section.
struct BuiltModel {
    FlatBufferBuilder fbb{1 << 16};
    TensorTable tensors;
    uint64_t data_offset = 0;
    uint64_t file_size = 0;

    //! Calls `sink(bytes, size)` for the whole file, in order.
    template <typename Sink> void emit(Sink&& sink) const {
        static const uint8_t zeros[MODEL_DATA_ALIGNMENT] = {};
        uint64_t pos = fbb.GetSize();
        sink(fbb.GetBufferPointer(), fbb.GetSize());
        auto pad_to = [&](uint64_t target) {
            while (pos < target) {
                size_t n = std::min<uint64_t>(target - pos, sizeof(zeros));
                sink(zeros, n);
                pos += n;
            }
        };
        pad_to(data_offset);
        for (auto& e : tensors.entries()) {
            pad_to(data_offset + e.offset);
            sink(e.value.raw_ptr(), e.value.nr_bytes());
            pos += e.value.nr_bytes();
        }
        pad_to(file_size);
    }
};

std::vector<int64_t> dims64(const TensorShape& s) {
    std::vector<int64_t> d;
    for (size_t v : s.dims()) d.push_back(int64_t(v));
    return d;
}

void build_model(const SymbolVarArray& outputs, const DumpOptions& options, BuiltModel& out) {
    register_all_operators();
    if (outputs.empty())
        BRAID_THROW(SerializationError, "dump(): needs at least one output var; got none");
    ComputingGraph* graph = nullptr;
    std::set<std::string> output_names;
    for (auto& o : outputs) {
        if (!o.valid()) BRAID_THROW(SerializationError, "dump(): an output var is null");
        if (!graph) graph = o.node()->graph();
        if (o.node()->graph() != graph)
            BRAID_THROW(SerializationError, "dump(): output \"{}\" belongs to another graph",
                        o.name());
        if (!output_names.insert(o.name()).second)
            BRAID_THROW(SerializationError,
                        "dump(): two outputs are named \"{}\"; rename one (SymbolVar::rename)",
                        o.name());
    }

    // The operators the outputs depend on, in insertion (topological) order.
    std::vector<OperatorNode*> stack;
    std::set<OperatorNode*> needed;
    for (auto& o : outputs) stack.push_back(o.node()->owner());
    while (!stack.empty()) {
        auto* opr = stack.back();
        stack.pop_back();
        if (!needed.insert(opr).second) continue;
        for (auto* in : opr->inputs()) stack.push_back(in->owner());
    }
    std::vector<OperatorNode*> order(needed.begin(), needed.end());
    std::sort(order.begin(), order.end(),
              [](OperatorNode* a, OperatorNode* b) { return a->id() < b->id(); });

    std::unordered_map<VarNode*, uint32_t> var_idx;
    std::vector<VarNode*> vars;
    for (auto* opr : order)
        for (auto* v : opr->outputs()) {
            var_idx[v] = uint32_t(vars.size());
            vars.push_back(v);
        }

    auto& fbb = out.fbb;
    auto& registry = OperatorRegistry::instance();

    std::vector<Offset<fbs::Operator>> opr_offsets;
    std::vector<InputNode*> inputs;
    for (auto* opr : order) {
        const OperatorDescriptor* traits = registry.find(opr->type_name());
        if (!traits || !traits->dump_params)
            BRAID_THROW(SerializationError,
                        "dump(): {}: operator type \"{}\" has no params dumper registered (add it "
                        "in register_all_operators())",
                        opr->describe(), opr->type_name());
        if (auto* in = dynamic_cast<InputNode*>(opr)) inputs.push_back(in);
        RecordingParamWriter writer(out.tensors, opr->describe());
        traits->dump_params(*opr, writer);

        std::vector<Offset<fbs::Param>> params;
        for (auto& f : writer.fields()) {
            auto name = fbb.CreateString(f.name);
            auto s = f.kind == fbs::ParamKind::STRING ? fbb.CreateString(f.string_value) : 0;
            auto il = f.kind == fbs::ParamKind::INT_LIST ? fbb.CreateVector(f.int_list) : 0;
            auto fl = f.kind == fbs::ParamKind::FLOAT_LIST ? fbb.CreateVector(f.float_list) : 0;
            params.push_back(fbs::CreateParam(fbb, name, f.kind, f.int_value, f.float_value, s, il,
                                              fl, f.tensor));
        }
        std::vector<uint32_t> in_idx, out_idx;
        for (auto* v : opr->inputs()) in_idx.push_back(var_idx.at(v));
        for (auto* v : opr->outputs()) out_idx.push_back(var_idx.at(v));
        opr_offsets.push_back(fbs::CreateOperator(
            fbb, fbb.CreateString(opr->type_name()), operator_type_id(opr->type_name()),
            traits->version, fbb.CreateString(opr->name()),
            fbb.CreateString(opr->comp_node().locator()), fbb.CreateVector(in_idx),
            fbb.CreateVector(out_idx), fbb.CreateVector(params)));
    }

    std::vector<Offset<fbs::Var>> var_offsets;
    for (auto* v : vars) {
        auto name = fbb.CreateString(v->name());
        auto shape = v->shape_known() ? fbb.CreateVector(dims64(v->shape())) : 0;
        var_offsets.push_back(
            fbs::CreateVar(fbb, name, fbs::DType(v->dtype().enumv()), shape, v->shape_known()));
    }

    std::vector<Offset<fbs::TensorData>> tensor_offsets;
    for (auto& e : out.tensors.entries())
        tensor_offsets.push_back(fbs::CreateTensorData(
            fbb, fbs::DType(e.value.dtype().enumv()), fbb.CreateVector(dims64(e.value.shape())),
            e.offset, e.value.nr_bytes(), e.content_hash));

    // Named inputs, with the open dims DumpOptions::input_shapes asks for.
    std::set<std::string> shaped;
    std::vector<Offset<fbs::TensorIO>> input_offsets;
    for (auto* in : inputs) {
        const std::string& name = in->input_name();
        auto* var = in->output(0);
        TensorShape current = var->shape();
        std::vector<int64_t> shape = dims64(current);
        auto it = options.input_shapes.find(name);
        if (it != options.input_shapes.end()) {
            shaped.insert(name);
            auto& want = it->second;
            bool ok = want.size() == current.ndim();
            for (size_t i = 0; ok && i < want.size(); ++i)
                ok = want[i] == -1 || (want[i] >= 0 && size_t(want[i]) == current[i]);
            if (!ok) {
                std::string ws = "{";
                for (size_t i = 0; i < want.size(); ++i)
                    ws += (i ? "," : "") + std::to_string(want[i]);
                ws += "}";
                BRAID_THROW(SerializationError,
                            "dump(): input \"{}\": recorded shape {} does not fit its shape {} "
                            "(same rank; each dim -1 or equal)",
                            name, ws, current.to_string());
            }
            shape.assign(want.begin(), want.end());
        }
        input_offsets.push_back(fbs::CreateTensorIO(
            fbb, fbb.CreateString(name), var_idx.at(var), fbs::DType(var->dtype().enumv()),
            fbb.CreateVector(shape), fbb.CreateVector(dims64(current))));
    }
    for (auto& [name, _] : options.input_shapes)
        if (!shaped.count(name))
            BRAID_THROW(SerializationError,
                        "dump(): DumpOptions::input_shapes names \"{}\", which is not an input of "
                        "the dumped graph",
                        name);

    std::vector<Offset<fbs::TensorIO>> output_offsets;
    for (auto& o : outputs) {
        auto* var = o.node();
        auto shape = var->shape_known() ? fbb.CreateVector(dims64(var->shape())) : 0;
        output_offsets.push_back(fbs::CreateTensorIO(fbb, fbb.CreateString(var->name()),
                                                     var_idx.at(var),
                                                     fbs::DType(var->dtype().enumv()), shape));
    }

    std::vector<Offset<fbs::KeyValue>> meta;
    for (auto& [k, v] : options.metadata)
        meta.push_back(fbs::CreateKeyValue(fbb, fbb.CreateString(k), fbb.CreateString(v)));

    auto producer = fbb.CreateString(options.producer);
    auto meta_vec = fbb.CreateVector(meta);
    auto vars_vec = fbb.CreateVector(var_offsets);
    auto oprs_vec = fbb.CreateVector(opr_offsets);
    auto tensors_vec = fbb.CreateVector(tensor_offsets);
    auto inputs_vec = fbb.CreateVector(input_offsets);
    auto outputs_vec = fbb.CreateVector(output_offsets);
    // The header fields are patched after Finish(); force them into the table even at 0.
    fbb.ForceDefaults(true);
    auto root =
        fbs::CreateModel(fbb, MODEL_FORMAT_MAJOR, MODEL_FORMAT_MINOR, 0, 0, 0, producer, meta_vec,
                         vars_vec, oprs_vec, tensors_vec, inputs_vec, outputs_vec);
    fbb.ForceDefaults(false);
    fbs::FinishModelBuffer(fbb, root);

    out.data_offset = align_up(fbb.GetSize(), MODEL_DATA_ALIGNMENT);
    out.file_size = out.data_offset + out.tensors.data_size();
    auto* model = fbs::GetMutableModel(fbb.GetBufferPointer());
    bool patched = model->mutate_file_size(out.file_size) &&
                   model->mutate_data_offset(out.data_offset) && model->mutate_checksum(0);
    BRAID_ASSERT(patched, "model header fields missing after ForceDefaults");
    // The checksum field is 0 now, so hashing the bytes as written is the checksum's definition.
    Hasher h;
    out.emit([&](const void* p, size_t n) { h.add_bytes(p, n); });
    model->mutate_checksum(h.digest());
}

} // namespace

void dump(const SymbolVarArray& outputs, std::vector<uint8_t>& buffer, const DumpOptions& options) {
    BuiltModel built;
    build_model(outputs, options, built);
    buffer.clear();
    buffer.reserve(built.file_size);
    built.emit([&](const void* p, size_t n) {
        auto* b = static_cast<const uint8_t*>(p);
        buffer.insert(buffer.end(), b, b + n);
    });
}

void dump(const SymbolVarArray& outputs, const std::string& path, const DumpOptions& options) {
    BuiltModel built;
    build_model(outputs, options, built);
    // Written beside the target and renamed over it: readers never see a partial file.
    std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f)
        BRAID_THROW(SerializationError, "dump(): cannot create \"{}\": {}", tmp,
                    std::strerror(errno));
    bool ok = true;
    built.emit([&](const void* p, size_t n) { ok = ok && std::fwrite(p, 1, n, f) == n; });
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        std::remove(tmp.c_str());
        BRAID_THROW(SerializationError, "dump(): cannot write \"{}\": {}", path,
                    std::strerror(err));
    }
}

} // namespace braid
