"""PageRank: the distributed job equals a numpy power iteration, which itself equals PageRank
computed from the explicit transition matrix; the CLI prints the documented JSON."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import tomus
from tomus.compute.__main__ import main
from tomus.compute.apps.pagerank import (
    distinct_ids,
    index_of,
    pagerank,
    parse_edges,
    reference_pagerank,
    top_nodes,
)
from tomus.compute.engine import session
from tomus.compute.joblog import JobLog


def _graph(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A small graph with sparse, non-contiguous ids, repeated edges, self-loops, nodes with
    no out-edge (dangling) and a node that only points out."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10_000, size=300, replace=False) * 7 + 3
    src = ids[rng.integers(0, 250, size=2000)]  # the last 50 ids never point out: dangling
    dst = ids[rng.integers(0, 300, size=2000)]
    src = np.append(src, [ids[0], ids[0], 99_999_999])  # a repeat and a source-only node
    dst = np.append(dst, [ids[1], ids[1], ids[2]])
    return src, dst


def _text(src: np.ndarray, dst: np.ndarray) -> bytes:
    lines = [f"{s} {d}" for s, d in zip(src, dst, strict=True)]
    return ("# a comment line\n" + "\n".join(lines) + "\n").encode()


def _dense(src: np.ndarray, dst: np.ndarray, iterations: int, d: float) -> np.ndarray:
    """PageRank from the textbook matrix: G = d (P + dangling spread uniformly) + (1 - d)/N."""
    nodes = np.unique(np.concatenate([src, dst]))
    n = len(nodes)
    s, t = np.searchsorted(nodes, src), np.searchsorted(nodes, dst)
    m = np.zeros((n, n))
    np.add.at(m, (t, s), 1.0)
    out = m.sum(0)
    m[:, out > 0] /= out[out > 0]
    m[:, out == 0] = 1.0 / n
    rank = np.full(n, 1.0 / n)
    for _ in range(iterations):
        rank = d * (m @ rank) + (1 - d) / n
    return rank


def test_reference_equals_the_transition_matrix_definition() -> None:
    src, dst = _graph(1)
    nodes, rank = reference_pagerank(src, dst, 30, 0.85)
    assert len(nodes) == len(np.unique(np.concatenate([src, dst])))
    np.testing.assert_allclose(rank, _dense(src, dst, 30, 0.85), rtol=0, atol=1e-12)
    assert rank.sum() == pytest.approx(1.0, abs=1e-12)
    assert parse_edges(b"# c\n1 2\n3\t4\n")[1].tolist() == [2, 4]
    with pytest.raises(ValueError, match="two node ids"):
        parse_edges(b"1 2 3\n")


@pytest.mark.parametrize(
    "ids",
    [
        np.array([5, 3, 5, 9, 3, 4], dtype=np.int64),  # dense: a lookup table
        np.array([-7, 2, -7, 0], dtype=np.int64),  # negative ids, dense
        np.array([2**40, 3, 2**40, 17], dtype=np.int64),  # sparse: binary search
        np.array([], dtype=np.int64),
    ],
)
def test_distinct_ids_and_index_of_agree_with_unique(ids: np.ndarray) -> None:
    half = len(ids) // 2
    nodes = distinct_ids(ids[:half], ids[half:])
    want, inverse = np.unique(ids, return_inverse=True)
    assert nodes.tolist() == want.tolist()
    got = index_of(nodes, ids)
    assert got.dtype == np.int32
    assert got.tolist() == inverse.tolist()


@pytest.mark.parametrize("workers", ["processes", "threads"])
def test_pagerank_equals_numpy_power_iteration(
    dask: Any, addr: str, tc: tomus.Client, workers: str
) -> None:
    """Worker processes get each iteration's vectors through tomus; workers that are threads
    of this process by reference (held results). The answer and what stays are the same."""
    src, dst = _graph(2)
    text = _text(src, dst)
    half = text.index(b"\n", len(text) // 2) + 1
    blobs = []
    for part in (text[:half], text[half:]):
        b = tc.create_blob(chunk_size=4096)
        b.write(0, part)
        blobs.append(b.id)
    before = {b.id for b in tc.list_blobs()}
    if workers == "processes":
        res = pagerank(blobs, 25, 0.85, dask, addr, split_size=8192)  # several parse tasks
    else:
        with session(None, addr, workers=2, processes=False) as s:
            res = pagerank(blobs, 25, 0.85, session=s, split_size=8192)
    nodes, ref = reference_pagerank(src, dst, 25, 0.85)
    assert res.iterations == 25 and res.edges == len(src)
    np.testing.assert_array_equal(res.nodes, nodes)
    np.testing.assert_allclose(res.ranks, ref, rtol=0, atol=1e-9)
    assert [n for n, _ in res.top(5)] == [n for n, _ in top_nodes(nodes, ref, 5)]
    # What the run stored for its own passes (broadcasts, results, the ids) was deleted: what
    # stays are its 2 + 25 jobs' logs, each a log blob and a task-record file.
    left = {b.id for b in tc.list_blobs()} - before
    jobs = [e for e in tc.namespace().list(".compute/jobs") if e.get("blob") in left]
    logs = {int(e["name"].rsplit("/", 1)[-1].removesuffix(".jsonl")) for e in jobs}
    assert len(jobs) == 2 + 25
    assert left == {e["blob"] for e in jobs} | logs
    held = {r.get("held", False) for j in logs for r in JobLog(tc, j).records() if "ref" in r}
    assert held == {workers == "threads"}


def _forget_edges() -> int:
    """Runs on a Dask worker: drops the edge arrays its process keeps."""
    import sys

    module = sys.modules["tomus.compute.apps.pagerank"]
    forgotten: int = module._derived.clear()
    return forgotten


def test_tasks_without_kept_edges_derive_them_from_the_text(
    dask: Any, addr: str, tc: tomus.Client
) -> None:
    """Every time a task ends, the workers forget the edges they derived: each later task
    (an index task moved off its parse worker, an iteration after its worker restarted) parses
    and indexes its splits again, and the answer is the same."""
    src, dst = _graph(3)
    b = tc.create_blob(chunk_size=4096)
    b.write(0, _text(src, dst))
    forgotten: list[int] = []

    def forget(_: object) -> None:
        forgotten.extend(dask.run(_forget_edges).values())

    res = pagerank([b.id], 6, 0.85, dask, addr, split_size=8192, on_task=forget)
    nodes, ref = reference_pagerank(src, dst, 6, 0.85)
    np.testing.assert_array_equal(res.nodes, nodes)
    np.testing.assert_allclose(res.ranks, ref, rtol=0, atol=1e-9)
    assert sum(forgotten) > 0  # the workers did hold edges, and lost them


def test_cli_prints_iterations_and_top(
    dask: Any, addr: str, tc: tomus.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = _graph(3)
    b = tc.create_blob(chunk_size=4096)
    b.write(0, _text(src, dst))
    argv = ["pagerank", f"blob:{b.id}", "--addr", addr, "--scheduler", dask.scheduler.address]
    assert main([*argv, "--iterations", "12", "--damping", "0.9", "--top", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    nodes, ref = reference_pagerank(src, dst, 12, 0.9)
    assert out["iterations"] == 12
    assert [n for n, _ in out["top"]] == [n for n, _ in top_nodes(nodes, ref, 4)]
    np.testing.assert_allclose([r for _, r in out["top"]], [r for _, r in top_nodes(nodes, ref, 4)],
                               rtol=0, atol=1e-9)  # fmt: skip
