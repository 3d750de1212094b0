#include "tools/example_models.h"

#include "operators/elemwise_chain.h"
#include "operators/fused_conv.h"
#include "operators/fused_matmul.h"
#include "parallel/context_parallel.h"

#include <cmath>
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

SymbolVarArray build_every_operator(ComputingGraph& graph, bool point_to_point) {
    register_all_operators(); // grad() below needs the gradient rules
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
    SymbolVarArray outs = {mixed, half, int_out, row_max.rename("row_max"), shape_out};
    auto out = [&](SymbolVar v, const char* name) { outs.push_back(v.rename(name)); };

    // BatchedMatMul: a shared right-hand matrix, and a batch times its own transpose.
    auto x3 = x.reshape(std::vector<long>{2, 2, 6});
    out(opr::batched_matmul(x3, w), "bmm");                // {2,2,5}
    out(opr::batched_matmul(x3, x3, false, true), "gram"); // {2,2,2}

    // Conv2d with different geometry along h and w, then grouped, dilated and exact; Pooling both
    // modes; BatchNorm.
    auto img = x.reshape(std::vector<long>{1, 1, 4, 6});
    auto cw = opr::SharedParam::make(graph, uniform_param({2, 1, 3, 3}, rng, 0.5f), "conv_w");
    auto conv = opr::Conv2d::make(img, cw, {1, 2, 1, 0, 1, 1, 1}); // {1,2,4,2}
    auto gw = opr::SharedParam::make(graph, uniform_param({2, 1, 2, 1}, rng, 0.5f), "group_w");
    out(opr::Conv2d::make(conv, gw, {1, 1, 0, 0, 2, 1, 2, true}), "conv_grouped"); // {1,2,2,2}
    out(opr::Pooling::make(conv, {opr::PoolMode::MAX, 2, 2, 1, 1, 1, 0, true}), "max_pool");
    out(opr::Pooling::make(conv, {opr::PoolMode::AVERAGE, 3, 2, 2, 1, 1, 1, false}), "avg_pool");
    auto stat = [&](float a, float b, const char* name) {
        Tensor t(TensorShape{2}, dtype::Float32());
        t.ptr<float>()[0] = a;
        t.ptr<float>()[1] = b;
        return opr::ImmutableTensor::make(graph, t, name);
    };
    out(opr::batch_norm(conv, stat(1.5f, 0.5f, "bn_scale"), stat(0.1f, -0.1f, "bn_bias"),
                        stat(0.2f, -0.3f, "bn_mean"), stat(0.8f, 1.2f, "bn_var"), 1e-3f),
        "bn");
    // The fused operators compile() forms (operators/fused_matmul.h, fused_conv.h), built
    // directly so that their params round-trip.
    out(opr::FusedMatMul::make(x, w, bias, {false, false, true, true, opr::ElemMode::GELU}),
        "fused_matmul"); // {4,5}
    opr::FusedConv2dParam fused_conv;
    fused_conv.conv = {1, 2, 1, 0, 1, 1, 1};
    fused_conv.has_bias = fused_conv.has_batch_norm = fused_conv.has_activation = true;
    fused_conv.eps = 1e-3f;
    out(opr::FusedConv2d::make({img, cw, stat(0.2f, -0.1f, "fc_bias"), stat(1.5f, 0.5f, "fc_scale"),
                                stat(0.1f, -0.1f, "fc_shift"), stat(0.2f, -0.3f, "fc_mean"),
                                stat(0.8f, 1.2f, "fc_var")},
                               fused_conv),
        "fused_conv"); // {1,2,4,2}
    // mixed * relu(mixed + 3), as an ElemwiseChain (operators/elemwise_chain.h).
    opr::ElemwiseChainParam chain;
    chain.modes = {int32_t(opr::ElemMode::ADD), int32_t(opr::ElemMode::RELU),
                   int32_t(opr::ElemMode::MUL)};
    chain.operands = {0, 1, -1, 2, -1, -1, 0, 3, -1};
    out(opr::ElemwiseChain::make({mixed, opr::scalar_like(mixed, 3.0)}, chain),
        "elemwise_chain"); // {4,5}
    // The backward operators of Conv2d and Pooling, with conv's output as the gradient.
    opr::Conv2dParam conv_geometry{1, 2, 1, 0, 1, 1, 1};
    out(opr::conv2d_backward_data(cw, conv, conv_geometry, 4, 6), "conv_dx");    // {1,1,4,6}
    out(opr::conv2d_backward_filter(img, conv, conv_geometry, 3, 3), "conv_dw"); // {2,1,3,3}
    opr::PoolingParam avg_exclude{opr::PoolMode::AVERAGE, 2, 2, 2, 1, 1, 0, false};
    out(opr::pooling_backward(conv, opr::Pooling::make(conv, avg_exclude), avg_exclude),
        "pool_dx"); // {1,2,4,2}

    // Attention with both outputs: causal with an explicit scale, and full with the default.
    auto heads = [](SymbolVar v) { return v.reshape(std::vector<long>{1, 2, 4, 3}); };
    auto q = heads(x), k = heads(opr::tanh(x)), v = heads(opr::sigmoid(x));
    auto causal = opr::scaled_dot_product_attention(q, k, v, true, 0.7f);
    out(causal[0], "attn_causal");
    out(causal[1], "attn_causal_lse");
    auto full = opr::scaled_dot_product_attention(q, v, k);
    out(full[0], "attn_full");
    out(full[1], "attn_full_lse");
    // Its gradient on CPU: AttentionGrad.
    auto attn_loss = opr::reduce_sum(full[0]) + opr::reduce_sum(full[1]);
    out(attn_loss, "attn_loss");
    out(braid::grad(attn_loss, x), "attn_grad");

    // ArgReduce both modes, feeding Gather and IndexingOneHot.
    auto am = opr::argmax(x, 1, true); // {4,1} int32
    out(am, "argmax");
    out(opr::argmin(x, 0), "argmin");                                    // {6}
    out(opr::gather(x, am, 1), "gathered");                              // {4,1}
    out(opr::indexing_one_hot(x, opr::argmin(x, 1), 1, true), "picked"); // {4,1}
    Tensor ids(TensorShape{2, 3}, dtype::Int32());
    for (int i = 0; i < 6; ++i) ids.ptr<int32_t>()[i] = (i * 7) % 10;
    auto table = opr::SharedParam::make(graph, uniform_param({10, 3}, rng, 1.f), "table");
    auto ids_var = opr::ImmutableTensor::make(graph, ids, "ids");
    auto embedded = opr::embedding(table, ids_var);
    out(embedded, "embedded"); // {2,3,3}
    // Their transposes (the gradients of Gather and Embedding): ScatterAdd and IndexAdd.
    out(opr::scatter_add(x, am, opr::gather(x, am, 1), 1), "scattered"); // {4,6}
    out(opr::index_add(table, ids_var.reshape(std::vector<long>{6}),
                       embedded.reshape(std::vector<long>{6, 3}), 0),
        "index_added"); // {10,3}

    // Dimshuffle with a new axis, AxisAddRemove both ways.
    auto shuffled = opr::dimshuffle(x, {1, -1, 0}); // {6,1,4}
    out(opr::squeeze(shuffled, {1}), "squeezed");   // {6,4}
    out(opr::expand_dims(x, {0, -1}), "expanded");  // {1,4,6,1}

    // Softmax, log-softmax; LayerNorm with weight and bias, with a bias only over two dims;
    // RMSNorm with a weight only.
    auto sm = opr::softmax(x, 1);
    out(sm, "softmax");
    out(opr::log_softmax(x, 0), "log_softmax");
    auto gain = opr::SharedParam::make(graph, uniform_param({6}, rng, 1.f), "gain");
    auto shift = opr::SharedParam::make(graph, uniform_param({2, 6}, rng, 1.f), "shift");
    out(opr::layer_norm(x, gain, opr::Subtensor::make(shift, {opr::AxisIndex::index(0, 0)})),
        "layer_norm");
    out(opr::layer_norm(x3, {}, shift, 2, 1e-3f), "layer_norm_2d");
    out(opr::rms_norm(x, gain), "rms_norm");

    // Subtensor, SetSubtensor and IncrSubtensor: negative bounds and steps, omitted bounds,
    // indices.
    using opr::AxisIndex;
    out(opr::subtensor(x, {AxisIndex::slice(0, 1, std::nullopt, 2), AxisIndex::index(1, -1)}),
        "strided");                                                                  // {2}
    out(opr::subtensor(x, {AxisIndex::slice(1, -2, std::nullopt, -2)}), "reversed"); // {4,3}
    out(opr::set_subtensor(x, opr::reduce_mean(x, {0}), {AxisIndex::index(0, 2)}), "set_row");
    out(opr::incr_subtensor(x, opr::gather(x, am, 1), {AxisIndex::slice(1, 1, 5, 2)}), "incr_cols");

    // Concat, and Split by sizes and into equal parts.
    auto joined = opr::concat({x, y}, 1); // {4,11}
    auto parts = opr::split(joined, 1, std::vector<size_t>{3, 8});
    out(parts[0], "split_a");
    out(parts[1], "split_b");
    auto halves = opr::split(x, 0, size_t(2));
    out(halves[0], "half_0");
    out(halves[1], "half_1");

    // Fill of a static shape and of a shape var; Arange up and down.
    out(opr::fill(graph, {2, 3}, 1.5, dtype::Float16()), "filled");
    out(opr::full_like(x, -2.0) * x, "scaled");
    out(opr::arange(graph, 0, 6), "range");
    out(opr::arange(graph, 5, -1, -1.5, dtype::Int32()), "range_down");
    // Every type whose descriptor carries an example (graph/operator_registry.h): the examples'
    // outputs are named after their type.
    auto& registry = OperatorRegistry::instance();
    for (auto& type : registry.type_names()) {
        auto example = registry.find(type)->example;
        if (!example) continue;
        auto vars = example(x);
        for (size_t i = 0; i < vars.size(); ++i)
            out(vars[i], ("example_" + type + "_" + std::to_string(i)).c_str());
    }

    // ParamUpdate with SGD (momentum, weight decay) and Adam, each on a parameter read by
    // nothing else; the Adam update also waits for the softmax.
    auto p_sgd = opr::SharedParam::make(graph, uniform_param({6}, rng, 1.f), "p_sgd");
    auto p_adam = opr::SharedParam::make(graph, uniform_param({6}, rng, 1.f), "p_adam");
    opr::OptimizerConfig sgd;
    sgd.lr = 0.1f;
    sgd.momentum = 0.9f;
    sgd.weight_decay = 0.01f;
    opr::OptimizerConfig adam;
    adam.kind = opr::OptimizerConfig::Kind::ADAM;
    adam.lr = 0.05f;
    adam.beta1 = 0.8f;
    adam.beta2 = 0.99f;
    adam.eps = 1e-6f;
    auto grad = opr::reduce_sum(x, {0}); // {6}
    out(opr::ParamUpdate::make(p_sgd, grad, {}, sgd), "updated_sgd");
    out(opr::ParamUpdate::make(p_adam, grad, {sm}, adam), "updated_adam");

    // CollectiveComm in a group of one rank (an identity); loaded with a CollectiveBinding it
    // joins a group of the binding's size.
    opr::Group solo;
    solo.key_prefix = "every_operator";
    solo.rank = 0;
    solo.client = std::make_shared<comm::InProcessGroupClient>();
    out(opr::all_reduce_sum(mixed, solo, "sum"), "all_reduced");

    // Copy to another comp node.
    out(opr::Copy::make(opr::sigmoid(y), CompNode::load("cpu1")), "copied");

    // Ring attention over a ring of one rank (plain attention) and its backward operator.
    auto qkv = mixed.reshape(std::vector<long>{1, 2, 2, 5});
    auto ring = opr::ring_attention(qkv, qkv, qkv, {"every_operator:ring", 1, 0, solo.client},
                                    {.causal = true});
    out(ring[0], "ring_out");
    auto ring_loss = opr::reduce_sum(ring[0]);
    out(ring_loss, "ring_loss");
    out(braid::grad(ring_loss, qkv), "ring_grad");

    // A point-to-point transfer from cpu0 to cpu1 (both sides in this graph).
    if (point_to_point) {
        out(opr::remote_send(mixed, "every_operator:p2p", 1, solo.client), "sent");
        out(opr::remote_recv(graph, "every_operator:p2p", 0, dtype::Float32(), solo.client, "local",
                             OperatorConfig::on(CompNode::load("cpu1"))),
            "received");
    }
    return outs;
}

SymbolVarArray build_transformer_block(ComputingGraph& graph, size_t seq, size_t d_model,
                                       size_t nr_heads, size_t d_ff,
                                       const ContextParallelPlan* cp) {
    if (nr_heads == 0 || d_model % nr_heads != 0)
        BRAID_THROW(ValueError, "transformer block: d_model {} does not split into {} heads",
                    d_model, nr_heads);
    std::mt19937 rng(1234);
    // Linear layers: weights uniform in +-1/sqrt(fan_in), biases in +-0.02; the layer norms
    // start near the identity (gain 1 +- 0.1, bias +- 0.02).
    auto linear = [&](SymbolVar in, size_t fan_in, size_t fan_out, const std::string& name) {
        auto wv = opr::SharedParam::make(
            graph, uniform_param({fan_in, fan_out}, rng, 1.f / std::sqrt(float(fan_in))),
            name + ".w");
        auto bv = opr::SharedParam::make(graph, uniform_param({fan_out}, rng, 0.02f), name + ".b");
        return opr::matmul(in, wv) + bv;
    };
    auto norm = [&](SymbolVar in, const std::string& name) {
        auto gain = uniform_param({d_model}, rng, 0.1f);
        for (size_t i = 0; i < d_model; ++i) gain->ptr<float>()[i] += 1.f;
        auto g = opr::SharedParam::make(graph, gain, name + ".gain");
        auto b =
            opr::SharedParam::make(graph, uniform_param({d_model}, rng, 0.02f), name + ".bias");
        return opr::layer_norm(in, g, b);
    };
    long heads = long(nr_heads), d_head = long(d_model / nr_heads);
    // [S, d_model] -> [1, heads, S, d_head]; the sequence dim is left open (-1).
    auto split_heads = [&](SymbolVar t) {
        return opr::dimshuffle(t.reshape(std::vector<long>{1, -1, heads, d_head}), {0, 2, 1, 3});
    };

    auto input = opr::Input::make(graph, "x", dtype::Float32(), {seq, d_model});
    opr::Group group;
    SymbolVar x = input;
    if (cp) {
        group.key_prefix = cp->key;
        group.size = cp->nranks;
        group.rank = int32_t(cp->rank);
        group.client = cp->client;
        group.backend = cp->backend;
        // Block r of the laid-out input is rank r's share; after the all-to-all every block
        // of this rank's result is its own share, and it keeps the first.
        auto laid = parallel::sequence_layout(input, 0, cp->nranks, true);
        x = opr::subtensor(opr::all_to_all(laid, group, "shard"),
                           {opr::AxisIndex::slice(0, 0, long(seq / cp->nranks))});
    }
    auto h = norm(x, "ln1");
    auto q = split_heads(linear(h, d_model, d_model, "attn.q"));
    auto k = split_heads(linear(h, d_model, d_model, "attn.k"));
    auto v = split_heads(linear(h, d_model, d_model, "attn.v"));
    SymbolVar ctx; // [1, H, S (this rank's share), Dh]
    if (cp) {
        opr::RingGroup ring{cp->key + ":attention", cp->nranks, cp->rank, cp->client, cp->backend};
        ctx = opr::ring_attention(q, k, v, ring, {.causal = true, .rotation = cp->rotation})[0];
    } else {
        ctx = opr::scaled_dot_product_attention(q, k, v, /*causal=*/true)[0];
    }
    auto merged = opr::dimshuffle(ctx, {0, 2, 1, 3}).reshape(std::vector<long>{-1, long(d_model)});
    auto x1 = x + linear(merged, d_model, d_model, "attn.out");
    auto m = opr::gelu(linear(norm(x1, "ln2"), d_model, d_ff, "mlp.fc1"));
    auto y = x1 + linear(m, d_ff, d_model, "mlp.fc2");
    if (cp)
        y = parallel::sequence_restore(opr::all_gather(y, group, "gather"), 0, cp->nranks, true);
    return {y.rename("y")};
}

SymbolVarArray build_dp_allreduce(ComputingGraph& graph, const opr::Group& group, size_t batch,
                                  size_t in, size_t hidden, size_t classes) {
    std::mt19937 rng(2024);
    auto w1 = opr::SharedParam::make(graph, uniform_param({in, hidden}, rng, 0.25f), "w1");
    auto b1 = opr::SharedParam::make(graph, uniform_param({hidden}, rng, 0.25f), "b1");
    auto w2 = opr::SharedParam::make(graph, uniform_param({hidden, classes}, rng, 0.25f), "w2");
    auto b2 = opr::SharedParam::make(graph, uniform_param({classes}, rng, 0.25f), "b2");
    auto x = opr::Input::make(graph, "x", dtype::Float32(), {batch, in});
    auto label = opr::Input::make(graph, "label", dtype::Int32(), {batch});
    auto logits = opr::matmul(opr::relu(opr::matmul(x, w1) + b1), w2) + b2;
    // Mean cross-entropy: -log_softmax(logits)[i, label[i]], averaged over the batch.
    auto loss =
        opr::neg(opr::reduce_mean(opr::indexing_one_hot(opr::log_softmax(logits, 1), label, 1)));
    auto grads = grad(loss, {w1, b1, w2, b2});
    SymbolVarArray outs = {opr::all_reduce_sum(loss, group, "loss").rename("loss")};
    const char* names[] = {"grad_w1", "grad_b1", "grad_w2", "grad_b2"};
    for (size_t i = 0; i < grads.size(); ++i)
        outs.push_back(opr::all_reduce_sum(grads[i], group, names[i]).rename(names[i]));
    return outs;
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
        // The mlp with a wider hidden layer: a batch-1 run reads 12.4 MiB of weights and takes
        // about as long as a served request's HTTP and protocol work, where the mlp's run is a
        // tenth of it (bench/bench_serve.sh's second model: what batching gains on each).
        ExampleModel m;
        m.name = "mlp_wide";
        m.description = "2-layer MLP, batch 64, 784 -> 4096 -> 10, relu";
        m.build = [](ComputingGraph& g) { return build_mlp(g, 64, 784, 4096); };
        m.dump_options.input_shapes["x"] = {-1, 784};
        m.dump_options.metadata = {{"example", "mlp_wide"},
                                   {"weights", "uniform(-0.05, 0.05), seed 42"}};
        models.push_back(std::move(m));
    }
    {
        ExampleModel m;
        m.name = "transformer_block";
        m.description = "one pre-norm transformer block: sequence 128, d_model 256, 4 causal "
                        "attention heads, MLP 256 -> 1024 -> 256 with gelu";
        m.build = [](ComputingGraph& g) { return build_transformer_block(g); };
        m.dump_options.input_shapes["x"] = {-1, 256};
        m.dump_options.metadata = {
            {"example", "transformer_block"},
            {"weights", "linear uniform(+-1/sqrt(fan_in)), biases uniform(+-0.02), layer norm gain "
                        "1 + uniform(+-0.1); seed 1234"}};
        models.push_back(std::move(m));
    }
    {
        ExampleModel m;
        m.name = "dp_allreduce";
        m.description = "data-parallel step: batch 8, MLP 16 -> 32 -> 10, cross-entropy loss; "
                        "loss and weight gradients all-reduced (sum) across ranks";
        m.build = [](ComputingGraph& g) {
            opr::Group solo;
            solo.key_prefix = "dp";
            solo.rank = 0;
            solo.client = std::make_shared<comm::InProcessGroupClient>();
            return build_dp_allreduce(g, solo);
        };
        m.dump_options.input_shapes["x"] = {-1, 16};
        m.dump_options.input_shapes["label"] = {-1};
        m.dump_options.metadata = {{"example", "dp_allreduce"},
                                   {"weights", "uniform(-0.25, 0.25), seed 2024"}};
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
