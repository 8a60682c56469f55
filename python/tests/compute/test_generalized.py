"""Chunked datasets, GeneralizedReduction, KMeans and PCA against numpy references."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from computejobs import WeightedSum

import tomus
from tomus.compute import Dataset, GeneralizedReduction, tasklog
from tomus.compute.apps.kmeans import kmeans, reference_kmeans
from tomus.compute.apps.pca import pca, reference_pca
from tomus.compute.apps.synth import clustered_points


def test_dataset_index_records_objects_chunks_and_reads_back(tc: tomus.Client) -> None:
    data = np.arange(1003 * 3, dtype=np.float64).reshape(1003, 3)
    ds = Dataset.write(tc, data, objects=3, chunk_records=100)
    assert len(ds.objects) == 3
    assert ds.records == 1003 and ds.nbytes == data.nbytes
    assert all(c.records <= 100 for c in ds.chunks)
    assert [c.first for c in ds.chunks] == sorted(c.first for c in ds.chunks)
    doc = json.loads(tc.open_blob(ds.index).read())
    assert doc["format"] == "tomus.dataset/1" and doc["shape"] == [3]
    assert {"object", "blob", "offset", "size", "records"} <= set(doc["chunks"][0])
    again = Dataset.open(tc, ds.index)
    np.testing.assert_array_equal(again.read(tc), data)
    for c in again.chunks:
        np.testing.assert_array_equal(c.read(tc), data[c.first : c.first + c.records])
    assert all(c.hosts for c in again.chunks)


def test_tasks_alternate_between_objects(tc: tomus.Client) -> None:
    ds = Dataset.write(tc, np.zeros((60, 2), np.float32), objects=3, chunk_records=5)
    tasks = ds.tasks(chunks_per_task=2)
    assert len(tasks) == 6
    assert [t.object for t in tasks] == [0, 1, 2, 0, 1, 2]
    assert all(len({c.object for c in t.chunks}) == 1 for t in tasks)
    with pytest.raises(ValueError, match="not a dataset index"):
        blob = tc.create_blob()
        blob.write(0, b'{"format": "other"}')
        Dataset.open(tc, blob.id)


def test_tasks_take_small_objects_whole_and_cut_big_ones_evenly(tc: tomus.Client) -> None:
    # 8 objects of 2 chunks each, 5 chunks per task: two whole objects per task.
    ds = Dataset.write(tc, np.zeros((160, 2), np.float32), objects=8, chunk_records=10)
    tasks = ds.tasks(chunks_per_task=5)
    assert [sorted({c.object for c in t.chunks}) for t in tasks] == [
        [0, 1], [2, 3], [4, 5], [6, 7]
    ]  # fmt: skip
    assert sorted(c.first for t in tasks for c in t.chunks) == [c.first for c in ds.chunks]
    # One object of 10 chunks, 8 per task: 5 and 5, not 8 and 2.
    big = Dataset.write(tc, np.zeros((100, 2), np.float32), objects=1, chunk_records=10)
    assert [len(t.chunks) for t in big.tasks(chunks_per_task=8)] == [5, 5]
    with pytest.raises(ValueError, match="chunks_per_task must be at least 1"):
        big.tasks(chunks_per_task=0)


def test_task_sizes_learn_from_the_input_of_cached_tasks_too(tc: tomus.Client) -> None:
    """A pass whose tasks read nothing from tomus (their chunks were cached by the workers)
    still measures its throughput from the bytes the tasks took."""
    from tomus.compute import generalized
    from tomus.compute.engine import TaskRecord
    from tomus.compute.iterative import IterativeResult

    ds = Dataset.write(tc, np.zeros((4096, 8)), objects=2, chunk_records=256)  # 16 x 16 KiB
    tasks = ds.tasks(chunks_per_task=4)
    maps = [
        TaskRecord("map", f"m{i}", start=0.0, end=0.5, worker="w", host="h", bytes_read=0)
        for i in range(len(tasks))
    ]
    res = IterativeResult(None, len(tasks), len(tasks), 1, maps, job_id=0, covers=())
    generalized._learn("cached-pass", res, tasks)
    took = sum(c.size for t in tasks for c in t.chunks)
    assert generalized._throughput["cached-pass"] == pytest.approx(took / (0.5 * len(tasks)))


def _init() -> tuple[int, float]:
    return 0, 0.0


def _local(obj: tuple[int, float], chunk: np.ndarray) -> tuple[int, float]:
    return obj[0] + len(chunk), obj[1] + float(chunk.sum())


def _merge(a: tuple[int, float], b: tuple[int, float]) -> tuple[int, float]:
    return a[0] + b[0], a[1] + b[1]


def test_generalized_reduction_from_functions(dask: Any, addr: str, tc: tomus.Client) -> None:
    data = np.arange(5000, dtype=np.int64).reshape(1000, 5)
    ds = Dataset.write(tc, data, objects=2, chunk_records=64)
    red = GeneralizedReduction(_init, _local, _merge, ratio=3, chunks_per_task=3)
    res = red.run(ds, dask, addr)
    assert res.value == (1000, float(data.sum()))
    assert res.map_tasks == len(ds.tasks(3))
    # Every chunk read exactly once (plus the reduction itself, loaded once per worker).
    read = sum(t.bytes_read for t in res.timeline if t.kind == "map")
    smallest_chunk = min(c.size for c in ds.chunks)
    assert data.nbytes <= read < data.nbytes + smallest_chunk


@pytest.mark.parametrize("pad", [0, 200_000])
def test_a_pass_leaves_only_its_logs_and_result_whatever_the_reduction_size(
    dask: Any, addr: str, tc: tomus.Client, pad: int
) -> None:
    """A small reduction travels with its tasks, a big one (over INLINE_BYTES) is stored for
    the pass and deleted after it: either way the answer is right and the pass leaves its job
    log, its task records and its final result, nothing else."""
    data = np.arange(3000, dtype=np.float64).reshape(1000, 3)
    ds = Dataset.write(tc, data, objects=2, chunk_records=100)
    weights = np.array([1.0, -2.0, 0.5])
    before = {b.id for b in tc.list_blobs()}
    res = WeightedSum(weights, pad).run(ds, dask, addr)
    assert res.value == pytest.approx(float((data * weights).sum()), rel=1e-12)
    assert res.final is not None
    records = tc.namespace().stat(tasklog.path_of(res.job_id))["blob"]
    assert {b.id for b in tc.list_blobs()} - before == {res.job_id, records, res.final.ref.blob}


def test_kmeans_equals_numpy_reference(dask: Any, addr: str, tc: tomus.Client) -> None:
    points, _ = clustered_points(4000, 4, 5, seed=3, spread=2.0)
    ds = Dataset.write(tc, points, objects=2, chunk_records=500)
    start = points[:5].astype(np.float64)
    res = kmeans(ds, 5, 6, dask, addr, centers=start)
    ref_centers, ref_inertia, ref_iters = reference_kmeans(points, start, 6)
    assert res.iterations == ref_iters
    np.testing.assert_allclose(res.centers, ref_centers, rtol=1e-9, atol=1e-9)
    assert res.inertia == pytest.approx(ref_inertia, rel=1e-9)


def test_kmeans_stops_when_centers_settle(dask: Any, addr: str, tc: tomus.Client) -> None:
    points, truth = clustered_points(2000, 2, 3, seed=1, spread=0.5)
    ds = Dataset.write(tc, points, objects=2, chunk_records=400)
    res = kmeans(ds, 3, 50, dask, addr, seed=2, tol=1e-9)
    assert res.iterations < 50 and res.converged
    found = sorted(map(tuple, np.round(res.centers, 0)))
    assert found == sorted(map(tuple, np.round(truth, 0)))


def test_pca_equals_numpy_reference(dask: Any, addr: str, tc: tomus.Client) -> None:
    rng = np.random.default_rng(5)
    mixing = rng.normal(size=(6, 6)) * np.array([5, 3, 2, 1, 0.5, 0.1])[:, None]
    points = (rng.normal(size=(3000, 6)) @ mixing + 100.0).astype(np.float64)
    ds = Dataset.write(tc, points, objects=3, chunk_records=256)
    got = pca(ds, 3, dask, addr)
    ref = reference_pca(points, 3)
    np.testing.assert_allclose(got.mean, points.mean(0), rtol=1e-10)
    np.testing.assert_allclose(got.explained_variance, ref.explained_variance, rtol=1e-8)
    np.testing.assert_allclose(got.components, ref.components, atol=1e-8)
    assert got.job is not None and got.job.reduce_factor == got.job.map_tasks
    assert got.job.bytes_read >= ds.nbytes  # every chunk was read


def test_session_with_thread_workers_gives_the_same_kmeans(addr: str, tc: tomus.Client) -> None:
    """``session(processes=False)``: the LocalCluster's workers are threads of this process
    (in-process transport), and KMeans over them gives the one-process answer."""
    from tomus.compute.engine import session

    points, _ = clustered_points(6000, 3, 4, seed=5, spread=1.0)
    ds = Dataset.write(tc, points, objects=2, chunk_records=700)
    start = points[:4].astype(np.float64)
    with session(None, addr, workers=2, processes=False) as s:
        assert len(s.placement.workers) == 2
        assert all(w.startswith("inproc://") for w in s.placement.workers)
        # Dask's profiler is off on the cluster a session starts (engine.QUIET_DASK).
        profiling = s.dask.run(lambda dask_worker: "profile" in dask_worker.periodic_callbacks)
        assert profiling == dict.fromkeys(s.placement.workers, False)
        res = kmeans(ds, 4, 5, centers=start, session=s)
    ref_centers, ref_inertia, ref_iters = reference_kmeans(points, start, 5)
    assert res.iterations == ref_iters
    np.testing.assert_allclose(res.centers, ref_centers, rtol=1e-9, atol=1e-9)
    assert res.inertia == pytest.approx(ref_inertia, rel=1e-9)
    maps = [t for t in res.passes[0].timeline if t.kind == "map"]
    assert {t.worker for t in maps} <= set(s.placement.workers)


def test_kmeans_kernel_equals_brute_force_with_ties() -> None:
    """``assign``/``pass_stats`` against a plain distance matrix and argmin (independent of the
    blockwise kernel), with a duplicated center: ties go to the lower index."""
    from tomus.compute.apps.kmeans import assign, pass_stats

    rng = np.random.default_rng(11)
    x = rng.normal(size=(70_001, 3))  # more than two kernel blocks, the last one partial
    c = rng.normal(size=(6, 3))
    c[4] = c[1]  # every point nearest to 1 must say 1, never 4
    d2 = ((x[:, None, :] - c[None, :, :]) ** 2).sum(2)
    want = d2.argmin(1)
    labels, dist = assign(x, c)
    np.testing.assert_array_equal(labels, want)
    assert not (labels == 4).any() and (labels == 1).any()
    np.testing.assert_allclose(dist, d2.min(1), rtol=1e-9, atol=1e-9)
    sums, counts, inertia = pass_stats(x, c)
    np.testing.assert_array_equal(counts, np.bincount(want, minlength=6))
    for j in range(6):
        np.testing.assert_allclose(sums[j], x[want == j].sum(0), rtol=1e-9, atol=1e-9)
    assert inertia == pytest.approx(float(d2.min(1).sum()), rel=1e-9)
