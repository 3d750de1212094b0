"""braid.Model and braid.Context: the embedding API from Python."""
import subprocess
import threading
import time

import numpy as np
import pytest

import braid


def rows(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 784)).astype(np.float32)


def test_model_describes_its_inputs_and_outputs(models):
    model = braid.Model(str(models / "mlp.braid"))
    (x,) = model.inputs
    assert (x.name, x.dtype, x.shape, x.kind) == ("x", np.dtype(np.float32), (-1, 784), "tensor")
    assert [o.name for o in model.outputs] == ["logits"]
    assert model.weight_bytes > 0


def test_results_equal_braid_run_bitwise(models, build_dir, tmp_path):
    x = rows(5, seed=1)
    np.save(tmp_path / "x.npy", x)
    subprocess.run([str(build_dir / "tools" / "braid-run"), str(models / "mlp.braid"), "--input",
                    f"x={tmp_path / 'x.npy'}", "--iter", "1", "--output-dir", str(tmp_path)],
                   check=True, capture_output=True)
    want = np.load(tmp_path / "logits.npy")
    got = braid.Model(str(models / "mlp.braid")).context().run({"x": x})["logits"]
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_contiguous_inputs_are_read_in_place_and_others_are_copied(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    x = rows(8)
    y = ctx.run({"x": x})["logits"]
    assert ctx.input_address("x") == x.ctypes.data
    wide = np.zeros((8, 1568), np.float32)
    wide[:, ::2] = x
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    assert np.array_equal(ctx.run({"x": strided})["logits"], y)
    assert ctx.input_address("x") != strided.ctypes.data


def test_an_output_stays_valid_after_the_next_run(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    first = ctx.run({"x": rows(4, seed=2)})["logits"]
    kept = first.copy()
    ctx.run({"x": rows(4, seed=3)})
    assert np.array_equal(first, kept)


def test_outputs_can_be_chosen(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    assert list(ctx.run({"x": rows(2)}, ["logits"])) == ["logits"]
    with pytest.raises(braid.InvalidArgumentError, match="nope"):
        ctx.run({"x": rows(2)}, ["nope"])


def test_errors_are_python_exceptions_with_braids_messages(models, tmp_path):
    with pytest.raises(braid.NotFoundError) as e:
        braid.Model(str(tmp_path / "missing.braid"))
    assert isinstance(e.value, FileNotFoundError) and e.value.code == "NOT_FOUND"
    ctx = braid.Model(str(models / "mlp.braid")).context()
    with pytest.raises(braid.InvalidArgumentError, match=r"\{4,5\}.*\{-1,784\}") as e:
        ctx.run({"x": np.zeros((4, 5), np.float32)})
    assert isinstance(e.value, ValueError)
    with pytest.raises(braid.InvalidArgumentError, match="int64"):
        ctx.run({"x": np.zeros((4, 784), np.int64)})
    with pytest.raises(braid.InvalidArgumentError, match="complex"):
        ctx.run({"x": np.zeros((4, 784), np.complex64)})
    bad = tmp_path / "bad.braid"
    bad.write_bytes(b"not a model")
    with pytest.raises(braid.InvalidModelError):
        braid.Model(str(bad))


def test_threads_run_their_own_contexts_at_the_same_time(models):
    model = braid.Model(str(models / "mlp.braid"))
    inputs = [rows(16, seed=s) for s in range(4)]
    want = [model.context().run({"x": x})["logits"] for x in inputs]
    got = [None] * 4

    def work(i):
        ctx = model.context()
        for _ in range(20):
            got[i] = ctx.run({"x": inputs[i]})["logits"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w, g in zip(want, got):
        assert np.array_equal(w, g)


def test_model_run_is_safe_from_many_threads_and_takes_every_input(models):
    model = braid.Model(str(models / "mlp.braid"))
    x = rows(3)
    want = model.run({"x": x})["logits"]
    results = []
    threads = [threading.Thread(target=lambda: results.append(model.run({"x": x})["logits"]))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, want) for r in results)
    with pytest.raises(braid.InvalidArgumentError, match='input "x" is not in the feeds'):
        model.run({})


def test_the_gil_is_released_while_a_model_runs(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    x = rows(32768)
    ctx.run({"x": x})  # plan and warm up
    done = threading.Event()
    ticks = 0

    def run():
        ctx.run({"x": x}, threads=1)
        done.set()

    t = threading.Thread(target=run)
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0)
    t.join()
    assert ticks > 10, "the main thread did not run while the model ran"


def test_cancel_and_deadline(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    token = braid.CancelToken()
    token.cancel()
    with pytest.raises(braid.CancelledError) as e:
        ctx.run({"x": rows(2)}, cancel=token)
    assert e.value.code == "CANCELLED"
    token.reset()
    assert ctx.run({"x": rows(2)}, cancel=token)["logits"].shape == (2, 10)
    with pytest.raises(braid.DeadlineExceededError) as e:
        ctx.run({"x": rows(2)}, deadline_s=0)
    assert isinstance(e.value, TimeoutError)


def test_cancel_from_another_thread_stops_a_run(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    x = rows(32768)
    token = braid.CancelToken()
    outcome = []

    def run():
        try:
            for _ in range(1000):
                ctx.run({"x": x}, cancel=token, threads=1)
            outcome.append("finished")
        except braid.CancelledError:
            outcome.append("cancelled")

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.05)
    token.cancel()
    t.join(timeout=30)
    assert outcome == ["cancelled"]


def test_deterministic_rows_do_not_depend_on_the_batch(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    batch = rows(7, seed=4)
    together = ctx.run({"x": batch}, deterministic=True)["logits"]
    for i in range(7):
        alone = ctx.run({"x": batch[i:i + 1]}, deterministic=True, threads=1)["logits"]
        assert alone.tobytes() == together[i:i + 1].tobytes()


def test_onnx_models_run_as_imported(build_dir, tmp_path):
    maker = build_dir / "bench" / "make_vs_ort_models"
    if not maker.exists():
        pytest.skip("bench/make_vs_ort_models is not built (BRAID_BUILD_BENCH=OFF)")
    subprocess.run([str(maker), str(tmp_path)], check=True, capture_output=True)
    model = braid.Model(str(tmp_path / "mlp_small.onnx"))
    assert [i.shape for i in model.inputs] == [(64, 784)]
    x = np.load(tmp_path / "mlp_small.npy")
    (y,) = model.context().run({"x": x}).values()
    assert y.shape == (64, 10) and np.isfinite(y).all()


def test_a_context_refuses_a_second_thread_while_it_runs(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    x = rows(32768)
    ctx.run({"x": x})
    errors, started = [], threading.Event()

    def run():
        started.set()
        for _ in range(20):
            ctx.run({"x": x}, threads=1)

    t = threading.Thread(target=run)
    t.start()
    started.wait()
    try:
        for _ in range(200):
            try:
                ctx.run({"x": rows(2)})
            except braid.FailedPreconditionError as e:
                errors.append(e)
                break
    finally:
        t.join()
    assert errors and "another thread" in str(errors[0])


class DLPackTensor:
    """A tensor of another library, seen only through the DLPack protocol."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_producers_are_read_in_place_and_outputs_export_dlpack(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    x = rows(3, seed=5)
    y = ctx.run({"x": DLPackTensor(x)})["logits"]
    assert ctx.input_address("x") == x.ctypes.data
    assert np.array_equal(y, ctx.run({"x": x})["logits"])
    assert np.array_equal(np.from_dlpack(DLPackTensor(y)), y)


def test_buffer_protocol_objects_are_read_in_place(models):
    ctx = braid.Model(str(models / "mlp.braid")).context()
    x = rows(2, seed=6)
    view = memoryview(x)
    ctx.run({"x": view})
    assert ctx.input_address("x") == x.ctypes.data
