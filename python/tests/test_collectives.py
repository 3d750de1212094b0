"""braid.Group and the collectives among ranks that are Python threads."""
import threading

import numpy as np
import pytest

import braid
from braid import ops


def run_ranks(n, build, feed):
    """Builds rank r's graph with build(graph, group) -> outputs, runs each rank on its own
    thread with feed(r) and returns each rank's outputs (or raises the first rank's error)."""
    groups = braid.Group.threads(n)
    results, errors = [None] * n, [None] * n

    def rank(r):
        try:
            g = braid.Graph(comp_node=groups[r].comp_node)
            results[r] = g.compile(build(g, groups[r]))(**feed(r))
        except Exception as e:  # reported below, on the test's thread
            errors[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results


def test_collectives_combine_the_ranks_values():
    n = 3
    values = [np.arange(6, dtype=np.float32) * (r + 1) - r for r in range(n)]

    def build(g, group):
        x = g.input("x", (6,))
        return [ops.all_reduce(x, group), ops.all_reduce(x, group, op="max"),
                ops.all_reduce(x, group, op="min"), ops.all_gather(x, group),
                ops.reduce_scatter(x, group), ops.all_to_all(x, group)]

    results = run_ranks(n, build, lambda r: {"x": values[r]})
    total = sum(values)
    for r, (s, mx, mn, gathered, scattered, exchanged) in enumerate(results):
        np.testing.assert_array_equal(s, total)
        np.testing.assert_array_equal(mx, np.max(values, axis=0))
        np.testing.assert_array_equal(mn, np.min(values, axis=0))
        np.testing.assert_array_equal(gathered, np.concatenate(values))
        np.testing.assert_array_equal(scattered, total[2 * r:2 * r + 2])
        np.testing.assert_array_equal(exchanged,
                                      np.concatenate([v[2 * r:2 * r + 2] for v in values]))


def test_groups_describe_their_ranks():
    groups = braid.Group.threads(2, key="k")
    assert [(g.rank, g.size, g.backend, g.comp_node) for g in groups] == [
        (0, 2, "local", "cpu0"), (1, 2, "local", "cpu1")]
    with pytest.raises(braid.InvalidArgumentError, match="all_reduce: op"):
        ops.all_reduce(braid.Graph(comp_node="cpu0").input("x", (2,)), groups[0], op="mean")


def test_launch_outside_braid_launch_says_how_to_run(monkeypatch):
    monkeypatch.delenv("BRAID_RANK", raising=False)
    with pytest.raises(braid.InvalidArgumentError, match="braid-launch"):
        braid.Group.launch()


def test_a_rank_that_never_arrives_is_a_timeout(monkeypatch):
    monkeypatch.setenv("BRAID_COMM_TIMEOUT", "1")
    groups = braid.Group.threads(2)
    g = braid.Graph(comp_node=groups[0].comp_node)
    f = g.compile([ops.all_reduce(g.input("x", (2,)), groups[0])])
    with pytest.raises(braid.Error) as e:
        f(x=np.ones(2, np.float32))
    assert isinstance(e.value, TimeoutError), repr(e.value)
