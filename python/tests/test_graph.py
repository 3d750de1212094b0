"""braid.Graph from Python: vars, static shapes, operators, grad, minimize, dump."""
import numpy as np
import pytest

import braid
from braid import ops


def test_shapes_are_known_before_running():
    g = braid.Graph()
    x = g.input("x", (32, 784))
    w = g.param(np.zeros((784, 10), np.float32), name="w")
    y = ops.relu(x @ w + 1.0)
    assert y.shape == (32, 10) and y.dtype == np.float32
    assert ops.reduce_sum(y, axis=1).shape == (32,)
    assert y.reshape(16, 20).shape == (16, 20)
    assert y.T.shape == (10, 32)
    assert ops.concat([y, y], axis=0).shape == (64, 10)


def test_operators_match_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    g = braid.Graph()
    x, w = g.input("a", a.shape), g.input("b", b.shape)
    outs = [x @ w, (x * 2.0 - 1.0) / 4.0, ops.softmax(x @ w, axis=-1), ops.exp(x),
            ops.maximum(x, 0.5), x.mean(axis=0), -x + 1]
    got = g.compile(outs)(a=a, b=b)
    e = np.exp(a @ b - (a @ b).max(-1, keepdims=True))
    want = [a @ b, (a * 2 - 1) / 4, e / e.sum(-1, keepdims=True), np.exp(a), np.maximum(a, 0.5),
            a.mean(0), -a + 1]
    for gv, wv in zip(got, want):
        np.testing.assert_allclose(gv, wv, rtol=1e-5, atol=1e-6)


def test_wrong_shapes_raise_shape_error_naming_the_operator():
    g = braid.Graph()
    with pytest.raises(braid.ShapeError, match=r"MatMul.*\{4,3\} x \{5,2\}") as e:
        g.input("x", (4, 3)) @ g.input("z", (5, 2))
    assert isinstance(e.value, ValueError)


def test_vars_of_two_graphs_do_not_mix():
    a, b = braid.Graph(), braid.Graph()
    with pytest.raises(braid.GraphError, match="different graphs"):
        a.input("x", (2,)) + b.input("y", (2,))


def test_grad_matches_the_analytic_gradient():
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((6, 4)).astype(np.float32)
    wv = rng.standard_normal((4, 3)).astype(np.float32)
    g = braid.Graph()
    x = g.input("x", xv.shape)
    w = g.param(wv, name="w")
    loss = ((x @ w) * (x @ w)).sum()
    (dw,) = braid.grad(loss, [w])
    assert dw.shape == (4, 3)
    (got,) = g.compile([dw])(x=xv)
    np.testing.assert_allclose(got, 2 * xv.T @ (xv @ wv), rtol=1e-4, atol=1e-5)


def test_minimize_trains_a_classifier():
    rng = np.random.default_rng(2)
    teacher = rng.standard_normal((8, 3)).astype(np.float32)
    g = braid.Graph()
    x = g.input("x", (64, 8))
    labels = g.input("labels", (64, 3))
    w1 = g.param(0.3 * rng.standard_normal((8, 16)).astype(np.float32), name="w1")
    b1 = g.param(np.zeros(16, np.float32), name="b1")
    w2 = g.param(0.3 * rng.standard_normal((16, 3)).astype(np.float32), name="w2")
    logits = ops.relu(x @ w1 + b1) @ w2
    loss = -(labels * ops.log_softmax(logits, axis=1)).sum(axis=1).mean()
    step = g.compile([loss] + braid.minimize(loss, [w1, b1, w2], braid.SGD(lr=0.1, momentum=0.9)))
    before = w1.numpy().copy()
    losses = []
    for _ in range(150):
        xb = rng.standard_normal((64, 8)).astype(np.float32)
        yb = np.eye(3, dtype=np.float32)[(xb @ teacher).argmax(1)]
        losses.append(float(step(x=xb, labels=yb)[0]))
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    assert not np.array_equal(w1.numpy(), before)


def test_dump_and_load_give_the_same_results(tmp_path):
    rng = np.random.default_rng(3)
    g = braid.Graph()
    x = g.input("x", (4, 5))
    w = g.param(rng.standard_normal((5, 2)).astype(np.float32), name="w")
    y = ops.tanh(x @ w).rename("y")
    xv = rng.standard_normal((4, 5)).astype(np.float32)
    (want,) = g.compile([y])(x=xv)
    braid.dump(str(tmp_path / "m.braid"), [y])
    model = braid.load(str(tmp_path / "m.braid"))
    got = model.context().run({"x": xv})["y"]
    assert got.tobytes() == want.tobytes()


def test_param_numpy_refuses_other_vars():
    g = braid.Graph()
    with pytest.raises(braid.InvalidArgumentError, match="not a parameter"):
        g.input("x", (2,)).numpy()


def test_type_stubs_name_everything_the_module_has():
    import ast
    import pathlib

    here = pathlib.Path(braid.__file__).resolve().parent

    def stub_names(name):
        tree = ast.parse((here / name).read_text())
        return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}

    module = {n for n in dir(braid._braid) if not n.startswith("_") and n != "ops"}
    assert module - stub_names("_braid.pyi") == set()
    assert {n for n in dir(ops) if not n.startswith("_")} - stub_names("ops.pyi") == set()
    import braid.ops as ops_module

    assert ops_module.relu is ops.relu


def test_docstrings_help():
    assert "Loads the model" in braid.Model.__init__.__doc__
    assert "GIL" in braid.Context.run.__doc__
    assert braid.ops.all_reduce.__doc__
