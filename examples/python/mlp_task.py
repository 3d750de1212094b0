"""The examples' classification task and MLP, shared by train_mlp.py and data_parallel.py: a
fixed random teacher labels Gaussian inputs; a 2-layer MLP learns it with log-softmax
cross-entropy."""
import numpy as np

import braid
from braid import ops

FEATURES, HIDDEN, CLASSES = 16, 32, 4


def initial_params(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal((HIDDEN, CLASSES)) / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros(CLASSES, np.float32),
    }


def batches(steps, batch, seed=1):
    """`steps` batches (x, one-hot labels) of the teacher's task."""
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    for _ in range(steps):
        x = rng.standard_normal((batch, FEATURES)).astype(np.float32)
        yield x, np.eye(CLASSES, dtype=np.float32)[(x @ teacher).argmax(1)]


def build(graph, values, batch):
    """The MLP's parameters (from `values`), inputs and mean loss over a batch of `batch` rows."""
    params = [graph.param(values[k], name=k) for k in ("w1", "b1", "w2", "b2")]
    w1, b1, w2, b2 = params
    x = graph.input("x", (batch, FEATURES))
    labels = graph.input("labels", (batch, CLASSES))
    logits = ops.relu(x @ w1 + b1) @ w2 + b2
    loss = -(labels * ops.log_softmax(logits, axis=1)).sum(axis=1).mean()
    return params, loss
