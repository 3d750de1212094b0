"""The Python package's overhead per run (docs/python.md, docs/performance.md).

A one-operator model (relu over a float32 vector) is run through braid.Context.run from a Python
loop, and through the same context driven from C++ (Context._time_native: the inputs bound
again, the run, every output's view read, as a C++ caller of Context::run does), alternating,
in the same process. Python's overhead is the difference of the medians. Target: at most 3 µs
per run, with the input passed without a copy (checked by address).

    PYTHONPATH=BUILD/python python3 bench/bench_python.py [--elements N] [--rounds R] [--json]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

import braid


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--elements", type=int, default=1024)
    p.add_argument("--iterations", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        g = braid.Graph()
        y = braid.ops.relu(g.input("x", (args.elements,))).rename("y")
        path = os.path.join(tmp, "relu.braid")
        braid.dump(path, [y])
        model = braid.Model(path)
    ctx = model.context()
    x = np.linspace(-1, 1, args.elements, dtype=np.float32)
    feeds = {"x": x}
    ctx.run(feeds)
    zero_copy = ctx.input_address("x") == x.ctypes.data

    py_us, cpp_us = [], []
    for _ in range(args.rounds):
        cpp_us.append(ctx._time_native(feeds, args.iterations) * 1e6)
        run = ctx.run
        t0 = time.perf_counter()
        for _ in range(args.iterations):
            run(feeds)
        py_us.append((time.perf_counter() - t0) / args.iterations * 1e6)
    py, cpp = statistics.median(py_us), statistics.median(cpp_us)
    result = {
        "cpu": cpu_model(),
        "python": sys.version.split()[0],
        "elements": args.elements,
        "iterations": args.iterations,
        "rounds": args.rounds,
        "python_us": round(py, 3),
        "cpp_us": round(cpp, 3),
        "overhead_us": round(py - cpp, 3),
        "input_zero_copy": zero_copy,
        "target_overhead_us": 3.0,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"CPU: {result['cpu']}, Python {result['python']}")
        print(f"one relu over {args.elements} float32, {args.rounds} rounds of {args.iterations} runs, medians")
        print(f"  C++ Context::run loop: {cpp:.3f} µs/run")
        print(f"  Python ctx.run loop:   {py:.3f} µs/run")
        print(f"  overhead: {py - cpp:.3f} µs/run (target: at most 3), input passed in place: {zero_copy}")
    return 0 if zero_copy else 1


if __name__ == "__main__":
    sys.exit(main())
