"""Objects compute tasks keep in tomus: the per-process cache and deletion."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tomus
from tomus.compute.engine import TaskContext, attach
from tomus.compute.storage import cached, delete_objects, put_object


def test_threads_wanting_one_object_together_read_it_once(tc: tomus.Client, addr: str) -> None:
    data = np.arange(1 << 20, dtype=np.int64)  # 8 MiB: long enough a read for all to wait
    ref = put_object(tc, data)
    ctx = TaskContext(addr, tc)
    start = threading.Barrier(8)
    got: list[np.ndarray] = []

    def want() -> None:
        attach(ctx)  # count this thread's reads against ctx
        start.wait()
        got.append(cached(tc, ref))

    threads = [threading.Thread(target=want) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(g is got[0] for g in got)
    np.testing.assert_array_equal(got[0], data)
    assert ctx.bytes_read == ref.size  # one read, not one per thread


def test_a_deleted_object_is_not_found_every_time_it_is_wanted(tc: tomus.Client) -> None:
    ref = put_object(tc, {"a": 1})
    delete_objects(tc, [ref, ref])  # deleting twice is not an error
    for _ in range(2):  # a failed read leaves nothing behind that would block the next
        with pytest.raises(tomus.errors.NotFound):
            cached(tc, ref)
