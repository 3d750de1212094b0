// Writes hostile-but-valid model files: each has a correct checksum and flatbuffers structure,
// and asks for something braid must refuse with a clear error (exit 3 from braid-run and
// braid-inspect) instead of crashing, hanging or exhausting memory: huge or overflowing dims,
// budget-busting fills, bad axes and indices, bad comp nodes, bad params, terminal escape
// codes in its text. run_hostile_models.sh runs the tools on every file.
//
//     make_hostile_models DIR      writes DIR/<kind>.braid, one per kind, and lists the kinds
#include "braid.h"
#include "serialization/format.h"
#include "tools/example_models.h"

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

using namespace braid;

namespace {

using Mutation = std::function<void(fbs::ModelT&)>;

[[noreturn]] void fail(const std::string& msg) {
    std::fprintf(stderr, "make_hostile_models: %s\n", msg.c_str());
    std::exit(1);
}

fbs::OperatorT& op(fbs::ModelT& m, std::string_view type, size_t nth = 0) {
    for (auto& o : m.operators)
        if (o->type_name == type && nth-- == 0) return *o;
    fail(fmt::format("the base model has no operator {} #{}", type, nth));
}

fbs::ParamT& param(fbs::OperatorT& o, std::string_view name) {
    for (auto& p : o.params)
        if (p->name == name) return *p;
    std::string names;
    for (auto& p : o.params) names += " " + p->name;
    fail(fmt::format("operator {} has no param {} (it has:{})", o.type_name, name, names));
}

fbs::TensorIOT& input(fbs::ModelT& m, std::string_view name) {
    for (auto& io : m.inputs)
        if (io->name == name) return *io;
    fail(fmt::format("the base model has no input {}", name));
}

//! The recorded var of operator `o`'s first output.
fbs::VarT& out_var(fbs::ModelT& m, fbs::OperatorT& o) {
    return *m.vars.at(o.outputs.at(0));
}

void set_ints(fbs::OperatorT& o, std::string_view name, std::vector<int64_t> v) {
    auto& p = param(o, name);
    if (p.kind == fbs::ParamKind::INT_LIST)
        p.int_list = std::move(v);
    else
        p.int_value = v.at(0);
}

//! Serializes `m` with the data section of `base` and a correct header and checksum.
std::vector<uint8_t> seal(const fbs::ModelT& m, const std::vector<uint8_t>& base) {
    auto* base_model = fbs::GetModel(base.data());
    std::vector<uint8_t> data(base.begin() + long(base_model->data_offset()), base.end());
    flatbuffers::FlatBufferBuilder fbb;
    fbb.ForceDefaults(true); // the header fields are patched below
    fbs::FinishModelBuffer(fbb, fbs::Model::Pack(fbb, &m));
    size_t data_offset =
        (fbb.GetSize() + MODEL_DATA_ALIGNMENT - 1) / MODEL_DATA_ALIGNMENT * MODEL_DATA_ALIGNMENT;
    std::vector<uint8_t> bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
    bytes.resize(data_offset, 0);
    bytes.insert(bytes.end(), data.begin(), data.end());
    auto* model = fbs::GetMutableModel(bytes.data());
    if (!model->mutate_file_size(bytes.size()) || !model->mutate_data_offset(data_offset) ||
        !model->mutate_checksum(0))
        fail("header fields missing");
    size_t at = serial::checksum_field_offset(bytes.data());
    model->mutate_checksum(serial::model_checksum(bytes.data(), bytes.size(), at));
    return bytes;
}

std::vector<uint8_t> dump_graph(const std::function<SymbolVarArray(ComputingGraph&)>& build) {
    auto graph = ComputingGraph::make();
    std::vector<uint8_t> bytes;
    dump(build(*graph), bytes);
    return bytes;
}

//! Three fills of 1 GiB each: every var fits a 2 GiB budget, the plan does not.
SymbolVarArray build_three_fills(ComputingGraph& g) {
    SymbolVarArray outs;
    for (int i = 0; i < 3; ++i)
        outs.push_back(opr::fill(g, {size_t(1) << 28}, double(i)).rename(fmt::format("f{}", i)));
    return outs;
}

constexpr int64_t P(int e) {
    return int64_t(1) << e;
}
const char* const ESC = "\x1b]0;owned\x07\x1b[2J\x1b[31m";

struct Kind {
    std::string name;
    std::string base; //!< "every", "mlp" or "fills"
    Mutation mutate;
};

std::vector<Kind> kinds() {
    std::vector<Kind> k;
    auto add = [&](std::string name, std::string base, Mutation m) {
        k.push_back({std::move(name), std::move(base), std::move(m)});
    };
    // Huge and overflowing input shapes (the default shape is what braid-run feeds).
    auto input_default = [&](std::string name, std::vector<int64_t> dims) {
        add(name, "mlp", [dims](fbs::ModelT& m) { input(m, "x").default_shape = dims; });
    };
    input_default("input_default_2p58x784", {P(58), 784});
    add("input_default_2p40", "mlp", [](fbs::ModelT& m) {
        input(m, "x").shape = {-1, 4};
        input(m, "x").default_shape = {P(40), 4};
    });
    input_default("input_default_wraps_to_zero", {P(32), P(32)});
    input_default("input_default_just_over_2p56_bytes", {P(54) + 1, 4});
    input_default("input_default_seven_dims_overflow",
                  {P(10), P(10), P(10), P(10), P(10), P(10), 4});
    input_default("input_default_int64_max", {INT64_MAX, 4});
    input_default("input_default_negative", {-5, 4});
    input_default("input_default_eight_dims", {1, 1, 1, 1, 1, 1, 1, 4});
    input_default("input_default_wrong_rank", {2});
    input_default("input_default_wrong_fixed_dim", {2, 5});
    add("input_recorded_shape_huge", "mlp", [](fbs::ModelT& m) {
        auto& x = input(m, "x");
        x.shape = {P(40), P(40)};
        x.default_shape = {P(40), P(40)};
    });
    add("input_param_shape_overflow", "mlp", [](fbs::ModelT& m) {
        set_ints(op(m, "Input"), "shape", {P(40), P(40)});
    });
    add("input_param_shape_budget", "mlp", [](fbs::ModelT& m) {
        set_ints(op(m, "Input"), "shape", {P(38), 4});
    });
    add("var_recorded_shape_overflow", "every", [](fbs::ModelT& m) {
        m.vars.at(3)->shape = {P(62), P(62)};
    });
    add("tensor_shape_overflow", "mlp", [](fbs::ModelT& m) {
        m.tensors.at(0)->shape = {P(32), P(32), 4};
        m.tensors.at(0)->size = 0;
    });
    add("tensor_size_disagrees", "mlp", [](fbs::ModelT& m) { m.tensors.at(0)->size += 64; });
    add("tensor_past_data_end", "mlp", [](fbs::ModelT& m) { m.tensors.at(0)->offset = P(40); });
    add("tensor_unaligned", "mlp", [](fbs::ModelT& m) { m.tensors.at(0)->offset += 8; });
    // Operators that would allocate absurd memory.
    add("fill_2p47", "every", [](fbs::ModelT& m) { set_ints(op(m, "Fill"), "shape", {P(47)}); });
    add("fill_overflow", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Fill"), "shape", {P(33), P(33)});
    });
    add("fill_seven_dims_overflow", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Fill"), "shape", {P(9), P(9), P(9), P(9), P(9), P(9), P(9)});
    });
    add("fill_negative_dim", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Fill"), "shape", {-3, 2});
    });
    add("arange_2p47", "every",
        [](fbs::ModelT& m) { param(op(m, "Arange"), "stop").float_value = double(P(47)); });
    add("arange_infinite", "every", [](fbs::ModelT& m) {
        param(op(m, "Arange"), "stop").float_value = std::numeric_limits<double>::infinity();
    });
    add("arange_nan", "every", [](fbs::ModelT& m) {
        param(op(m, "Arange"), "start").float_value = std::numeric_limits<double>::quiet_NaN();
    });
    add("arange_zero_step", "every",
        [](fbs::ModelT& m) { param(op(m, "Arange"), "step").float_value = 0; });
    add("arange_tiny_step", "every",
        [](fbs::ModelT& m) { param(op(m, "Arange"), "step").float_value = 1e-300; });
    add("broadcast_2p40", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Broadcast"), "target", {P(36), 4, 5});
    });
    add("broadcast_overflow", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Broadcast"), "target", {P(30), P(30), P(30), 5});
    });
    add("broadcast_negative", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Broadcast"), "target", {-4, 5});
    });
    add("reshape_overflow", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Reshape"), "target", {P(40), P(40), 0});
    });
    add("reshape_two_unknown", "every", [](fbs::ModelT& m) {
        set_ints(op(m, "Reshape"), "target", {-1, -1});
    });
    add("plan_over_budget", "fills", [](fbs::ModelT&) {});
    // Bad axes and indices.
    add("concat_axis_50", "every", [](fbs::ModelT& m) { set_ints(op(m, "Concat"), "axis", {50}); });
    add("concat_axis_negative", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Concat"), "axis", {-50}); });
    add("split_axis_huge", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Split"), "axis", {INT64_MAX}); });
    add("softmax_axis_out_of_range", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Softmax"), "axis", {7}); });
    add("gather_axis_out_of_range", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Gather"), "axis", {9}); });
    add("argreduce_axis_int_min", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "ArgReduce"), "axis", {INT64_MIN}); });
    add("reduce_axis_out_of_range", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Reduce"), "axes", {3}); });
    add("operator_input_index_out_of_range", "every",
        [](fbs::ModelT& m) { op(m, "MatMul").inputs.at(0) = 1u << 30; });
    add("operator_reads_its_own_output", "every", [](fbs::ModelT& m) {
        auto& o = op(m, "MatMul");
        o.inputs.at(0) = o.outputs.at(0);
    });
    add("operator_output_index_out_of_range", "every",
        [](fbs::ModelT& m) { op(m, "MatMul").outputs.at(0) = 1u << 30; });
    add("output_var_index_out_of_range", "every",
        [](fbs::ModelT& m) { m.outputs.at(0)->var = 1u << 31; });
    add("param_tensor_index_out_of_range", "mlp",
        [](fbs::ModelT& m) { param(op(m, "SharedParam"), "value").tensor = 1u << 20; });
    // Bad comp nodes.
    auto comp_node = [&](std::string name, std::string locator) {
        add(name, "every", [locator](fbs::ModelT& m) { op(m, "MatMul").comp_node = locator; });
    };
    comp_node("comp_node_huge_number", "cpu99999999999");
    comp_node("comp_node_huge_stream", "cpu0:99999999999999999999");
    comp_node("comp_node_unknown_kind", "gpu0");
    comp_node("comp_node_empty", "");
    comp_node("comp_node_negative", "cpu-1");
    comp_node("comp_node_escape_codes", std::string("cpu0") + ESC);
    // Bad params and types.
    add("param_wrong_kind", "every",
        [](fbs::ModelT& m) { param(op(m, "Concat"), "axis").kind = fbs::ParamKind::STRING; });
    add("param_missing", "every", [](fbs::ModelT& m) { op(m, "Concat").params.clear(); });
    add("param_unknown_dtype", "every",
        [](fbs::ModelT& m) { param(op(m, "Fill"), "dtype").string_value = "float99"; });
    add("param_unknown_mode", "every",
        [](fbs::ModelT& m) { param(op(m, "Elemwise"), "mode").string_value = "FROBNICATE"; });
    add("params_version_zero", "every", [](fbs::ModelT& m) { op(m, "MatMul").version = 0; });
    add("params_version_future", "every", [](fbs::ModelT& m) { op(m, "MatMul").version = 999; });
    add("type_id_mismatch", "every", [](fbs::ModelT& m) { op(m, "MatMul").type_id ^= 1; });
    add("var_dtype_out_of_range", "every",
        [](fbs::ModelT& m) { m.vars.at(2)->dtype = fbs::DType(99); });
    add("var_dtype_disagrees", "every",
        [](fbs::ModelT& m) { out_var(m, op(m, "MatMul")).dtype = fbs::DType::INT8; });
    add("conv_stride_zero", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Conv2d"), "stride_h", {0}); });
    add("conv_negative_padding", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Conv2d"), "pad_w", {-7}); });
    add("pooling_window_huge", "every",
        [](fbs::ModelT& m) { set_ints(op(m, "Pooling"), "window_h", {P(40)}); });
    // Terminal escape codes in the file's text, in a file that is refused for another reason:
    // the refusal's message and the summary printed before it must not carry them.
    add("escape_codes_in_producer_and_metadata", "every", [](fbs::ModelT& m) {
        m.producer = std::string("braid") + ESC;
        auto kv = std::make_unique<fbs::KeyValueT>();
        kv->key = std::string("k") + ESC;
        kv->value = std::string("\x9b\x31m\xc2\x9b") + ESC;
        m.metadata.push_back(std::move(kv));
        op(m, "MatMul").version = 999;
    });
    add("escape_codes_in_operator_name", "every", [](fbs::ModelT& m) {
        auto& o = op(m, "Concat");
        o.name = std::string("c") + ESC;
        set_ints(o, "axis", {50});
    });
    add("escape_codes_in_type_name", "every", [](fbs::ModelT& m) {
        auto& o = op(m, "MatMul");
        o.type_name = std::string("MatMul") + ESC;
    });
    add("escape_codes_in_input_name", "mlp", [](fbs::ModelT& m) {
        auto& x = input(m, "x");
        x.name = std::string("x") + ESC;
        x.default_shape = {P(58), 784};
    });
    add("escape_codes_in_var_name", "every", [](fbs::ModelT& m) {
        auto& v = out_var(m, op(m, "MatMul"));
        v.name = std::string("v") + ESC;
        v.dtype = fbs::DType::INT8;
    });
    return k;
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_hostile_models DIR\n");
        return 2;
    }
    std::string dir = argv[1];
    register_all_operators();
    std::map<std::string, std::vector<uint8_t>> bases;
    bases["every"] =
        dump_graph([](ComputingGraph& g) { return examples::build_every_operator(g); });
    bases["mlp"] = dump_graph([](ComputingGraph& g) { return examples::build_mlp(g, 2, 4, 3, 2); });
    bases["fills"] = dump_graph(build_three_fills);
    for (auto& kind : kinds()) {
        auto& base = bases.at(kind.base);
        auto model = fbs::UnPackModel(base.data());
        kind.mutate(*model);
        auto bytes = seal(*model, base);
        std::string path = dir + "/" + kind.name + ".braid";
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f))
            fail("cannot write " + path);
        std::printf("%s\n", kind.name.c_str());
    }
    return 0;
}
