"""braid: a dataflow graph runtime with collective operators, from Python.

Run a model (a .braid file, or ONNX) on NumPy arrays::

    import braid, numpy as np
    model = braid.Model("mlp.braid")
    ctx = model.context()                      # one per thread
    y = ctx.run({"x": np.ones((4, 784), np.float32)})["y"]

Build, train and save a graph::

    g = braid.Graph()
    x = g.input("x", (32, 784))
    w = g.param(np.zeros((784, 10), np.float32), name="w")
    y = braid.ops.relu(x @ w + 1.0)            # y.shape == (32, 10), known now
    f = g.compile([y])
    (out,) = f(x=np.ones((32, 784), np.float32))

See docs/python.md.
"""
from ._braid import (  # noqa: F401  (the package's names; types in _braid.pyi and ops.pyi)
    CancelledError,
    CancelToken,
    CommError,
    CommTimeoutError,
    Context,
    DeadlineExceededError,
    DTypeError,
    Adam,
    Error,
    FailedPreconditionError,
    Function,
    Graph,
    Group,
    GraphError,
    InternalError,
    InvalidArgumentError,
    InvalidModelError,
    Model,
    NotFoundError,
    Optimizer,
    OutOfMemoryError,
    SGD,
    ShapeError,
    TensorInfo,
    Var,
    apply_gradients,
    dump,
    grad,
    minimize,
    ops,
    version,
)

import sys as _sys

# `import braid.ops` and `from braid.ops import relu` find the operators' module.
_sys.modules[__name__ + ".ops"] = ops

__version__ = version()


def load(path, **options):
    """The model at `path` (braid.Model(path, **options))."""
    return Model(path, **options)
