// Writes the ONNX models bench/vs_ort runs through braid and ONNX Runtime, with one input file
// (.npy) each, so that both runtimes read the same bytes:
//   mlp_small    64x784 -> 256 -> 10 (Gemm, Relu)
//   mlp_large    128x2048 -> 8192 -> 2048
//   transformer  a pre-norm transformer block: sequence 128, d_model 256, 4 heads, MLP 1024
//   cnn          a ResNet-style stem and block on 1x3x224x224 (conv, batch norm, relu, pooling)
//   add_chain    1,000 chained adds on one element
//
//   make_vs_ort_models OUT_DIR
#include "braid.h"
#include "serialization/npy.h"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

class Builder {
public:
    explicit Builder(const std::string& name) {
        m_model.set_ir_version(8);
        m_model.set_producer_name("braid bench/vs_ort");
        auto* op = m_model.add_opset_import();
        op->set_domain("");
        op->set_version(17);
        m_g = m_model.mutable_graph();
        m_g->set_name(name);
    }

    void input(const std::string& name, const std::vector<int64_t>& dims) {
        value_info(m_g->add_input(), name, dims);
    }
    void output(const std::string& name, const std::vector<int64_t>& dims) {
        value_info(m_g->add_output(), name, dims);
    }
    //! A float initializer of uniform values in [-scale, scale).
    std::string weight(const std::string& name, const std::vector<int64_t>& dims, float scale,
                       float offset = 0) {
        auto* t = m_g->add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        size_t n = 1;
        for (int64_t d : dims) t->add_dims(d), n *= size_t(d);
        std::uniform_real_distribution<float> u(-scale, scale);
        std::string raw(n * sizeof(float), '\0');
        auto* p = reinterpret_cast<float*>(raw.data());
        for (size_t i = 0; i < n; ++i) p[i] = offset + (scale > 0 ? u(m_rng) : 0.f);
        t->set_raw_data(raw);
        return name;
    }
    std::string ints(const std::string& name, const std::vector<int64_t>& v) {
        auto* t = m_g->add_initializer();
        t->set_name(name);
        t->set_data_type(onnx::TensorProto::INT64);
        t->add_dims(int64_t(v.size()));
        for (int64_t x : v) t->add_int64_data(x);
        return name;
    }
    //! A node; returns its (first) output's name.
    std::string node(const std::string& op, const std::vector<std::string>& ins,
                     std::vector<std::pair<std::string, int64_t>> int_attrs = {},
                     std::vector<std::pair<std::string, std::vector<int64_t>>> list_attrs = {},
                     std::vector<std::pair<std::string, float>> float_attrs = {}) {
        auto* n = m_g->add_node();
        n->set_op_type(op);
        std::string out = op + std::to_string(m_g->node_size());
        n->set_name(out);
        for (auto& i : ins) n->add_input(i);
        n->add_output(out);
        for (auto& [k, v] : int_attrs) {
            auto* a = n->add_attribute();
            a->set_name(k), a->set_type(onnx::AttributeProto::INT), a->set_i(v);
        }
        for (auto& [k, v] : list_attrs) {
            auto* a = n->add_attribute();
            a->set_name(k), a->set_type(onnx::AttributeProto::INTS);
            for (int64_t x : v) a->add_ints(x);
        }
        for (auto& [k, v] : float_attrs) {
            auto* a = n->add_attribute();
            a->set_name(k), a->set_type(onnx::AttributeProto::FLOAT), a->set_f(v);
        }
        return out;
    }
    //! Renames the last node's output to `name` (the graph output).
    void name_last(const std::string& name) {
        m_g->mutable_node(m_g->node_size() - 1)->set_output(0, name);
    }
    void save(const std::filesystem::path& path) const {
        std::ofstream f(path, std::ios::binary);
        m_model.SerializeToOstream(&f);
    }

private:
    static void value_info(onnx::ValueInfoProto* v, const std::string& name,
                           const std::vector<int64_t>& dims) {
        v->set_name(name);
        auto* tt = v->mutable_type()->mutable_tensor_type();
        tt->set_elem_type(onnx::TensorProto::FLOAT);
        for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
    }

    onnx::ModelProto m_model;
    onnx::GraphProto* m_g;
    std::mt19937 m_rng{7};
};

void write_input(const std::filesystem::path& path, const std::vector<size_t>& dims) {
    braid::Tensor t{braid::TensorShape(dims), braid::dtype::Float32()};
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (size_t i = 0; i < t.shape().total_nr_elems(); ++i) t.ptr<float>()[i] = u(rng);
    braid::write_npy(path.string(), t);
}

void mlp(const std::filesystem::path& dir, const std::string& name, int64_t batch, int64_t in,
         int64_t hidden, int64_t out) {
    Builder b(name);
    b.input("x", {batch, in});
    float s1 = 1.f / std::sqrt(float(in)), s2 = 1.f / std::sqrt(float(hidden));
    std::string h =
        b.node("Gemm", {"x", b.weight("w1", {in, hidden}, s1), b.weight("b1", {hidden}, s1)});
    h = b.node("Relu", {h});
    b.node("Gemm", {h, b.weight("w2", {hidden, out}, s2), b.weight("b2", {out}, s2)});
    b.name_last("y");
    b.output("y", {batch, out});
    b.save(dir / (name + ".onnx"));
    write_input(dir / (name + ".npy"), {size_t(batch), size_t(in)});
}

//! LayerNormalization over the last axis with its own scale and bias.
std::string layer_norm(Builder& b, const std::string& x, int64_t d, const std::string& tag) {
    return b.node("LayerNormalization",
                  {x, b.weight(tag + "_g", {d}, 0.1f, 1.f), b.weight(tag + "_b", {d}, 0.1f)},
                  {{"axis", -1}}, {}, {{"epsilon", 1e-5f}});
}

std::string linear(Builder& b, const std::string& x, int64_t in, int64_t out,
                   const std::string& tag) {
    float s = 1.f / std::sqrt(float(in));
    std::string y = b.node("MatMul", {x, b.weight(tag + "_w", {in, out}, s)});
    return b.node("Add", {y, b.weight(tag + "_b", {out}, s)});
}

void transformer(const std::filesystem::path& dir) {
    const int64_t seq = 128, d = 256, heads = 4, dh = d / heads, ff = 1024;
    Builder b("transformer");
    b.input("x", {seq, d});
    // Attention on the normalized input, added back to x.
    std::string n1 = layer_norm(b, "x", d, "ln1");
    auto split_heads = [&](const std::string& v) { // [seq, d] -> [heads, seq, dh]
        std::string r = b.node("Reshape", {v, b.ints(v + "_shape", {seq, heads, dh})});
        return b.node("Transpose", {r}, {}, {{"perm", {1, 0, 2}}});
    };
    std::string q = split_heads(linear(b, n1, d, d, "q"));
    std::string k = split_heads(linear(b, n1, d, d, "k"));
    std::string v = split_heads(linear(b, n1, d, d, "v"));
    std::string kt = b.node("Transpose", {k}, {}, {{"perm", {0, 2, 1}}});
    std::string scores = b.node("MatMul", {q, kt});
    scores = b.node("Mul", {scores, b.weight("inv_sqrt_dh", {1}, 0.f, 1.f / std::sqrt(float(dh)))});
    std::string p = b.node("Softmax", {scores}, {{"axis", -1}});
    std::string ctx = b.node("MatMul", {p, v}); // [heads, seq, dh]
    ctx = b.node("Transpose", {ctx}, {}, {{"perm", {1, 0, 2}}});
    ctx = b.node("Reshape", {ctx, b.ints("ctx_shape", {seq, d})});
    std::string h = b.node("Add", {"x", linear(b, ctx, d, d, "o")});
    // MLP with GELU (x/2 (1 + erf(x / sqrt 2))) on the normalized h, added back.
    std::string n2 = layer_norm(b, h, d, "ln2");
    std::string u = linear(b, n2, d, ff, "ff1");
    std::string e =
        b.node("Erf", {b.node("Mul", {u, b.weight("inv_sqrt2", {1}, 0.f, 0.70710678f)})});
    e = b.node("Add", {e, b.weight("one", {1}, 0.f, 1.f)});
    std::string g = b.node("Mul", {b.node("Mul", {u, e}), b.weight("half", {1}, 0.f, 0.5f)});
    b.node("Add", {h, linear(b, g, ff, d, "ff2")});
    b.name_last("y");
    b.output("y", {seq, d});
    b.save(dir / "transformer.onnx");
    write_input(dir / "transformer.npy", {size_t(seq), size_t(d)});
}

//! Conv (no bias) + BatchNormalization (+ Relu).
std::string conv_bn(Builder& b, const std::string& x, int64_t cin, int64_t cout, int64_t k,
                    int64_t stride, const std::string& tag, bool relu) {
    float s = 1.f / std::sqrt(float(cin * k * k));
    int64_t pad = k / 2;
    std::string y = b.node(
        "Conv", {x, b.weight(tag + "_w", {cout, cin, k, k}, s)}, {},
        {{"kernel_shape", {k, k}}, {"strides", {stride, stride}}, {"pads", {pad, pad, pad, pad}}});
    y = b.node("BatchNormalization",
               {y, b.weight(tag + "_g", {cout}, 0.1f, 1.f), b.weight(tag + "_b", {cout}, 0.1f),
                b.weight(tag + "_m", {cout}, 0.1f), b.weight(tag + "_v", {cout}, 0.1f, 1.f)},
               {}, {}, {{"epsilon", 1e-5f}});
    return relu ? b.node("Relu", {y}) : y;
}

void cnn(const std::filesystem::path& dir) {
    Builder b("cnn");
    b.input("x", {1, 3, 224, 224});
    std::string y = conv_bn(b, "x", 3, 64, 7, 2, "stem", true); // 112x112
    y = b.node("MaxPool", {y}, {},
               {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}});
    std::string r = conv_bn(b, y, 64, 64, 3, 1, "b1", true);
    r = conv_bn(b, r, 64, 64, 3, 1, "b2", false);
    y = b.node("Relu", {b.node("Add", {y, r})});
    y = b.node("GlobalAveragePool", {y});
    y = b.node("Flatten", {y}, {{"axis", 1}});
    b.node("Gemm", {y, b.weight("fc_w", {64, 10}, 0.125f), b.weight("fc_b", {10}, 0.125f)});
    b.name_last("y");
    b.output("y", {1, 10});
    b.save(dir / "cnn.onnx");
    write_input(dir / "cnn.npy", {1, 3, 224, 224});
}

void add_chain(const std::filesystem::path& dir) {
    Builder b("add_chain");
    b.input("x", {1});
    std::string one = b.weight("one", {1}, 0.f, 1.f), y = "x";
    for (int i = 0; i < 1000; ++i) y = b.node("Add", {y, one});
    b.name_last("y");
    b.output("y", {1});
    b.save(dir / "add_chain.onnx");
    write_input(dir / "add_chain.npy", {1});
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_vs_ort_models OUT_DIR\n");
        return 2;
    }
    std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    mlp(dir, "mlp_small", 64, 784, 256, 10);
    mlp(dir, "mlp_large", 128, 2048, 8192, 2048);
    transformer(dir);
    cnn(dir);
    add_chain(dir);
    std::printf("wrote 5 models and their inputs to %s\n", dir.c_str());
    return 0;
}
