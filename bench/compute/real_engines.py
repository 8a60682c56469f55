"""The peers of ``real.py``: KMeans, PCA, A-Brain, PageRank and the text apps (WordCount,
MostFrequentWords, grep) in plain Dask (distributed futures on a 2-process LocalCluster, and
the threaded scheduler with 2 threads), Spark ``local[2]`` (RDDs of numpy blocks) and one
numpy process. Every engine runs the same kernels as tomus (``assign``/``cluster_sums``, the
Chan moment merge, ``permuted_stats``, ``bincount`` PageRank steps, ``Counter(words(...))``
and the line-by-line regex search per split), so the comparison is of engines, not of
kernels. Inputs are the same data as local files (``.npy`` blocks, edge-list and text files,
read by byte range)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tomus.compute.apps.abrain import (
    Partial,
    _hits,
    _standardize,
    corrected,
    keep_threshold,
    permuted_stats,
)
from tomus.compute.apps.kmeans import pass_stats
from tomus.compute.apps.pagerank import _update, distinct_ids, edge_pairs, parse_edges
from tomus.compute.apps.pca import PCAPass, _combine, _components
from tomus.compute.apps.text import _merge_counts as tx_merge
from tomus.compute.apps.text import top_k, words
from tomus.compute.splits import iter_lines

ALPHA = 0.05

# --- kernels shared by every peer ---------------------------------------------------------------


def km_stats(x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    return pass_stats(x, c)


def km_add(a: tuple, b: tuple) -> tuple:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def km_centers(c: np.ndarray, s: tuple) -> np.ndarray:
    sums, counts, _ = s
    new = c.copy()
    ok = counts > 0
    new[ok] = sums[ok] / counts[ok, None]
    return new


def moments(x: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    out = PCAPass(1).local(None, x)  # the same blockwise kernel as tomus
    assert out is not None
    return out


def ab_block(
    xb_t: np.ndarray, first: int, yz: np.ndarray, perms: int, seed: int
) -> Partial:
    """One SNP block (SNPs x subjects, as stored) against every permutation."""
    maxes, r0 = permuted_stats(_standardize(xb_t.T), yz, range(perms + 1), seed)
    out = Partial(maxes)
    if r0 is not None:
        out.hits = _hits(r0, first, keep_threshold(len(yz), 1e-3))
    return out


def ab_merge(p: Partial, q: Partial) -> Partial:
    out = Partial(dict(p.max_stat), list(p.hits))
    for b, m in q.max_stat.items():
        out.max_stat[b] = max(out.max_stat.get(b, 0.0), m)
    out.hits.extend(q.hits)
    return out


def ab_result(total: Partial, perms: int, subjects: int) -> Any:
    return corrected(total, perms, ALPHA, keep_threshold(subjects, 1e-3))


def pr_parse(path: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        return parse_edges(f.read())


def pr_nodes(parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    return distinct_ids(*(distinct_ids(*p) for p in parts))


def pr_index(part: tuple[np.ndarray, np.ndarray], nodes: np.ndarray) -> np.ndarray:
    return edge_pairs(nodes, *part)


def pr_outdeg(pairs: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(pairs[:, 0], minlength=n)


def pr_step(pairs: np.ndarray, share: np.ndarray) -> np.ndarray:
    return np.bincount(pairs[:, 1], weights=share[pairs[:, 0]], minlength=len(share))


def _sum(xs: list[np.ndarray]) -> np.ndarray:
    return functools.reduce(np.add, xs)


def pr_finish(
    nodes: np.ndarray, outdeg: np.ndarray, step: Any, iterations: int, damping: float
) -> tuple[np.ndarray, np.ndarray]:
    """The driver's loop, given ``step(share) -> incoming`` over the engine's partitions."""
    n = len(nodes)
    dangling = outdeg == 0
    safe = np.where(dangling, 1, outdeg)
    rank = np.full(n, 1.0 / n)
    for _ in range(iterations):
        rank = _update(
            rank, step(np.where(dangling, 0.0, rank / safe)), dangling, damping
        )
    return nodes, rank


# --- one numpy process --------------------------------------------------------------------------


def np_kmeans(paths: list[str], c: np.ndarray, iters: int) -> np.ndarray:
    x = np.concatenate([np.load(p) for p in paths])
    for _ in range(iters):
        c = km_centers(c, km_stats(x, c))
    return c


def np_pca(paths: list[str], k: int) -> Any:
    return _components(moments(np.concatenate([np.load(p) for p in paths])), k)


def np_abrain(block_paths: list[str], y_path: str, perms: int, seed: int) -> Any:
    x = np.concatenate([np.load(p) for p in block_paths])  # SNPs x subjects
    yz = _standardize(np.load(y_path))
    return ab_result(ab_block(x, 0, yz, perms, seed), perms, len(yz))


def np_pagerank(
    paths: list[str], iters: int, d: float
) -> tuple[np.ndarray, np.ndarray]:
    parts = [pr_parse(p) for p in paths]
    nodes = pr_nodes(parts)
    pairs = np.concatenate([pr_index(p, nodes) for p in parts])
    return pr_finish(
        nodes, pr_outdeg(pairs, len(nodes)), lambda s: pr_step(pairs, s), iters, d
    )


# --- plain Dask: distributed futures (data loaded once into worker memory) ------------------------


def dd_kmeans(dc: Any, paths: list[str], c: np.ndarray, iters: int) -> np.ndarray:
    parts = dc.map(np.load, paths)
    for _ in range(iters):
        stats = dc.map(km_stats, parts, c=c)
        c = km_centers(c, dc.submit(functools.reduce, km_add, stats).result())
    dc.cancel(parts)
    return c


def dd_pca(dc: Any, paths: list[str], k: int) -> Any:
    ms = dc.map(lambda p: moments(np.load(p)), paths)
    return _components(dc.submit(functools.reduce, _combine, ms).result(), k)


def dd_abrain(
    dc: Any,
    block_paths: list[str],
    firsts: list[int],
    y_path: str,
    perms: int,
    seed: int,
) -> Any:
    yz = _standardize(np.load(y_path))
    yz_f = dc.scatter(yz, broadcast=True)
    parts = [
        dc.submit(lambda p, f, y: ab_block(np.load(p), f, y, perms, seed), p, f, yz_f)
        for p, f in zip(block_paths, firsts, strict=True)
    ]
    return ab_result(
        dc.submit(functools.reduce, ab_merge, parts).result(), perms, len(yz)
    )


def dd_pagerank(dc: Any, paths: list[str], iters: int, d: float) -> Any:
    parsed = dc.map(pr_parse, paths)
    nodes = dc.submit(pr_nodes, parsed).result()
    nodes_f = dc.scatter(nodes, broadcast=True)
    pairs = [dc.submit(pr_index, p, nodes_f) for p in parsed]
    outdeg = dc.submit(
        _sum, [dc.submit(pr_outdeg, p, len(nodes)) for p in pairs]
    ).result()
    del parsed

    def step(share: np.ndarray) -> np.ndarray:
        s = dc.scatter(share, broadcast=True)
        return dc.submit(_sum, [dc.submit(pr_step, p, s) for p in pairs]).result()

    return pr_finish(nodes, outdeg, step, iters, d)


# --- plain Dask: the threaded scheduler (2 threads, one process) ---------------------------------


def _threads(*tasks: Any) -> list[Any]:
    import dask

    return list(dask.compute(*tasks, scheduler="threads", num_workers=2))


def dt_kmeans(paths: list[str], c: np.ndarray, iters: int) -> np.ndarray:
    from dask import delayed

    parts = _threads(*[delayed(np.load)(p) for p in paths])
    for _ in range(iters):
        (s,) = _threads(
            delayed(functools.reduce)(km_add, [delayed(km_stats)(x, c) for x in parts])
        )
        c = km_centers(c, s)
    return c


def dt_pca(paths: list[str], k: int) -> Any:
    from dask import delayed

    ms = [delayed(moments)(delayed(np.load)(p)) for p in paths]
    (total,) = _threads(delayed(functools.reduce)(_combine, ms))
    return _components(total, k)


def dt_abrain(
    block_paths: list[str], firsts: list[int], y_path: str, perms: int, seed: int
) -> Any:
    from dask import delayed

    yz = _standardize(np.load(y_path))
    parts = [delayed(ab_block)(delayed(np.load)(p), f, yz, perms, seed)
             for p, f in zip(block_paths, firsts, strict=True)]  # fmt: skip
    (total,) = _threads(delayed(functools.reduce)(ab_merge, parts))
    return ab_result(total, perms, len(yz))


def dt_pagerank(paths: list[str], iters: int, d: float) -> Any:
    from dask import delayed

    parsed = _threads(*[delayed(pr_parse)(p) for p in paths])
    nodes = pr_nodes(parsed)
    pairs = _threads(*[delayed(pr_index)(p, nodes) for p in parsed])
    outdeg = _sum(_threads(*[delayed(pr_outdeg)(p, len(nodes)) for p in pairs]))

    def step(share: np.ndarray) -> np.ndarray:
        return _sum(_threads(*[delayed(pr_step)(p, share) for p in pairs]))

    return pr_finish(nodes, outdeg, step, iters, d)


# --- the floor: the same kernels on inputs already in memory, 2 bare threads ----------------------
#
# Not a peer: no scheduler, no storage, no file reads, so no engine running these kernels on
# these 2 cores can beat it by much. best peer / floor is the most any engine could be ahead
# of the best peer.

_pool: ThreadPoolExecutor | None = None


def _bare(fn: Any, *iterables: Any) -> list[Any]:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(2, thread_name_prefix="floor")
    return list(_pool.map(fn, *iterables))


def fl_kmeans(parts: list[np.ndarray], c: np.ndarray, iters: int) -> np.ndarray:
    for _ in range(iters):
        c = km_centers(
            c, functools.reduce(km_add, _bare(lambda x, c=c: km_stats(x, c), parts))
        )
    return c


def fl_pca(parts: list[np.ndarray], k: int) -> Any:
    return _components(functools.reduce(_combine, _bare(moments, parts)), k)


def fl_abrain(
    blocks: list[np.ndarray], firsts: list[int], y: np.ndarray, perms: int, seed: int
) -> Any:
    yz = _standardize(y)
    parts = _bare(lambda b, f: ab_block(b, f, yz, perms, seed), blocks, firsts)
    return ab_result(functools.reduce(ab_merge, parts), perms, len(yz))


def fl_pagerank(texts: list[bytes], iters: int, d: float) -> Any:
    parsed = _bare(parse_edges, texts)
    nodes = pr_nodes(parsed)
    pairs = _bare(lambda p: pr_index(p, nodes), parsed)
    outdeg = _sum(_bare(lambda p: pr_outdeg(p, len(nodes)), pairs))

    def step(share: np.ndarray) -> np.ndarray:
        return _sum(_bare(lambda p: pr_step(p, share), pairs))

    return pr_finish(nodes, outdeg, step, iters, d)


# --- Spark local[2]: RDDs of numpy blocks ---------------------------------------------------------


def sp_kmeans(sc: Any, paths: list[str], c: np.ndarray, iters: int) -> np.ndarray:
    rdd = sc.parallelize(paths, len(paths)).map(np.load).cache()
    for _ in range(iters):
        c = km_centers(c, rdd.map(lambda x, c=c: km_stats(x, c)).reduce(km_add))
    rdd.unpersist()
    return c


def sp_pca(sc: Any, paths: list[str], k: int) -> Any:
    total = (
        sc.parallelize(paths, len(paths))
        .map(lambda p: moments(np.load(p)))
        .reduce(_combine)
    )
    return _components(total, k)


def sp_abrain(
    sc: Any,
    block_paths: list[str],
    firsts: list[int],
    y_path: str,
    perms: int,
    seed: int,
) -> Any:
    yz = _standardize(np.load(y_path))
    b = sc.broadcast(yz)
    total = (
        sc.parallelize(list(zip(block_paths, firsts, strict=True)), len(block_paths))
        .map(lambda t: ab_block(np.load(t[0]), t[1], b.value, perms, seed))
        .reduce(ab_merge)
    )
    b.unpersist()
    return ab_result(total, perms, len(yz))


def sp_pagerank(sc: Any, paths: list[str], iters: int, d: float) -> Any:
    parsed = sc.parallelize(paths, len(paths)).map(pr_parse).cache()
    nodes = distinct_ids(*parsed.map(lambda p: distinct_ids(*p)).collect())
    nb = sc.broadcast(nodes)
    pairs = parsed.map(lambda p: pr_index(p, nb.value)).cache()
    n = len(nodes)
    outdeg = pairs.map(lambda p: pr_outdeg(p, n)).reduce(np.add)
    parsed.unpersist()

    def step(share: np.ndarray) -> np.ndarray:
        s = sc.broadcast(share)
        out = pairs.map(lambda p: pr_step(p, s.value)).reduce(np.add)
        s.unpersist()
        return out

    res = pr_finish(nodes, outdeg, step, iters, d)
    pairs.unpersist()
    return res


# --- text: byte ranges of local files, the kernels of tomus's text apps -------------------------

#: A byte range of a local text file: (path, start, end), cut after a newline.
Range = tuple[str, int, int]


def tx_read(r: Range) -> bytes:
    path, start, end = r
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def tx_count(r: Range) -> Counter[bytes]:
    return Counter(words(tx_read(r)))


def tx_matches(r: Range, pattern: bytes) -> int:
    rx = re.compile(pattern)
    return sum(1 for line in iter_lines(tx_read(r)) if rx.search(line))


def tx_decoded(counts: Counter[bytes]) -> Counter[str]:
    return Counter({k.decode(): v for k, v in counts.items()})


def np_word_count(ranges: list[Range]) -> Counter[str]:
    return tx_decoded(tx_merge([tx_count(r) for r in ranges]))


def np_top_words(ranges: list[Range], k: int) -> list[tuple[str, int]]:
    return top_k(tx_merge([tx_count(r) for r in ranges]), k)


def np_grep(ranges: list[Range], pattern: bytes) -> int:
    return sum(tx_matches(r, pattern) for r in ranges)


def dd_counts(dc: Any, ranges: list[Range]) -> Counter[bytes]:
    return dc.submit(tx_merge, dc.map(tx_count, ranges)).result()


def dd_grep(dc: Any, ranges: list[Range], pattern: bytes) -> int:
    return dc.submit(sum, dc.map(tx_matches, ranges, pattern=pattern)).result()


def dt_counts(ranges: list[Range]) -> Counter[bytes]:
    from dask import delayed

    (total,) = _threads(delayed(tx_merge)([delayed(tx_count)(r) for r in ranges]))
    return total


def dt_grep(ranges: list[Range], pattern: bytes) -> int:
    from dask import delayed

    (total,) = _threads(delayed(sum)([delayed(tx_matches)(r, pattern) for r in ranges]))
    return int(total)
