// The model and task of the training examples (train_mlp.cpp, data_parallel_mlp.cpp): a
// 2-layer MLP (relu hidden units, log-softmax cross-entropy) on a synthetic, deterministic
// classification task: 16-dim points from a fixed seed, labelled by which of 4 fixed
// "teacher" directions they align with most.
#pragma once

#include "braid.h"

#include <memory>
#include <random>

namespace braid::example {

constexpr size_t kIn = 16, kHidden = 64, kClasses = 4;

//! A float32 tensor of `shape` with values uniform in [-scale, scale).
inline std::shared_ptr<Tensor> uniform(const TensorShape& shape, std::mt19937& rng, float scale) {
    auto t = std::make_shared<Tensor>(shape, dtype::Float32());
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (size_t i = 0; i < shape.total_nr_elems(); ++i) t->ptr<float>()[i] = dist(rng);
    return t;
}

//! The MLP's parameter values: w1 {16,64}, b1 {64}, w2 {64,4}, b2 {4}.
struct MlpParams {
    std::shared_ptr<Tensor> w1, b1, w2, b2;

    //! Initial values drawn from `rng` (biases zero).
    static MlpParams init(std::mt19937& rng) {
        MlpParams p;
        p.w1 = uniform({kIn, kHidden}, rng, 0.4f);
        p.b1 = uniform({kHidden}, rng, 0.f);
        p.w2 = uniform({kHidden, kClasses}, rng, 0.2f);
        p.b2 = uniform({kClasses}, rng, 0.f);
        return p;
    }
    //! Copies with storage of their own (a training step updates its parameters in place).
    MlpParams clone() const {
        auto copy = [](const std::shared_ptr<Tensor>& t) {
            return std::make_shared<Tensor>(t->copy());
        };
        return {copy(w1), copy(b1), copy(w2), copy(b2)};
    }
    std::vector<std::shared_ptr<Tensor>> all() const { return {w1, b1, w2, b2}; }
};

//! The task's teacher directions {16,4}.
inline std::shared_ptr<Tensor> make_teacher(std::mt19937& rng) {
    return uniform({kIn, kClasses}, rng, 1.f);
}

//! Fills x {batch,16} with normal points and onehot {batch,4} with their labels: the argmax
//! over the teacher directions.
inline void make_batch(std::mt19937& rng, const Tensor& teacher, Tensor& x, Tensor& onehot) {
    std::normal_distribution<float> dist(0.f, 1.f);
    for (size_t b = 0; b < x.shape()[0]; ++b) {
        float* xb = x.ptr<float>() + b * kIn;
        for (size_t i = 0; i < kIn; ++i) xb[i] = dist(rng);
        size_t best = 0;
        float best_score = -1e30f;
        for (size_t c = 0; c < kClasses; ++c) {
            float s = 0;
            for (size_t i = 0; i < kIn; ++i) s += xb[i] * teacher.ptr<float>()[i * kClasses + c];
            if (s > best_score) best_score = s, best = c;
        }
        for (size_t c = 0; c < kClasses; ++c) onehot.ptr<float>()[b * kClasses + c] = c == best;
    }
}

//! The MLP's loss in a graph: inputs "x" {batch,16} and "labels" {batch,4} (one-hot).
struct MlpLoss {
    SymbolVarArray params; //!< w1, b1, w2, b2
    SymbolVar loss;        //!< mean over the batch of -<onehot, log_softmax(logits)>
};

//! Builds the MLP on `values` (used in place: updates write into them) for `batch` rows.
inline MlpLoss build_mlp_loss(ComputingGraph& graph, const MlpParams& values, size_t batch) {
    auto w1 = opr::SharedParam::make(graph, values.w1, "w1");
    auto b1 = opr::SharedParam::make(graph, values.b1, "b1");
    auto w2 = opr::SharedParam::make(graph, values.w2, "w2");
    auto b2 = opr::SharedParam::make(graph, values.b2, "b2");
    auto x = opr::Input::make(graph, "x", dtype::Float32(), {batch, kIn});
    auto onehot = opr::Input::make(graph, "labels", dtype::Float32(), {batch, kClasses});
    auto hidden = opr::relu(opr::matmul(x, w1) + b1);
    auto logits = opr::matmul(hidden, w2) + b2;
    auto log_probs = opr::log_softmax(logits, 1);
    auto loss = (-opr::reduce_mean(opr::reduce_sum(onehot * log_probs, {1}))).rename("loss");
    return {{w1, b1, w2, b2}, loss};
}

} // namespace braid::example
