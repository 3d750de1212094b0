#include "tools/example_models.h"

#include <random>

namespace braid::examples {

namespace {

std::shared_ptr<Tensor> uniform_param(const TensorShape& shape, std::mt19937& rng, float scale) {
    auto t = std::make_shared<Tensor>(shape, dtype::Float32());
    std::uniform_real_distribution<float> dist(-scale, scale);
    float* p = t->ptr<float>();
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) p[i] = dist(rng);
    return t;
}

} // namespace

SymbolVarArray build_mlp(ComputingGraph& graph, size_t batch, size_t in, size_t hidden,
                         size_t out) {
    std::mt19937 rng(42); // the seed and draw order of examples/mlp
    auto w1 = opr::SharedParam::make(graph, uniform_param({in, hidden}, rng, 0.05f), "w1");
    auto b1 = opr::SharedParam::make(graph, uniform_param({hidden}, rng, 0.05f), "b1");
    auto w2 = opr::SharedParam::make(graph, uniform_param({hidden, out}, rng, 0.05f), "w2");
    auto b2 = opr::SharedParam::make(graph, uniform_param({out}, rng, 0.05f), "b2");
    auto x = opr::Input::make(graph, "x", dtype::Float32(), {batch, in});
    auto h = opr::relu(opr::matmul(x, w1) + b1);
    return {(opr::matmul(h, w2) + b2).rename("logits")};
}

SymbolVarArray build_every_operator(ComputingGraph& graph) {
    std::mt19937 rng(7);
    auto x = opr::Input::make(graph, "x", dtype::Float32(), {4, 6});
    auto w = opr::SharedParam::make(graph, uniform_param({6, 5}, rng, 0.5f), "w");
    auto wt = opr::SharedParam::make(graph, uniform_param({5, 6}, rng, 0.5f), "wt");
    Tensor bias_value(TensorShape{5}, dtype::Float32());
    for (size_t i = 0; i < 5; ++i) bias_value.ptr<float>()[i] = 0.1f * float(i) - 0.2f;
    auto bias = opr::ImmutableTensor::make(graph, bias_value, "bias");

    // MatMul both ways, Elemwise unary and binary modes.
    auto y = opr::matmul(x, w) + bias;                   // {4,5}
    auto z = opr::matmul(opr::tanh(x), wt, false, true); // {4,5}
    auto act = opr::maximum(opr::relu(y), opr::sigmoid(z)) * opr::exp(opr::neg(opr::abs(z)));
    act = opr::minimum(act - opr::scalar_like(act, 0.25), opr::log(opr::abs(y) + 1.0) / 2.0);
    // Reduce with axes and keepdims, and over every axis.
    auto row_sum = opr::reduce_sum(act, {1}, true);   // {4,1}
    auto row_max = opr::reduce_max(act, {-1}, false); // {4}
    auto total = opr::reduce_mean(act);               // {}
    auto lowest = opr::reduce_min(act, {0});          // {5}
    // Reshape by params and by a shape var (GetVarShape), Broadcast both ways.
    auto flat = act.reshape(std::vector<long>{-1});                 // {20}
    auto back = flat.reshape(act.symshape());                       // {4,5}
    auto spread = row_sum.broadcast(TensorShape{4, 5});             // {4,5}
    auto spread2 = lowest.broadcast(back.symshape());               // {4,5}
    auto mixed = (back - spread + spread2 + total).rename("mixed"); // {4,5}
    // TypeCvt through float16 and to int32; integer arithmetic.
    auto half = mixed.astype(dtype::Float16()).rename("mixed_f16");
    auto ints = (opr::mul(mixed, opr::scalar_like(mixed, 100.0))).astype(dtype::Int32());
    auto int_out = opr::floor_div(ints, opr::scalar_like(ints, 7)).rename("ints");
    auto shape_out = mixed.symshape().rename("mixed_shape");
    return {mixed, half, int_out, row_max.rename("row_max"), shape_out};
}

std::vector<ExampleModel> example_models() {
    std::vector<ExampleModel> models;
    {
        ExampleModel m;
        m.name = "mlp";
        m.description = "2-layer MLP, batch 64, 784 -> 256 -> 10, relu (examples/mlp)";
        m.build = [](ComputingGraph& g) { return build_mlp(g); };
        m.dump_options.input_shapes["x"] = {-1, 784};
        m.dump_options.metadata = {{"example", "mlp"},
                                   {"weights", "uniform(-0.05, 0.05), seed 42"}};
        models.push_back(std::move(m));
    }
    {
        ExampleModel m;
        m.name = "transformer_block";
        m.description = "one pre-norm transformer block (layer norm, attention, MLP)";
        m.pending = "needs the LayerNorm and attention operators";
        models.push_back(std::move(m));
    }
    {
        ExampleModel m;
        m.name = "dp_allreduce";
        m.description = "data-parallel step: local MLP gradient all-reduced across ranks";
        m.pending = "needs the CollectiveComm operator";
        models.push_back(std::move(m));
    }
    return models;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> fuzz_seed_models() {
    std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds;
    {
        auto g = ComputingGraph::make();
        DumpOptions opt;
        opt.input_shapes["x"] = {-1, 8};
        opt.metadata = {{"seed", "tiny mlp"}};
        std::vector<uint8_t> bytes;
        dump(build_mlp(*g, 2, 8, 4, 3), bytes, opt);
        seeds.emplace_back("tiny_mlp", std::move(bytes));
    }
    {
        auto g = ComputingGraph::make();
        std::vector<uint8_t> bytes;
        dump(build_every_operator(*g), bytes);
        seeds.emplace_back("every_operator", std::move(bytes));
    }
    return seeds;
}

} // namespace braid::examples
