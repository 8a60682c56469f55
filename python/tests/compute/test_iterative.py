"""IterativeReduce on a real tomus cluster and a real Dask LocalCluster."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from computehelpers import Killer, attempts
from computejobs import FailOnce, Slow, SlowConcat, concat, listed, padded
from hypothesis import given, settings
from hypothesis import strategies as st

import tomus
from tomus.compute import IterativeReduce, create_job, reduce_tasks_needed, tasklog
from tomus.compute.joblog import INLINE_BYTES, JobLog


def test_paper_example_five_maps_ratio_three(dask: Any, addr: str) -> None:
    res = IterativeReduce(listed, concat, ratio=3).run(range(5), client=dask, addr=addr)
    assert res.value == [0, 1, 2, 3, 4]
    assert res.reduce_factor == 5
    assert res.map_tasks == 5
    assert res.reduce_tasks == 2
    assert [f for _, _, f in res.tree] == [3, 5]
    assert res.covers == (0, 1, 2, 3, 4)
    kinds = sorted(t.kind for t in res.timeline)
    assert kinds == ["map"] * 5 + ["reduce"] * 2
    # The last merge, of small results, runs on the driver; every other task on a worker.
    final = [t for t in res.timeline if t.factor == 5 and t.kind == "reduce"]
    assert [t.worker for t in final] == ["local"]
    assert all(t.worker.startswith("tcp://") for t in res.timeline if t not in final)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 23), ratio=st.integers(2, 6), data=st.data())
def test_any_count_and_ratio_ends_in_one_result_covering_each_map_once(
    dask_client: Any, addr: str, n: int, ratio: int, data: st.DataObject
) -> None:
    delays = data.draw(st.lists(st.sampled_from([0.0, 0.01, 0.03]), min_size=n, max_size=n))
    res = IterativeReduce(Slow(delays), concat, ratio=ratio).run(
        range(n), client=dask_client, addr=addr
    )
    assert res.value == list(range(n))  # the data: every map output exactly once
    assert res.covers == tuple(range(n))  # the bookkeeping agrees
    assert res.reduce_factor == n
    assert res.reduce_tasks == reduce_tasks_needed(n, ratio)
    consumed = [i for _, inputs, _ in res.tree for i in inputs]
    assert len(consumed) == len(set(consumed))  # no result was reduced twice
    assert all(len(inputs) <= ratio for _, inputs, _ in res.tree)


def test_no_barrier_first_reduce_starts_before_last_map_ends(dask: Any, addr: str) -> None:
    delays = [0.05, 0.05, 0.05, 0.05, 2.0, 0.05]
    res = IterativeReduce(Slow(delays), concat, ratio=2).run(range(6), client=dask, addr=addr)
    assert res.value == list(range(6))
    maps = [t for t in res.timeline if t.kind == "map"]
    reduces = [t for t in res.timeline if t.kind == "reduce"]
    first_reduce = min(t.start for t in reduces)
    last_map_end = max(t.end for t in maps)
    assert first_reduce < last_map_end - 1.0, (first_reduce, last_map_end)


def test_classic_shape_has_one_aggregator_after_every_map(dask: Any, addr: str) -> None:
    res = IterativeReduce(Slow([0.01, 0.2, 0.05, 0.0]), concat, ratio=2).run(
        range(4), client=dask, addr=addr, shape="classic"
    )
    assert res.value == [0, 1, 2, 3]
    assert res.reduce_tasks == 1
    (agg,) = [t for t in res.timeline if t.kind == "reduce"]
    assert agg.start >= max(t.end for t in res.timeline if t.kind == "map")
    assert agg.factor == 4


def test_finalize_runs_on_the_final_value(dask: Any, addr: str) -> None:
    res = IterativeReduce(listed, concat, ratio=4, finalize=sum).run(
        range(10), client=dask, addr=addr
    )
    assert res.value == 45


def test_mapper_error_is_raised(dask: Any, addr: str) -> None:
    def boom(i: int) -> int:
        raise ValueError(f"bad input {i}")

    with pytest.raises(ValueError, match="bad input"):
        IterativeReduce(boom, sum, ratio=2, retries=0).run(range(3), client=dask, addr=addr)


def test_intermediate_results_live_in_tomus_and_the_log_names_them(
    dask: Any, addr: str, tc: tomus.Client
) -> None:
    res = IterativeReduce(padded, concat, ratio=2).run(range(4), client=dask, addr=addr)
    assert [i for i, _ in res.value] == [0, 1, 2, 3]
    state = JobLog(tc, res.job_id).replay()
    assert state.header is not None and state.header["maps"] == 4
    assert len(state.accepted) == 4 + 3  # every map and reduce output was logged
    (final,) = state.available.values()
    assert final.factor == 4
    blob = tc.open_blob(final.ref.blob)
    assert blob.size(version=final.ref.version) == final.ref.size > INLINE_BYTES
    # What a logged reduce consumed is deleted: only the final result stays stored.
    consumed = [r for r in state.accepted.values() if r.id != final.id]
    assert len(consumed) == 6
    for r in consumed:
        assert r.inline is None and r.ref.size > INLINE_BYTES
        with pytest.raises(tomus.errors.NotFound):
            tc.open_blob(r.ref.blob).size(version=r.ref.version)
    # Big results of worker processes meet on a worker, never on the driver.
    assert all(t.worker.startswith("tcp://") for t in res.timeline)


def test_with_thread_workers_the_driver_merges_big_results_last(
    addr: str, tc: tomus.Client
) -> None:
    """Workers that are threads of the driver's process: the driver runs the last merge of
    big results itself, stores and logs it as any reduce, and answers its value."""
    from tomus.compute.engine import session

    with session(None, addr, workers=2, processes=False) as s:
        res = IterativeReduce(padded, concat, ratio=2).run_in(s, range(4))
    assert res.value == [(i, bytes(70_000)) for i in range(4)]
    assert res.reduce_tasks == 3
    last = [t for t in res.timeline if t.kind == "reduce" and t.factor == 4]
    assert [t.worker for t in last] == ["local"]
    assert all(t.worker.startswith("inproc://") for t in res.timeline if t not in last)
    (final,) = JobLog(tc, res.job_id).replay().available.values()
    assert final.factor == 4 and final.inline is None and final.ref.size > INLINE_BYTES
    assert final.load(tc) == res.value  # stored, as the sites' meta-reducer reads it


def test_small_results_travel_inline_and_only_the_final_one_is_stored(
    dask: Any, addr: str, tc: tomus.Client
) -> None:
    before = {b.id for b in tc.list_blobs()}
    res = IterativeReduce(listed, concat, ratio=2).run(range(4), client=dask, addr=addr)
    assert res.value == [0, 1, 2, 3]
    state = JobLog(tc, res.job_id).replay()
    (final,) = state.available.values()
    assert final.inline is None and final.ref.size > 0  # the answer is stored, however small
    others = [r for r in state.accepted.values() if r.id != final.id]
    assert len(others) == 6
    assert all(r.inline is not None and r.ref.size == 0 for r in others)
    assert sorted(x for r in others if r.id.startswith("m") for x in r.load(tc)) == [0, 1, 2, 3]
    # No blob was made for them: the job's log, its task records and the final result only.
    records = tc.namespace().stat(tasklog.path_of(res.job_id))["blob"]
    assert {b.id for b in tc.list_blobs()} - before == {res.job_id, records, final.ref.blob}


def test_held_results_stay_in_memory_store_nothing_and_are_not_resumed(
    dask: Any, addr: str, tc: tomus.Client
) -> None:
    """``durable=False``: results of any size come to the driver in the tasks' answers and
    are merged there; no blob is made for them, not even for the final one; the log records
    that each task ran, and a run given that log computes everything again."""
    before = {b.id for b in tc.list_blobs()}
    job = IterativeReduce(padded, concat, ratio=2, durable=False)
    res = job.run(range(5), client=dask, addr=addr)
    want = [(i, bytes(70_000)) for i in range(5)]
    assert res.value == want
    assert (res.map_tasks, res.reduce_tasks) == (5, 4)
    assert all(t.worker.startswith("tcp://") for t in res.timeline if t.kind == "map")
    assert [t.worker for t in res.timeline if t.kind == "reduce"] == ["local"] * 4
    assert res.final is not None and not res.final.stored and res.final.ref.size == 0
    records = tc.namespace().stat(tasklog.path_of(res.job_id))["blob"]
    assert {b.id for b in tc.list_blobs()} - before == {res.job_id, records}
    logged = [r for r in JobLog(tc, res.job_id).records() if r["type"] != "job"]
    assert len(logged) == 5 + 4 and all(r["held"] for r in logged)
    state = JobLog(tc, res.job_id).replay()
    assert (state.accepted, state.covered, state.next_reduce) == ({}, set(), 4)
    again = job.run(range(5), client=dask, addr=addr, job_id=res.job_id)
    assert again.value == want
    assert (again.resumed, again.map_tasks) == (0, 5)
    assert {t.task for t in again.timeline if t.kind == "reduce"} == {"r4", "r5", "r6", "r7"}


def test_failed_reducer_is_retried_from_its_stored_inputs(
    dask: Any, addr: str, tmp_path: Path
) -> None:
    res = IterativeReduce(listed, FailOnce(str(tmp_path)), ratio=3, retries=1).run(
        range(7), client=dask, addr=addr
    )
    assert res.value == list(range(7))
    assert len(list(tmp_path.glob("failed-*"))) == res.reduce_tasks == 3


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["map", "held map", "reduce"])
def test_killing_a_worker_mid_job_still_gives_the_right_answer(
    dask_to_kill: Any, addr: str, tmp_path: Path, victim: str
) -> None:
    n = 10
    if victim.endswith("map"):
        # Held or stored, a map killed mid-run ran to no result: it runs again from its input.
        durable = victim == "map"
        job = IterativeReduce(Slow([0.4] * n, str(tmp_path)), concat, ratio=3, durable=durable)
        prefix = "map-4-"
    else:
        job = IterativeReduce(Slow([0.05] * n), SlowConcat(0.5, str(tmp_path)), ratio=3)
        prefix = "reduce-"
    killer = Killer(dask_to_kill, tmp_path, prefix)
    killer.start()
    res = job.run(range(n), client=dask_to_kill, addr=addr)
    killer.join()
    assert killer.killed is not None, "no worker was killed: the test did not exercise a fault"
    task, pid = killer.killed
    assert res.value == list(range(n))
    assert res.reduce_factor == n
    # The killed task ran again in another process (Dask's retry), from what is in tomus: its
    # input, or the stored results it merges.
    assert attempts(tmp_path, task) - {pid}, f"{task} was not retried"


@pytest.mark.slow
def test_restarted_driver_resumes_from_stored_results(
    dask: Any, addr: str, tc: tomus.Client
) -> None:
    n, delay = 12, 0.25
    job_id = create_job(tc)
    here = str(Path(__file__).parent)
    script = (
        f"import sys; sys.path.insert(0, {here!r}); import computejobs; "
        f"computejobs.resume_driver({dask.scheduler.address!r}, {addr!r}, {job_id}, {n}, {delay})"
    )
    driver = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    log = JobLog(tc, job_id)
    deadline = time.monotonic() + 60
    try:
        while sum(1 for r in log.records() if r["type"] != "job") < 5:
            assert driver.poll() is None, "the first driver ended before it could be killed"
            assert time.monotonic() < deadline, "the first driver made no progress"
            time.sleep(0.02)
    finally:
        driver.kill()  # the driver dies without any chance to clean up
        driver.wait()
    # A log append the driver completed just before dying is still published (within
    # milliseconds); one it had not completed never is. Read the log after that settles.
    time.sleep(0.5)
    before = log.replay()
    assert 0 < len(before.covered) < n
    res = IterativeReduce(Slow([delay] * n), concat, ratio=3).run(
        range(n), client=dask, addr=addr, job_id=job_id
    )
    assert res.value == list(range(n))
    assert res.reduce_factor == n
    assert res.resumed == len(before.available) > 0
    assert res.map_tasks == n - len(before.covered)  # only the maps no stored result covers
    assert res.map_tasks < n


def test_a_failed_last_merge_on_the_driver_resumes_from_the_logged_maps(
    dask: Any, addr: str, tc: tomus.Client, tmp_path: Path
) -> None:
    """The last merge of small results runs on the driver; when it fails, the maps' records
    are in the log, and a new run of the job starts with that merge, on the driver."""
    job_id = create_job(tc)
    job = IterativeReduce(listed, FailOnce(str(tmp_path)), ratio=4, retries=0)
    with pytest.raises(RuntimeError, match="injected"):
        job.run(range(4), client=dask, addr=addr, job_id=job_id)
    res = job.run(range(4), client=dask, addr=addr, job_id=job_id)
    assert res.value == [0, 1, 2, 3]
    assert (res.resumed, res.map_tasks, res.reduce_tasks) == (4, 0, 1)
    assert [t.worker for t in res.timeline] == ["local"]


def test_resume_refuses_other_inputs(dask: Any, addr: str) -> None:
    res = IterativeReduce(listed, concat, ratio=2).run(range(3), client=dask, addr=addr)
    with pytest.raises(ValueError, match="different inputs"):
        IterativeReduce(listed, concat, ratio=2).run(
            range(4), client=dask, addr=addr, job_id=res.job_id
        )
    again = IterativeReduce(listed, concat, ratio=2).run(
        range(3), client=dask, addr=addr, job_id=res.job_id
    )
    assert again.value == [0, 1, 2] and again.map_tasks == 0 and again.reduce_tasks == 0


def test_default_engine_is_a_local_cluster_made_for_the_job(addr: str) -> None:
    res = IterativeReduce(listed, concat, ratio=2).run(range(3), addr=addr, workers=2)
    assert res.value == [0, 1, 2]
    assert len({t.worker for t in res.timeline}) >= 1
