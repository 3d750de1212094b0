"""Data-parallel training: each rank takes its share of every batch, the ranks all-reduce their
gradients (mean) and apply the same SGD step, and the parameters end equal to one device's
trained on the whole batches.

    PYTHONPATH=build/python python3 examples/python/data_parallel.py [--ranks 2]   # threads
    mpirun -np 2 env PYTHONPATH=build/python python3 examples/python/data_parallel.py --mpi
    PYTHONPATH=build/python build/tools/braid-launch -n 2 -- \
        python3 examples/python/data_parallel.py --launch                              # gloo

Exits 1 unless every rank's parameters after --steps steps are within 1e-5 (relative to their
largest magnitude) of the single-device run's.
"""
import argparse
import sys
import threading

import numpy as np

import braid
from braid import ops
from mlp_task import batches, build, initial_params


def train(group, steps, batch, sgd):
    """This rank's parameters after `steps` data-parallel steps."""
    share = batch // group.size
    g = braid.Graph(comp_node=group.comp_node)
    params, loss = build(g, initial_params(), share)
    grads = [ops.all_reduce(d, group) * (1.0 / group.size) for d in braid.grad(loss, params)]
    mean_loss = ops.all_reduce(loss, group) * (1.0 / group.size)
    step = g.compile([mean_loss] + braid.apply_gradients(params, grads, sgd, after=[loss]))
    lo = group.rank * share
    for x, labels in batches(steps, batch):
        step(x=x[lo:lo + share], labels=labels[lo:lo + share])
    return {p.name: p.numpy() for p in params}


def train_one_device(steps, batch, sgd):
    g = braid.Graph()
    params, loss = build(g, initial_params(), batch)
    step = g.compile([loss] + braid.minimize(loss, params, sgd))
    for x, labels in batches(steps, batch):
        step(x=x, labels=labels)
    return {p.name: p.numpy() for p in params}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mpi", action="store_true", help="one rank per process, under mpirun")
    p.add_argument("--launch", action="store_true",
                   help="one rank per process, under braid-launch (gloo)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=120)
    args = p.parse_args()
    sgd = braid.SGD(lr=0.1, momentum=0.9)

    if args.mpi:
        groups = [braid.Group.mpi(key="dp")]
    elif args.launch:
        groups = [braid.Group.launch(key="dp")]
    else:
        groups = braid.Group.threads(args.ranks, key="dp")
    if args.batch % groups[0].size:
        sys.exit(f"the batch of {args.batch} rows does not split over {groups[0].size} ranks")
    results, errors = {}, []

    def rank(group):
        try:
            results[group.rank] = train(group, args.steps, args.batch, sgd)
        except braid.Error as e:
            errors.append(f"rank {group.rank}: {e}")

    threads = [threading.Thread(target=rank, args=(gr,)) for gr in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("\n".join(errors))

    want = train_one_device(args.steps, args.batch, sgd)
    worst = 0.0
    for r, got in results.items():
        for name, value in got.items():
            scale = max(float(np.abs(want[name]).max()), 1e-30)
            worst = max(worst, float(np.abs(value - want[name]).max()) / scale)
    ok = worst <= 1e-5
    print(f"{groups[0].size} ranks ({groups[0].backend}), {args.steps} steps, batch {args.batch}: "
          f"largest difference from one device {worst:.3g} (relative) -> {'ok' if ok else 'TOO LARGE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
