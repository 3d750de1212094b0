// Each operator type's params loader, called directly on params held in memory: what it
// refuses (with a message naming the operator and the field), and that no value of any field
// crashes it or escapes as anything but a braid error.
#include "braid.h"
#include "tools/example_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <variant>

using namespace braid;
using ::testing::HasSubstr;

namespace {

//! A field's value; a stored graph (an If's branch) is held as its output vars.
using Value = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                           std::vector<double>, SymbolVarArray>;
using Fields = std::map<std::string, Value>;

//! Collects an operator's params the way a model file would hold them (no tensors).
class MapWriter final : public ParamWriter {
public:
    Fields fields;
    void write_int(std::string_view n, int64_t v) override { fields[std::string(n)] = v; }
    void write_float(std::string_view n, double v) override { fields[std::string(n)] = v; }
    void write_bool(std::string_view n, bool v) override { fields[std::string(n)] = v; }
    void write_string(std::string_view n, std::string_view v) override {
        fields[std::string(n)] = std::string(v);
    }
    void write_ints(std::string_view n, const std::vector<int64_t>& v) override {
        fields[std::string(n)] = v;
    }
    void write_floats(std::string_view n, const std::vector<double>& v) override {
        fields[std::string(n)] = v;
    }
    void write_tensor(std::string_view, const Tensor&) override {
        FAIL() << "no tensor params expected";
    }
    void write_graph(std::string_view n, const SymbolVarArray& outputs) override {
        fields[std::string(n)] = outputs;
    }
};

//! Serves fields like a loaded operator's params, with the file reader's errors.
class MapReader final : public ParamReader {
public:
    MapReader(Fields fields, std::string context)
        : m_fields(std::move(fields)), m_context(std::move(context)) {}

    bool has(std::string_view n) const override { return m_fields.count(std::string(n)) > 0; }
    int64_t read_int(std::string_view n) const override { return get<int64_t>(n); }
    double read_float(std::string_view n) const override { return get<double>(n); }
    bool read_bool(std::string_view n) const override { return get<bool>(n); }
    std::string read_string(std::string_view n) const override { return get<std::string>(n); }
    std::vector<int64_t> read_ints(std::string_view n) const override {
        return get<std::vector<int64_t>>(n);
    }
    std::vector<double> read_floats(std::string_view n) const override {
        return get<std::vector<double>>(n);
    }
    Tensor read_tensor(std::string_view n) const override {
        BRAID_THROW(SerializationError, "{}: param \"{}\" is missing", m_context, n);
    }
    std::shared_ptr<Tensor> read_shared_tensor(std::string_view n) const override {
        BRAID_THROW(SerializationError, "{}: param \"{}\" is missing", m_context, n);
    }
    StoredGraph read_graph(std::string_view n) const override {
        const auto& outputs = get<SymbolVarArray>(n);
        StoredGraph g;
        g.outputs = outputs;
        if (outputs.empty()) return g;
        g.graph = outputs[0].graph().shared_from_this();
        for (auto& o : g.graph->operators())
            if (auto* in = dynamic_cast<InputNode*>(o.get()))
                g.inputs[in->input_name()] = in->output(0);
        return g;
    }
    uint32_t version() const override { return 1; }
    const std::string& context() const override { return m_context; }

private:
    template <typename T> const T& get(std::string_view n) const {
        auto it = m_fields.find(std::string(n));
        if (it == m_fields.end())
            BRAID_THROW(SerializationError, "{}: param \"{}\" is missing", m_context, n);
        auto* v = std::get_if<T>(&it->second);
        if (!v) BRAID_THROW(SerializationError, "{}: param \"{}\" has another type", m_context, n);
        return *v;
    }
    Fields m_fields;
    std::string m_context;
};

//! Every operator of the every-operator graph whose params the loaders below rebuild.
struct Zoo {
    std::shared_ptr<ComputingGraph> graph = ComputingGraph::make();
    std::vector<OperatorNode*> oprs;

    Zoo() {
        register_all_operators();
        examples::build_every_operator(*graph);
        for (auto& o : graph->operators()) {
            std::string t = o->type_name();
            if (t != "Input" && t != "ImmutableTensor" && t != "SharedParam")
                oprs.push_back(o.get());
        }
    }
    //! The first operator of `type` (whose first output is named `output`, when given).
    OperatorNode& find(const std::string& type, const std::string& output = "") const {
        for (auto* o : oprs)
            if (o->type_name() == type && (output.empty() || o->output(0)->name() == output))
                return *o;
        throw std::logic_error("no " + type + " in the zoo");
    }
};

Fields params_of(const OperatorNode& opr) {
    MapWriter w;
    OperatorRegistry::instance().find(opr.type_name())->dump_params(opr, w);
    return w.fields;
}

//! Loads `opr`'s type from `fields` with `opr`'s inputs (or `inputs`); returns the error
//! message, or "" when it loaded. Errors other than braid's (and internal ones) fail the test.
std::string load_with(const OperatorNode& opr, Fields fields,
                      const SymbolVarArray* inputs = nullptr) {
    SymbolVarArray own;
    for (auto* v : opr.inputs()) own.push_back(v);
    MapReader reader(std::move(fields), fmt::format("{} \"t\"", opr.type_name()));
    OperatorConfig config("t", opr.comp_node());
    CollectiveBinding collective;
    std::map<std::string, std::string> bindings;
    std::map<std::string, TensorShape> shapes;
    OprLoadContext ctx{*opr.graph(), inputs ? *inputs : own, reader, config, collective, bindings,
                       shapes};
    try {
        OperatorRegistry::instance().find(opr.type_name())->load(ctx);
    } catch (const InternalError& e) {
        ADD_FAILURE() << opr.type_name() << ": internal error: " << e.what();
        return e.what();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

//! `fields` with `name` set to `value`.
Fields with(Fields fields, const std::string& name, Value value) {
    fields[name] = std::move(value);
    return fields;
}

} // namespace

TEST(OperatorLoaders, DumpedParamsLoadBack) {
    Zoo zoo;
    for (auto* o : zoo.oprs) EXPECT_EQ(load_with(*o, params_of(*o)), "") << o->describe();
}

TEST(OperatorLoaders, RefuseBadCountsAxesAndRanges) {
    Zoo zoo;
    auto err = [&](const std::string& type, const std::string& field, Value v,
                   const std::string& output = "") {
        auto& o = zoo.find(type, output);
        return load_with(o, with(params_of(o), field, std::move(v)));
    };
    // Split: the number of parts is bounded, and one of sizes / nr_parts is needed.
    auto& split = zoo.find("Split");
    auto sp = params_of(split);
    EXPECT_THAT(err("Split", "nr_parts", int64_t(1) << 40),
                HasSubstr("Split \"t\": param \"nr_parts\" is 1099511627776; expected 0..65536"));
    EXPECT_THAT(
        load_with(split, with(with(sp, "sizes", std::vector<int64_t>{}), "nr_parts", int64_t(0))),
        HasSubstr("expected part sizes or a positive number of parts"));
    EXPECT_THAT(err("Split", "sizes", std::vector<int64_t>{3, -8}), HasSubstr("\"-8\""));
    EXPECT_THAT(err("Split", "sizes", std::vector<int64_t>{3, 9}),
                HasSubstr("sizes sum to 12 but axis 1"));
    // Subtensor items: consistent lists, flags 0/1, nonzero steps, well-formed indices.
    EXPECT_THAT(err("Subtensor", "step", std::vector<int64_t>{2}, "strided"),
                HasSubstr("Subtensor \"t\": param \"step\" has 1 entries, param \"axis\" has 2"));
    EXPECT_THAT(err("Subtensor", "step", std::vector<int64_t>{0, 1}, "strided"),
                HasSubstr("item 0 has step 0; the step must be nonzero"));
    EXPECT_THAT(err("Subtensor", "has_stop", std::vector<int64_t>{0, 2}, "strided"),
                HasSubstr("param \"has_stop\" holds 2 for item 1; expected 0 or 1"));
    EXPECT_THAT(err("Subtensor", "has_start", std::vector<int64_t>{1, 0}, "strided"),
                HasSubstr("item 1 is an index, which needs a start"));
    EXPECT_THAT(err("Subtensor", "axis", std::vector<int64_t>{0, 0}, "strided"),
                HasSubstr("axis 0 is indexed twice"));
    EXPECT_THAT(err("Subtensor", "axis", std::vector<int64_t>(8, 0), "strided"),
                HasSubstr("8 indexing items; each indexes another axis, so at most 7"));
    // Shape manipulation.
    EXPECT_THAT(err("Dimshuffle", "pattern", std::vector<int64_t>(8, -1)),
                HasSubstr("param \"pattern\" has 8 entries; the output rank is at most 7"));
    EXPECT_THAT(err("Dimshuffle", "pattern", std::vector<int64_t>{1, -2, 0}),
                HasSubstr("param \"pattern\" holds -2"));
    EXPECT_THAT(err("Dimshuffle", "pattern", std::vector<int64_t>{1, 1}),
                HasSubstr("axis 1 appears twice"));
    EXPECT_THAT(err("AxisAddRemove", "kind", std::string("INSERT")),
                HasSubstr("param \"kind\" has an invalid value \"INSERT\""));
    // Normalization: input count from has_weight / has_bias, normalized_ndim, eps.
    auto& ln = zoo.find("LayerNorm");
    EXPECT_THAT(load_with(ln, with(params_of(ln), "has_bias", false)),
                HasSubstr("LayerNorm \"t\": takes 2 inputs, the model gives 3"));
    EXPECT_THAT(err("LayerNorm", "normalized_ndim", int64_t(0)),
                HasSubstr("param \"normalized_ndim\" is 0; expected 1..7"));
    EXPECT_THAT(err("RMSNorm", "eps", -1.0), HasSubstr("param \"eps\" is -1; expected a finite"));
    EXPECT_THAT(err("Softmax", "axis", int64_t(2)), HasSubstr("axis 2 out of range"));
    // Arange: finite bounds, a nonzero step, at most 2^48 elements.
    EXPECT_THAT(err("Arange", "step", 0.0), HasSubstr("the step finite and nonzero"));
    EXPECT_THAT(err("Arange", "stop", std::nan("")), HasSubstr("the bounds must be finite"));
    EXPECT_THAT(err("Arange", "stop", 1e300), HasSubstr("more than 2^48"));
    EXPECT_THAT(err("Fill", "dtype", std::string("complex64")), HasSubstr("invalid value"));
    // Floats that must be finite, enums by name.
    EXPECT_THAT(err("Attention", "scale", 1e300),
                HasSubstr("Attention \"t\": param \"scale\" has an invalid value \"1e+300\""));
    EXPECT_THAT(err("Attention", "scale", std::nan("")), HasSubstr("scale must be finite"));
    EXPECT_THAT(err("BatchNorm", "eps", std::nan("")), HasSubstr("param \"eps\" is nan"));
    EXPECT_THAT(err("ParamUpdate", "kind", std::string("RMSPROP")),
                HasSubstr("param \"kind\" has an invalid value \"RMSPROP\""));
    EXPECT_THAT(err("ParamUpdate", "lr", std::numeric_limits<double>::infinity()),
                HasSubstr("param \"lr\" is inf"));
    auto& adam = zoo.find("ParamUpdate", "updated_adam");
    EXPECT_THAT(load_with(adam, with(params_of(adam), "beta2", 1.0)),
                HasSubstr("param \"beta2\" is 1; Adam needs 0 <= beta < 1"));
    EXPECT_THAT(err("Pooling", "mode", std::string("MEDIAN")), HasSubstr("\"MEDIAN\""));
    EXPECT_THAT(err("ArgReduce", "mode", std::string("MAX")), HasSubstr("\"MAX\""));
    // Ints that must fit the operator's fields; geometry that make() refuses.
    EXPECT_THAT(err("Conv2d", "groups", int64_t(1) << 40),
                HasSubstr("param \"groups\" has an invalid value \"1099511627776\""));
    EXPECT_THAT(err("Conv2d", "stride_w", int64_t(0)), HasSubstr("strides must be >= 1"));
    EXPECT_THAT(err("Pooling", "pad_h", int64_t(2)), HasSubstr("smaller than the window"));
    EXPECT_THAT(err("Gather", "axis", int64_t(-3)), HasSubstr("axis -3 out of range"));
    EXPECT_THAT(err("Concat", "axis", int64_t(2)), HasSubstr("axis 2 out of range"));
    // CollectiveComm: the group size and the rank recorded in it.
    EXPECT_THAT(err("CollectiveComm", "nr_devices", int64_t(0)),
                HasSubstr("CollectiveComm \"t\": param \"nr_devices\" is 0; expected 1..1048576"));
    EXPECT_THAT(
        err("CollectiveComm", "rank", int64_t(1)),
        HasSubstr("param \"rank\" is 1; expected -1 (unassigned) or 0..0 for a group of 1"));
    EXPECT_THAT(err("CollectiveComm", "mode", std::string("ALL_REDUCE_AVG")),
                HasSubstr("param \"mode\" has an invalid value \"ALL_REDUCE_AVG\""));
    // Backward operators: spatial sizes fit 32 bits, geometry fits the inputs.
    EXPECT_THAT(err("Conv2dBackwardData", "in_h", int64_t(1) << 40),
                HasSubstr("param \"in_h\" has an invalid value \"1099511627776\""));
    EXPECT_THAT(err("Conv2dBackwardFilter", "kernel_w", int64_t(5)),
                HasSubstr("does not fit input {1,1,4,6} with a 3x5 kernel"));
    EXPECT_THAT(err("PoolingBackward", "mode", std::string("MEDIAN")), HasSubstr("\"MEDIAN\""));
    EXPECT_THAT(err("ScatterAdd", "axis", int64_t(2)), HasSubstr("axis 2 out of range"));
    // Missing params and input counts.
    auto& mm = zoo.find("BatchedMatMul");
    auto no_flag = params_of(mm);
    no_flag.erase("transpose_b");
    EXPECT_THAT(load_with(mm, no_flag),
                HasSubstr("BatchedMatMul \"t\": param \"transpose_b\" is missing"));
    SymbolVarArray one{mm.input(0)};
    EXPECT_THAT(load_with(mm, params_of(mm), &one),
                HasSubstr("BatchedMatMul \"t\": takes 2 inputs, the model gives 1"));
}

TEST(OperatorLoaders, NoParamValueCrashesALoader) {
    // Each field of each operator set to extreme values of its type, one at a time: the
    // loader builds the operator or throws a braid error (load_with fails on anything else).
    Zoo zoo;
    const int64_t big = std::numeric_limits<int64_t>::max(),
                  small = std::numeric_limits<int64_t>::min();
    const std::vector<Value> ints = {int64_t(-1), int64_t(0), int64_t(7), big, small};
    const std::vector<Value> floats = {
        0.0, -0.0, -1.0, 1e300, -1e300, std::nan(""), std::numeric_limits<double>::infinity()};
    const std::vector<Value> lists = {
        std::vector<int64_t>{},           std::vector<int64_t>{-1},
        std::vector<int64_t>{big},        std::vector<int64_t>{small},
        std::vector<int64_t>{big, small}, std::vector<int64_t>{small, big},
        std::vector<int64_t>(9, 1),       std::vector<int64_t>{1, 0, -7}};
    size_t tried = 0;
    for (auto* o : zoo.oprs) {
        auto base = params_of(*o);
        for (auto& [name, value] : base) {
            const std::vector<Value>* values = nullptr;
            std::vector<Value> other;
            if (std::holds_alternative<int64_t>(value)) values = &ints;
            if (std::holds_alternative<double>(value)) values = &floats;
            if (std::holds_alternative<std::vector<int64_t>>(value)) values = &lists;
            if (std::holds_alternative<bool>(value)) other = {!std::get<bool>(value)};
            if (std::holds_alternative<std::string>(value))
                other = {std::string(), std::string("?")};
            if (!values) values = &other;
            for (auto& v : *values) {
                SCOPED_TRACE(o->describe() + " " + name);
                load_with(*o, with(base, name, v));
                ++tried;
            }
            auto missing = base;
            missing.erase(name);
            load_with(*o, missing);
            load_with(*o, with(base, name, std::string("wrong type")));
        }
    }
    EXPECT_GT(tried, 200u);
}
