// dump -> load -> execute reproduces the original graph's outputs bit for bit.
#include "graph/graph_copy.h"
#include "helpers.h"
#include "tools/example_models.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

using namespace braid;
using namespace braid::test;

namespace {

//! Runs the original graph and the model loaded back from `bytes` (or `path`) on the same
//! inputs and expects identical outputs.
void expect_same_outputs(const SymbolVarArray& outputs, const LoadedModel& loaded,
                         const std::vector<std::pair<std::string, Tensor>>& inputs) {
    std::vector<OutputSpec> specs(outputs.begin(), outputs.end());
    auto original = outputs[0].graph().compile(specs);
    auto expect = run_copy(*original, inputs, outputs.size());
    auto exec = loaded.compile();
    ASSERT_EQ(loaded.outputs.size(), outputs.size());
    auto actual = run_copy(*exec, inputs, outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
        EXPECT_EQ(loaded.outputs[i].name, outputs[i].name());
        EXPECT_TRUE(bit_identical(actual[i], expect[i]))
            << "output " << outputs[i].name() << " differs after the round trip";
    }
}

} // namespace

TEST(SerializationRoundTrip, MlpFromBufferAndFileGivesBitIdenticalOutputs) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto outputs = examples::build_mlp(*g);
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 784};
    opt.metadata = {{"k", "v"}};
    std::vector<uint8_t> bytes;
    dump(outputs, bytes, opt);
    std::vector<std::pair<std::string, Tensor>> inputs = {{"x", random_input({64, 784}, 1)}};

    auto from_buffer = load(bytes);
    expect_same_outputs(outputs, from_buffer, inputs);
    EXPECT_EQ(from_buffer.info.mapped_bytes, 0u); // a buffer is copied

    TempDir dir;
    dump(outputs, dir.file("mlp.braid"), opt);
    EXPECT_EQ(read_file(dir.file("mlp.braid")), bytes); // deterministic
    auto from_file = load(dir.file("mlp.braid"));
    expect_same_outputs(outputs, from_file, inputs);
    // w1 (784x256) and w2 (256x10) are large enough to be used in place from the mapping.
    EXPECT_EQ(from_file.info.mapped_bytes, (784 * 256 + 256 * 10) * 4u);
    EXPECT_EQ(from_file.info.nr_tensors, 4u);
    EXPECT_EQ(from_file.info.metadata.size(), 1u);
    ASSERT_EQ(from_file.inputs.size(), 1u);
    EXPECT_EQ(from_file.inputs[0].name, "x");
    EXPECT_EQ(from_file.inputs[0].shape_string(), "{-1,784}");
    EXPECT_EQ(from_file.inputs[0].default_shape, (TensorShape{64, 784}));
    EXPECT_EQ(from_file.outputs[0].name, "logits");
}

TEST(SerializationRoundTrip, OpenBatchDimRunsWithAnotherBatch) {
    auto g = ComputingGraph::make();
    auto outputs = examples::build_mlp(*g);
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 784};
    std::vector<uint8_t> bytes;
    dump(outputs, bytes, opt);
    std::vector<std::pair<std::string, Tensor>> inputs = {{"x", random_input({5, 784}, 2)}};
    LoadOptions lopt;
    lopt.input_shapes["x"] = TensorShape{5, 784};
    auto loaded = load(bytes, lopt);
    expect_same_outputs(outputs, loaded, inputs);
    EXPECT_EQ(loaded.outputs[0].var.shape(), (TensorShape{5, 10}));

    lopt.input_shapes["x"] = TensorShape{5, 783};
    EXPECT_THROW(load(bytes, lopt), ShapeError);
}

TEST(SerializationRoundTrip, EveryRegisteredOperatorTypeRoundTrips) {
    register_all_operators();
    auto g = ComputingGraph::make();
    auto outputs = examples::build_every_operator(*g);
    std::set<std::string> used;
    for (auto& opr : g->operators()) used.insert(opr->type_name());
    for (auto& type : OperatorRegistry::instance().type_names()) {
        EXPECT_TRUE(used.count(type)) << "operator type " << type
                                      << " is not in examples::build_every_operator(): give "
                                         "its descriptor an example (graph/operator_registry.h) "
                                         "so its params dump and load are tested";
        auto* traits = OperatorRegistry::instance().find(type);
        EXPECT_TRUE(traits->dump_params && traits->load) << type << " has no dumper or loader";
    }
    std::vector<uint8_t> bytes;
    dump(outputs, bytes);
    auto loaded = load(bytes);
    EXPECT_EQ(loaded.graph->operators().size(), g->operators().size());
    std::set<std::string> comp_nodes;
    for (auto& opr : loaded.graph->operators()) comp_nodes.insert(opr->comp_node().locator());
    EXPECT_EQ(comp_nodes, (std::set<std::string>{"cpu0", "cpu1"})); // the Copy's target

    // Dumping the loaded graph again gives the same file (before running it: running applies
    // the parameter updates).
    SymbolVarArray again;
    for (auto& o : loaded.outputs) again.push_back(o.var);
    std::vector<uint8_t> bytes2;
    dump(again, bytes2);
    EXPECT_EQ(bytes2, bytes);

    expect_same_outputs(outputs, loaded, {{"x", random_input({4, 6}, 3)}});
}

TEST(SerializationRoundTrip, TrainingGraphWithBackwardOperatorsRoundTrips) {
    // Gradients of a small conv / pooling / gather / embedding network: grad() inserts
    // Conv2dBackwardData and Conv2dBackwardFilter, PoolingBackward, ScatterAdd and IndexAdd.
    register_all_operators();
    auto g = ComputingGraph::make();
    auto param = [&](const TensorShape& shape, uint32_t seed, const char* name) {
        return opr::SharedParam::make(*g, std::make_shared<Tensor>(random_input(shape, seed)),
                                      name);
    };
    auto x = opr::Input::make(*g, "x", dtype::Float32(), {2, 1, 6, 6});
    auto ids = opr::Input::make(*g, "ids", dtype::Int32(), {4});
    auto w1 = param({3, 1, 3, 3}, 1, "w1"), w2 = param({2, 3, 3, 3}, 2, "w2");
    auto table = param({10, 4}, 3, "table");
    auto h = opr::relu(opr::Conv2d::make(x, w1, {1, 1, 1, 1, 1, 1, 1})); // {2,3,6,6}
    auto pooled = opr::Pooling::make(opr::Conv2d::make(h, w2, {1, 1, 1, 1, 1, 1, 1}),
                                     {opr::PoolMode::MAX, 2, 2, 2, 2, 0, 0, true}); // {2,2,3,3}
    auto feat = pooled.reshape(std::vector<long>{2, 18});
    Tensor pick(TensorShape{2, 1}, dtype::Int32());
    pick.ptr<int32_t>()[0] = 3;
    pick.ptr<int32_t>()[1] = 17;
    auto picked = opr::gather(feat, opr::ImmutableTensor::make(*g, pick, "pick"), 1);
    auto emb = opr::embedding(table, ids); // {4,4}
    auto loss = opr::reduce_sum(feat * feat) + opr::reduce_sum(picked) + opr::reduce_sum(emb * emb);
    auto grads = grad(loss, {w1, w2, table});
    SymbolVarArray outputs = {loss.rename("loss"), grads[0].rename("grad_w1"),
                              grads[1].rename("grad_w2"), grads[2].rename("grad_table")};
    std::set<std::string> types;
    for (auto& opr : g->operators()) types.insert(opr->type_name());
    for (auto* t : {"Conv2dBackwardData", "Conv2dBackwardFilter", "PoolingBackward", "ScatterAdd",
                    "IndexAdd"})
        EXPECT_TRUE(types.count(t)) << t << " is not in the gradient graph";

    std::vector<uint8_t> bytes;
    dump(outputs, bytes);
    auto loaded = load(bytes);
    Tensor id_values(TensorShape{4}, dtype::Int32());
    for (int i = 0; i < 4; ++i) id_values.ptr<int32_t>()[i] = (i * 3) % 10;
    expect_same_outputs(outputs, loaded,
                        {{"x", random_input({2, 1, 6, 6}, 4)}, {"ids", id_values}});
}

TEST(SerializationRoundTrip, EveryOperatorLoadsOntoOneCompNode) {
    // The fuzzer's setting: LoadOptions::comp_node puts every operator on one comp node, so a
    // Copy between two comp nodes loads as its input. A point-to-point transfer cannot run on
    // one comp node (its two sides must run at once): loaded so, it is a clear error, and the
    // rest of the graph is checked without it.
    {
        auto g = ComputingGraph::make();
        std::vector<uint8_t> bytes;
        dump(examples::build_every_operator(*g), bytes);
        LoadOptions opt;
        opt.comp_node = "cpu:default";
        try {
            auto loaded = load(bytes, opt);
            SymbolVarArray outs;
            for (auto& o : loaded.outputs) outs.push_back(o.var);
            std::vector<OutputSpec> specs(outs.begin(), outs.end());
            loaded.graph->compile(specs);
            ADD_FAILURE() << "a transfer on one comp node compiled";
        } catch (const Error& e) {
            EXPECT_THAT(std::string(e.what()),
                        ::testing::HasSubstr("the sender is on this receiver's comp node"));
        }
    }
    auto g = ComputingGraph::make();
    auto outputs = examples::build_every_operator(*g, /*point_to_point=*/false);
    std::vector<uint8_t> bytes;
    dump(outputs, bytes);
    LoadOptions opt;
    opt.comp_node = "cpu:default";
    auto loaded = load(bytes, opt);
    EXPECT_EQ(loaded.graph->operators().size(), g->operators().size() - 1);
    for (auto& opr : loaded.graph->operators())
        EXPECT_EQ(opr->comp_node().locator(), "cpu:default");
    expect_same_outputs(outputs, loaded, {{"x", random_input({4, 6}, 4)}});
}

TEST(GraphCopy, EveryOperatorTypeCopiesIntoAnotherGraphAndComputesTheSame) {
    // The in-memory copy (graph/graph_copy.h) goes through the same params functions as a
    // file: every example operator, copied with its Input, gives bit-identical outputs. A copy
    // shares its parameters' values with the source (an optimizer step in one updates both), so
    // the copy is made of a second, identical build and compared with the first.
    register_all_operators();
    auto g = ComputingGraph::make(), twin = ComputingGraph::make();
    auto outputs = examples::build_every_operator(*g, /*point_to_point=*/false);
    auto twin_outputs = examples::build_every_operator(*twin, /*point_to_point=*/false);
    auto target = ComputingGraph::make();
    auto copies = copy_graph(twin_outputs, *target);
    ASSERT_EQ(copies.size(), outputs.size());
    std::set<std::string> types;
    for (auto& opr : target->operators()) types.insert(opr->type_name());
    for (auto& opr : g->operators())
        EXPECT_TRUE(types.count(opr->type_name())) << opr->type_name() << " was not copied";
    std::vector<std::pair<std::string, Tensor>> inputs{{"x", random_input({4, 6}, 4)}};
    std::vector<OutputSpec> a(outputs.begin(), outputs.end()), b(copies.begin(), copies.end());
    auto expect = run_copy(*g->compile(a), inputs, outputs.size());
    auto actual = run_copy(*target->compile(b), inputs, copies.size());
    for (size_t i = 0; i < outputs.size(); ++i)
        EXPECT_TRUE(bit_identical(actual[i], expect[i]))
            << "output " << outputs[i].name() << " differs in the copy";
}

TEST(SerializationRoundTrip, ExampleModelsGiveBitIdenticalOutputs) {
    register_all_operators();
    size_t built = 0;
    for (auto& m : examples::example_models()) {
        if (!m.build) continue;
        SCOPED_TRACE(m.name);
        ++built;
        auto g = ComputingGraph::make();
        auto outputs = m.build(*g);
        std::vector<uint8_t> bytes;
        dump(outputs, bytes, m.dump_options);
        auto loaded = load(bytes);
        std::vector<std::pair<std::string, Tensor>> inputs;
        for (size_t i = 0; i < loaded.inputs.size(); ++i) {
            auto& io = loaded.inputs[i];
            Tensor value = random_input(io.default_shape, uint32_t(10 + i));
            if (io.dtype == dtype::Int32()) { // class labels (dp_allreduce has 10 classes)
                Tensor labels(io.default_shape, dtype::Int32());
                for (size_t k = 0; k < labels.shape().total_nr_elems(); ++k)
                    labels.ptr<int32_t>()[k] = int32_t((k * 7 + i) % 10);
                value = labels;
            }
            inputs.emplace_back(io.name, value);
        }
        expect_same_outputs(outputs, loaded, inputs);
    }
    EXPECT_GE(built, 3u); // mlp, transformer_block and dp_allreduce
}

TEST(SerializationRoundTrip, TransformerBlockRunsWithAnotherSequenceLength) {
    auto g = ComputingGraph::make();
    auto outputs = examples::build_transformer_block(*g, 32);
    std::vector<uint8_t> bytes;
    DumpOptions dopt;
    dopt.input_shapes["x"] = {-1, 256};
    dump(outputs, bytes, dopt);
    for (size_t seq : {size_t(32), size_t(7)}) {
        SCOPED_TRACE(seq);
        LoadOptions opt;
        opt.input_shapes["x"] = TensorShape{seq, 256};
        auto loaded = load(bytes, opt);
        EXPECT_EQ(loaded.outputs[0].var.shape(), (TensorShape{seq, 256}));
        // The same block built for this length computes the same values.
        auto g2 = ComputingGraph::make();
        auto direct = examples::build_transformer_block(*g2, seq);
        Tensor x = random_input({seq, 256}, 11);
        auto expect = run_copy(*g2->compile({direct[0]}), {{"x", x}}, 1);
        auto actual = run_copy(*loaded.compile(), {{"x", x}}, 1);
        EXPECT_TRUE(bit_identical(actual[0], expect[0]));
    }
}

TEST(SerializationRoundTrip, EqualTensorsAreStoredOnce) {
    auto g = ComputingGraph::make();
    auto value = std::make_shared<Tensor>(random_input({32, 32}, 4));
    auto a = opr::SharedParam::make(*g, value, "a");
    auto b = opr::SharedParam::make(*g, std::make_shared<Tensor>(value->copy()), "b");
    auto c = opr::ImmutableTensor::make(*g, value->copy(), "c");
    std::vector<uint8_t> bytes;
    dump({(a + b + c).rename("sum")}, bytes);
    auto desc = describe_model(bytes);
    EXPECT_EQ(desc.tensors.size(), 1u);
    EXPECT_EQ(desc.info.tensor_bytes, 32 * 32 * 4u);
    EXPECT_LT(bytes.size(), 2 * 32 * 32 * 4u);
}

TEST(SerializationRoundTrip, LoadedTensorsAreAlignedAndShared) {
    auto g = ComputingGraph::make();
    auto value = std::make_shared<Tensor>(random_input({64, 64}, 5));
    auto a = opr::SharedParam::make(*g, value, "a");
    auto b = opr::SharedParam::make(*g, value, "b"); // same tensor object, two operators
    TempDir dir;
    dump({(a * b).rename("y")}, dir.file("m.braid"));
    auto loaded = load(dir.file("m.braid"));
    std::vector<opr::SharedParam*> params;
    for (auto& opr : loaded.graph->operators())
        if (auto* p = dynamic_cast<opr::SharedParam*>(opr.get())) params.push_back(p);
    ASSERT_EQ(params.size(), 2u);
    EXPECT_EQ(params[0]->param(), params[1]->param()); // one shared tensor again
    EXPECT_EQ(reinterpret_cast<uintptr_t>(params[0]->param()->raw_ptr()) % 64, 0u);
    EXPECT_EQ(loaded.info.mapped_bytes, 64 * 64 * 4u);
    // Writable copy-on-write: updating the parameter never touches the file.
    auto before = read_file(dir.file("m.braid"));
    params[0]->param()->ptr<float>()[0] = 123.f;
    EXPECT_EQ(read_file(dir.file("m.braid")), before);
}

TEST(SerializationRoundTrip, CompNodeIsRecordedAndCanBeOverridden) {
    GraphOptions gopt;
    gopt.default_comp_node = "cpu1";
    auto g = ComputingGraph::make(gopt);
    auto outputs = examples::build_mlp(*g, 2, 8, 4, 3);
    std::vector<uint8_t> bytes;
    dump(outputs, bytes);
    auto loaded = load(bytes);
    EXPECT_EQ(loaded.outputs[0].var.comp_node().locator(), "cpu1");
    LoadOptions opt;
    opt.comp_node = "cpu:default";
    auto inline_model = load(bytes, opt);
    for (auto& opr : inline_model.graph->operators())
        EXPECT_EQ(opr->comp_node().locator(), "cpu:default");
    expect_same_outputs(outputs, inline_model, {{"x", random_input({2, 8}, 6)}});
}

TEST(SerializationDump, RejectsDuplicateOutputNamesAndBadInputShapes) {
    auto g = ComputingGraph::make();
    auto outputs = examples::build_mlp(*g, 2, 8, 4, 3);
    std::vector<uint8_t> bytes;
    EXPECT_THROW(dump({outputs[0], outputs[0]}, bytes), SerializationError);
    DumpOptions opt;
    opt.input_shapes["x"] = {-1, 9};
    EXPECT_THROW(dump(outputs, bytes, opt), SerializationError);
    opt.input_shapes.clear();
    opt.input_shapes["nope"] = {-1, 8};
    EXPECT_THROW(dump(outputs, bytes, opt), SerializationError);
}
