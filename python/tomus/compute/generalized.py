"""GeneralizedReduction: MATE's reduction-object API over chunked datasets.

Instead of emitting (key, value) pairs that are then sorted, grouped and shuffled, a task folds
each chunk straight into a *reduction object* (``local``), and the objects of all tasks are
combined with ``merge``: no intermediate pairs, no shuffle. Here:

- tasks are MATE's jobs: consecutive chunks of one data object, ordered round-robin over the
  objects so concurrent tasks read different objects (``Dataset.tasks``), and placed by Dask
  next to their chunks; within a task the next chunk is fetched while the current one is
  processed;
- the global merge is an IterativeReduce tree (``ratio`` objects per merge task), so merging
  starts while chunks are still being processed and its results are stored in tomus;
- the reduction itself (an instance of a subclass, or of this class built from functions) is
  stored in tomus once per pass and loaded once per worker: that is how an iterative algorithm
  broadcasts the previous pass's result (KMeans' centers) to every task.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import cloudpickle
import numpy as np

from tomus.compute.dataset import Dataset, Task
from tomus.compute.engine import Session, TaskRecord, attach, current, use_session
from tomus.compute.iterative import IterativeReduce, IterativeResult
from tomus.compute.storage import Ref, cached, put_bytes

if TYPE_CHECKING:
    from distributed import Client as DaskClient

__all__ = ["GeneralizedReduction", "iterate"]


class GeneralizedReduction:
    """Subclass and define ``init``, ``local``, ``merge`` (and optionally ``finalize``), or pass
    them as functions. ``local(obj, chunk)`` gets a numpy array of the chunk's records and must
    not depend on the order chunks come in; ``merge(a, b)`` combines two objects."""

    ratio: int = 4
    chunks_per_task: int = 1

    def __init__(
        self,
        init: Callable[[], Any] | None = None,
        local: Callable[[Any, Any], Any] | None = None,
        merge: Callable[[Any, Any], Any] | None = None,
        finalize: Callable[[Any], Any] | None = None,
        *,
        ratio: int | None = None,
        chunks_per_task: int | None = None,
    ) -> None:
        self._init, self._local, self._merge, self._finalize = init, local, merge, finalize
        if ratio is not None:
            self.ratio = ratio
        if chunks_per_task is not None:
            self.chunks_per_task = chunks_per_task

    def init(self) -> Any:
        if self._init is None:
            raise NotImplementedError("define init() or pass init=")
        return self._init()

    def local(self, obj: Any, chunk: Any) -> Any:
        if self._local is None:
            raise NotImplementedError("define local() or pass local=")
        return self._local(obj, chunk)

    def merge(self, a: Any, b: Any) -> Any:
        if self._merge is None:
            raise NotImplementedError("define merge() or pass merge=")
        return self._merge(a, b)

    def finalize(self, obj: Any) -> Any:
        return obj if self._finalize is None else self._finalize(obj)

    def run(
        self,
        dataset: Dataset,
        client: DaskClient | None = None,
        addr: str | None = None,
        *,
        session: Session | None = None,
        on_task: Callable[[TaskRecord], None] | None = None,
        job_id: int | None = None,
    ) -> IterativeResult:
        """One pass over ``dataset``; ``.value`` is ``finalize(merge of every local object)``."""
        with use_session(session, client, addr) as s:
            spec = put_bytes(s.tomus, cloudpickle.dumps(self))
            job = IterativeReduce(
                _Local(spec), _Merge(spec), ratio=self.ratio, finalize=self.finalize
            )
            tasks = dataset.tasks(self.chunks_per_task)
            return job.run_in(s, tasks, on_task=on_task, job_id=job_id)


# --- task bodies: the reduction is loaded from tomus once per worker and pass -------------------


class _Local:
    def __init__(self, spec: Ref) -> None:
        self.spec = spec

    def __call__(self, task: Task) -> Any:
        ctx = current()
        red: GeneralizedReduction = cached(ctx.client, self.spec)
        obj = red.init()
        chunks = task.chunks

        def fetch(i: int) -> np.ndarray:
            attach(ctx)
            return chunks[i].read(ctx.client)

        with ThreadPoolExecutor(1) as reader:  # fetch chunk i + 1 while chunk i is reduced
            nxt = reader.submit(fetch, 0)
            for i in range(len(chunks)):
                data = nxt.result()
                if i + 1 < len(chunks):
                    nxt = reader.submit(fetch, i + 1)
                obj = red.local(obj, data)
        return obj


class _Merge:
    def __init__(self, spec: Ref) -> None:
        self.spec = spec

    def __call__(self, objs: list[Any]) -> Any:
        red: GeneralizedReduction = cached(current().client, self.spec)
        return functools.reduce(red.merge, objs)


def iterate(
    first: GeneralizedReduction,
    step: Callable[[Any, int], GeneralizedReduction | None],
    dataset: Dataset,
    passes: int,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    session: Session | None = None,
    on_pass: Callable[[int, IterativeResult], None] | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> list[IterativeResult]:
    """Runs ``first``, then ``step(previous value, pass number)`` for the next pass, up to
    ``passes`` passes or until ``step`` returns None; every pass uses the same Dask and tomus
    session. Returns the result of every pass."""
    results: list[IterativeResult] = []
    with use_session(session, client, addr) as s:
        red: GeneralizedReduction | None = first
        for i in range(passes):
            if red is None:
                break
            res = red.run(dataset, session=s, on_task=on_task)
            results.append(res)
            if on_pass is not None:
                on_pass(i, res)
            red = step(res.value, i + 1) if i + 1 < passes else None
    return results
