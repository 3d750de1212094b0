"""Trains a 2-layer MLP on a synthetic classification task and prints the loss.

    PYTHONPATH=build/python python3 examples/python/train_mlp.py [--steps N]

Forward, backward and the SGD update run as one compiled braid.Function per step; the
parameters are updated in place. Exits 1 unless the mean loss of the last 25 steps is below 0.2.
"""
import argparse
import sys

import numpy as np

import braid
from mlp_task import batches, build, initial_params


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()

    g = braid.Graph()
    params, loss = build(g, initial_params(), args.batch)
    step = g.compile([loss] + braid.minimize(loss, params, braid.SGD(lr=0.2, momentum=0.9)))
    losses = []
    for s, (x, labels) in enumerate(batches(args.steps, args.batch)):
        losses.append(float(step(x=x, labels=labels)[0]))
        if s % 50 == 0 or s == args.steps - 1:
            print(f"step {s:4d}  loss {losses[-1]:.4f}")
    recent = float(np.mean(losses[-25:]))
    print(f"mean loss of the last 25 steps {recent:.4f} ({'below' if recent < 0.2 else 'NOT below'} 0.2)")
    return 0 if recent < 0.2 else 1


if __name__ == "__main__":
    sys.exit(main())
