"""Runs a model (ONNX or .braid) on NumPy arrays and prints its outputs and its latency.

    PYTHONPATH=build/python python3 examples/python/run_model.py MODEL [--batch N] [--runs N]

Each input gets seeded random values of its dtype, its run-time dims (-1) set to --batch.
"""
import argparse
import time

import numpy as np

import braid


def random_input(info, batch, rng):
    shape = tuple(batch if d < 0 else d for d in info.shape)
    if info.dtype == np.dtype(np.bool_):
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(info.dtype, np.integer):
        return rng.integers(0, 10, shape).astype(info.dtype)
    return rng.standard_normal(shape).astype(info.dtype)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()

    model = braid.Model(args.model)
    rng = np.random.default_rng(0)
    feeds = {i.name: random_input(i, args.batch, rng) for i in model.inputs}
    for name, value in feeds.items():
        print(f"input  {name}: {value.dtype} {value.shape}")
    ctx = model.context()
    outputs = ctx.run(feeds)
    times = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        ctx.run(feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    for name, value in outputs.items():
        print(f"output {name}: {value.dtype} {value.shape} mean {float(np.mean(value)):.6g}")
    print(f"median latency {np.median(times):.3f} ms over {args.runs} runs")


if __name__ == "__main__":
    main()
