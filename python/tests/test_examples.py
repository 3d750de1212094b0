"""The examples in examples/python, run as a user runs them, and Python's results against
braid-run's on the example models, bitwise."""
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import braid

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def run_example(args, launcher=(), timeout=180):
    env = dict(os.environ, BRAID_COMM_TIMEOUT="60")
    return subprocess.run([*launcher, sys.executable, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_train_mlp_learns_the_task():
    r = run_example([EXAMPLES / "train_mlp.py"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "below 0.2" in r.stdout


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_data_parallel_threads_match_one_device(ranks):
    r = run_example([EXAMPLES / "data_parallel.py", "--ranks", ranks])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{ranks} ranks (local)" in r.stdout and "-> ok" in r.stdout


def test_data_parallel_under_mpirun_matches_one_device():
    mpirun = shutil.which("mpirun")
    if not mpirun:
        pytest.skip("mpirun is not installed (openmpi-bin)")
    env_launcher = [mpirun, "-np", "2", "--oversubscribe", "--allow-run-as-root", "--mca", "btl",
                    "self,vader", "-x", "PYTHONPATH", "-x", "BRAID_COMM_TIMEOUT"]
    r = run_example([EXAMPLES / "data_parallel.py", "--mpi"], launcher=env_launcher)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("2 ranks (mpi)") == 2 and "TOO LARGE" not in r.stdout


def test_data_parallel_under_braid_launch_matches_one_device(build_dir):
    launch = build_dir / "tools" / "braid-launch"
    r = run_example([EXAMPLES / "data_parallel.py", "--launch"],
                    launcher=[str(launch), "-n", "2", "--timeout", "120", "--"])
    if "gloo backend is not built" in r.stderr:
        pytest.skip("this build has no gloo backend (libgloo-dev)")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("2 ranks (gloo)") == 2 and "TOO LARGE" not in r.stdout


def test_run_model_runs_an_onnx_model(build_dir, tmp_path):
    maker = build_dir / "bench" / "make_vs_ort_models"
    if not maker.exists():
        pytest.skip("bench/make_vs_ort_models is not built (BRAID_BUILD_BENCH=OFF)")
    subprocess.run([str(maker), str(tmp_path)], check=True, capture_output=True)
    r = run_example([EXAMPLES / "run_model.py", tmp_path / "cnn.onnx", "--runs", "3"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "output" in r.stdout and "median latency" in r.stdout


@pytest.mark.parametrize("name", ["mlp", "transformer_block"])
@pytest.mark.parametrize("batch", [1, 7])
def test_example_models_equal_braid_run_bitwise(models, build_dir, tmp_path, name, batch):
    model = braid.Model(str(models / f"{name}.braid"))
    rng = np.random.default_rng(batch)
    feeds, args = {}, []
    for info in model.inputs:
        shape = tuple(batch if d < 0 else d for d in info.shape)
        feeds[info.name] = rng.standard_normal(shape).astype(info.dtype)
        np.save(tmp_path / f"{info.name}.npy", feeds[info.name])
        args += ["--input", f"{info.name}={tmp_path / (info.name + '.npy')}"]
    subprocess.run([str(build_dir / "tools" / "braid-run"), str(models / f"{name}.braid"), *args,
                    "--iter", "1", "--output-dir", str(tmp_path / "out")],
                   check=True, capture_output=True)
    got = model.context().run(feeds)
    for out, value in got.items():
        want = np.load(tmp_path / "out" / f"{out}.npy")
        assert value.shape == want.shape and value.tobytes() == want.tobytes(), out
