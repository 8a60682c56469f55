"""PageRank as iterated generalized reduction (MATE's third application) over an edge list.

Input: text blobs or namespace files of lines ``src dst`` (integer node ids, any whitespace,
``#`` comment lines allowed). The standard definition: N is the number of distinct node ids in
the edge list, ranks start at 1/N, every iteration gives each node
``(1 - d) / N + d * (sum over in-edges u->v of rank[u] / outdeg[u] + dangling / N)`` where
``dangling`` is the rank held by nodes without out-edges, and a fixed number of iterations runs.
A repeated edge counts as many times as it appears.

Three kinds of pass, each an IterativeReduce job whose reduction objects are merged in a tree:

1. *parse*: each task parses one text split into edge arrays and returns the split's distinct
   node ids; the merge unions them;
2. *index*: with the sorted ids broadcast, each task maps its split's edges to dense indexes
   and returns its out-degree vector; the merge adds them;
3. *iterate* (``iterations`` times): each iteration's rank vector is broadcast to its tasks;
   one task per worker folds the edges it indexed into a vector of incoming contributions
   (one ``bincount`` per split), the merge adds the vectors, and the driver applies the
   damping and the dangling mass.

The edge arrays are never stored: they are derived from the edge-list text, which is, and a
worker keeps what it derived in memory (bounded by ``EDGE_CACHE_BYTES``). Each index task asks
for the worker that parsed its split, each iteration task for the worker that indexed its
splits; a task that runs elsewhere (Dask moved it, or its worker died) derives the edges again
from the text. Storing the arrays instead (160 MB parsed, 80 MB dense at 10 M edges) cost
about 0.35 s of a 3.5 s run.

When the workers are threads of the driver's process (``session(processes=False)``), the
passes keep their results in memory (``IterativeReduce(durable=False)``) and each iteration's
tasks get the rank vector itself: each result is needed by the next pass only, and a task lost
with its worker is computed again from the stored edge list. Storing an iteration's vectors in
tomus and reading them back (the broadcast, each task's vector and their sum: 8 MB each at 10 M
edges) took about a quarter of the iteration. Worker processes would get those vectors pickled
through Dask instead, which ran slower than storing them: there, the broadcast is stored once
per iteration and read once per worker, and the results are stored. Whatever a pass stored for
the next is deleted when that pass ends, the sorted ids when the run ends; the passes' job logs
stay.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import tomus
from tomus.compute.engine import Session, TaskRecord, tomus_client, use_session
from tomus.compute.iterative import IterativeReduce, IterativeResult
from tomus.compute.memcache import MemoryCache
from tomus.compute.splits import Input, Split, plan_splits, read_text
from tomus.compute.storage import Ref, cached, delete_objects, put_object

if TYPE_CHECKING:
    from distributed import Client as DaskClient

__all__ = [
    "PageRankResult",
    "distinct_ids",
    "edge_pairs",
    "index_of",
    "pagerank",
    "parse_edges",
    "reference_pagerank",
    "top_nodes",
]

#: Bytes of edge-list text one parse task takes by default.
SPLIT_BYTES = 32 << 20


@dataclass
class PageRankResult:
    nodes: np.ndarray  # the distinct node ids, sorted
    ranks: np.ndarray  # rank of nodes[i]
    iterations: int
    edges: int

    def top(self, k: int) -> list[tuple[int, float]]:
        return top_nodes(self.nodes, self.ranks, k)


def top_nodes(nodes: np.ndarray, ranks: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k highest ranks, ties broken by the smaller node id."""
    order = np.lexsort((nodes, -ranks))[:k]
    return [(int(nodes[i]), float(ranks[i])) for i in order]


def parse_edges(text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) int64 arrays of the ``src dst`` lines of ``text``."""
    if b"#" in text:
        text = b"\n".join(ln for ln in text.split(b"\n") if not ln.lstrip().startswith(b"#"))
    with warnings.catch_warnings():
        # Text mode ``fromstring`` parses in C, ~6x faster than int() over split(); it warns
        # (and stops) where it meets something that is not a number.
        warnings.simplefilter("error", DeprecationWarning)
        try:
            flat = np.fromstring(text, dtype=np.int64, sep=" ")
        except (DeprecationWarning, ValueError) as e:
            raise ValueError(f"an edge line is not two integer node ids: {e}") from None
    if len(flat) % 2:
        raise ValueError("an edge line does not have two node ids")
    pairs = flat.reshape(-1, 2)
    return np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])


def distinct_ids(*arrays: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``arrays``. ``np.unique`` is not used: in numpy 2.4 it
    hashes, and took 9.4 s for 20 M int64 ids on this machine where a sort and a mask take
    0.3 s."""
    ids = np.sort(np.concatenate(arrays) if len(arrays) != 1 else arrays[0])
    if len(ids) == 0:
        return ids
    keep = np.empty(len(ids), dtype=bool)
    keep[0] = True
    np.not_equal(ids[1:], ids[:-1], out=keep[1:])
    return ids[keep]


#: A dense lookup table is used when the ids span at most this many times their count.
DENSE_SPAN = 8


def index_of(nodes: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The position in ``nodes`` (sorted distinct ids, all of ``ids`` among them) of each id,
    as int32 while it fits. Ids that span a range not much wider than their count go through a
    lookup table (one gather per id: 20 M ids in under 0.25 s here, where ``searchsorted`` of
    unsorted ids took 7 s, a cache miss per step of each binary search); others are
    binary-searched."""
    dtype = np.int32 if len(nodes) < 2**31 else np.int64
    if len(nodes) == 0:
        return np.empty(0, dtype=dtype)
    lo, hi = int(nodes[0]), int(nodes[-1])
    if hi - lo < DENSE_SPAN * len(nodes) + (1 << 16):
        table = np.empty(hi - lo + 1, dtype=dtype)
        table[nodes - lo] = np.arange(len(nodes), dtype=dtype)
        out: np.ndarray = table[ids - lo]
        return out
    return np.searchsorted(nodes, ids).astype(dtype, copy=False)


def edge_pairs(nodes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The edges ``src[i] -> dst[i]`` as rows of dense indexes into ``nodes``."""
    pairs = np.empty((len(src), 2), dtype=np.int32 if len(nodes) < 2**31 else np.int64)
    pairs[:, 0] = index_of(nodes, src)
    pairs[:, 1] = index_of(nodes, dst)
    return pairs


# --- the edges, derived on workers and kept there --------------------------------------------

#: Bytes of edge arrays a worker process keeps (parsed until indexed, dense between iterations).
EDGE_CACHE_BYTES = 1 << 30
_derived: MemoryCache[tuple[np.ndarray, ...]] = MemoryCache(EDGE_CACHE_BYTES)


def _keep(key: tuple[object, ...], arrays: tuple[np.ndarray, ...]) -> None:
    _derived.put(key, arrays, sum(a.nbytes for a in arrays))


def _parsed_edges(client: tomus.Client, split: Split) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of ``split``: kept by its parse task if it ran in this process (and handed
    over once: the dense edges replace them), else parsed again from the text."""
    kept = _derived.get(("parsed", client.addr, split), take=True)
    if kept is not None:
        return kept[0], kept[1]
    return parse_edges(read_text(client, split))


def _dense_edges(client: tomus.Client, split: Split, nodes_ref: Ref) -> np.ndarray:
    """The edges of ``split`` as rows of dense indexes into the ids ``nodes_ref``."""
    key = ("dense", client.addr, split, nodes_ref)
    kept = _derived.get(key)
    if kept is not None:
        return kept[0]
    nodes: np.ndarray = cached(client, nodes_ref)
    pairs = edge_pairs(nodes, *_parsed_edges(client, split))
    _keep(key, (pairs,))
    return pairs


# --- pass 1: parse ------------------------------------------------------------------------------


def _parse(split: Split) -> np.ndarray:
    client = tomus_client()
    src, dst = parse_edges(read_text(client, split))
    _keep(("parsed", client.addr, split), (src, dst))
    return distinct_ids(src, dst)


def _merge_ids(objs: list[np.ndarray]) -> np.ndarray:
    return distinct_ids(*objs)


# --- pass 2: index ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _IndexTask:
    split: Split
    nodes: Ref  # the sorted ids (pickled), the broadcast of this pass


def _index(task: _IndexTask) -> np.ndarray:
    client = tomus_client()
    nodes: np.ndarray = cached(client, task.nodes)
    pairs = _dense_edges(client, task.split, task.nodes)
    return np.bincount(pairs[:, 0], minlength=len(nodes))


# --- pass 3: iterate ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _StepTask:
    splits: tuple[Split, ...]
    nodes: Ref  # the sorted ids, to derive a split's dense edges again where they are not kept
    # rank / outdeg per node, the broadcast of this iteration: stored (pickled), or itself
    # for workers that are threads of the driver's process.
    share: Ref | np.ndarray


def _step(task: _StepTask) -> np.ndarray:
    client = tomus_client()
    share: np.ndarray = cached(client, task.share) if isinstance(task.share, Ref) else task.share
    total = np.zeros(len(share))
    for split in task.splits:
        pairs = _dense_edges(client, split, task.nodes)
        total += np.bincount(pairs[:, 1], weights=share[pairs[:, 0]], minlength=len(share))
    return total


def _add(objs: list[np.ndarray]) -> np.ndarray:
    out: np.ndarray = objs[0].copy()
    for o in objs[1:]:
        out += o
    return out


def _update(
    rank: np.ndarray, incoming: np.ndarray, dangling: np.ndarray, damping: float
) -> np.ndarray:
    n = len(rank)
    lost = float(rank[dangling].sum())
    return (1.0 - damping) / n + damping * (incoming + lost / n)


def pagerank(
    inputs: Input | Iterable[Input],
    iterations: int = 20,
    damping: float = 0.85,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    split_size: int | None = None,
    ratio: int = 4,
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> PageRankResult:
    """PageRank of the graph whose edge list is in ``inputs`` (text blobs or files)."""
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    if not 0.0 <= damping <= 1.0:
        raise ValueError(f"damping must be in [0, 1], got {damping}")
    with use_session(session, client, addr) as s:
        splits = plan_splits(s.tomus, inputs, split_size or SPLIT_BYTES)
        if not splits:
            raise ValueError("the edge list is empty")

        # Workers that are threads of this process take results and broadcasts by reference;
        # across processes, both go through tomus (see the module's docstring).
        durable = not s.placement.in_process
        # What a pass stored for the next (its broadcast, its result) is deleted when that
        # pass ends; the ids, which every pass may need, when the run ends (on failure too).
        current: list[Ref] = []
        kept: list[Ref] = []

        def run(
            mapper: Callable[[Any], Any],
            merge: Callable[[list[Any]], Any],
            tasks: list[Any],
            affinity: list[str | None] | None = None,
        ) -> IterativeResult:
            out = IterativeReduce(mapper, merge, ratio, durable=durable).run_in(
                s, tasks, on_task=on_task, affinity=affinity
            )
            if out.final is not None and out.final.stored:
                current.append(out.final.ref)
            return out

        def pass_done() -> None:
            delete_objects(s.tomus, current)
            current.clear()

        def broadcast(value: np.ndarray) -> Ref | np.ndarray:
            if not durable:
                return value
            ref = put_object(s.tomus, value)
            current.append(ref)
            return ref

        try:
            parsed = run(_parse, _merge_ids, splits)
            nodes: np.ndarray = parsed.value
            if len(nodes) == 0:
                raise ValueError("the edge list has no edges")
            nodes_ref = put_object(s.tomus, nodes)
            kept.append(nodes_ref)
            pass_done()
            indexed = run(
                _index, _add, [_IndexTask(p, nodes_ref) for p in splits], _ran(parsed, len(splits))
            )
            outdeg: np.ndarray = indexed.value
            pass_done()
            edges = int(outdeg.sum())
            dangling = outdeg == 0
            safe = np.where(dangling, 1, outdeg)
            groups, placed = _groups(splits, _ran(indexed, len(splits)))
            n = len(nodes)
            rank = np.full(n, 1.0 / n)
            for _ in range(iterations):
                share = broadcast(np.where(dangling, 0.0, rank / safe))
                tasks = [_StepTask(g, nodes_ref, share) for g in groups]
                res = run(_step, _add, tasks, placed)
                incoming: np.ndarray = res.value
                placed = _ran(res, len(groups))
                pass_done()
                rank = _update(rank, incoming, dangling, damping)
        finally:
            delete_objects(s.tomus, current + kept)
    return PageRankResult(nodes, rank, iterations, edges)


def _ran(res: IterativeResult, tasks: int) -> list[str | None]:
    """The worker that ran each map task of ``res`` (None where unknown)."""
    where: list[str | None] = [None] * tasks
    for t in res.timeline:
        if t.kind == "map" and t.worker != "local":
            where[int(t.task[1:])] = t.worker
    return where


def _groups(
    splits: list[Split], indexed_on: list[str | None]
) -> tuple[list[tuple[Split, ...]], list[str | None]]:
    """One iteration task per worker, over the splits it indexed (it keeps their dense edges),
    and the worker each task asks for. Each task folds its splits into one vector of every
    node's incoming rank, stored for the merge: at 10 M edges, two tasks per worker took
    0.21 s per iteration, one 0.16 s, the kernels being the same. Pull-based assignment gave a
    faster worker more splits to index, so it gets more edges to fold in every iteration."""
    by_worker: dict[str | None, list[Split]] = {}
    for split, worker in zip(splits, indexed_on, strict=True):
        by_worker.setdefault(worker, []).append(split)
    return [tuple(g) for g in by_worker.values()], list(by_worker)


def reference_pagerank(
    src: np.ndarray, dst: np.ndarray, iterations: int = 20, damping: float = 0.85
) -> tuple[np.ndarray, np.ndarray]:
    """The same definition by power iteration in one process: (sorted node ids, ranks)."""
    nodes, inverse = np.unique(np.concatenate([src, dst]), return_inverse=True)
    s, d = inverse[: len(src)], inverse[len(src) :]
    n = len(nodes)
    outdeg = np.bincount(s, minlength=n)
    dangling = outdeg == 0
    safe = np.where(dangling, 1, outdeg)
    rank = np.full(n, 1.0 / n)
    for _ in range(iterations):
        share = np.where(dangling, 0.0, rank / safe)
        rank = _update(rank, np.bincount(d, weights=share[s], minlength=n), dangling, damping)
    return nodes, rank
