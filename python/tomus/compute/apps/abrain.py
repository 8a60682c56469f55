"""A-Brain univariate analysis (TomusBlobs paper, section 6) on IterativeReduce.

Genotypes X (subjects x SNPs, allele counts 0/1/2) and imaging Y (subjects x voxels): for every
(SNP, voxel) pair the association statistic is the Pearson correlation r between the SNP's
allele dose and the voxel's signal (the allelic dose model). Family-wise error is controlled by
permutations: shuffling the subjects of X B times gives the null distribution of the *maximum*
|r| over all pairs, and a pair's corrected p-value is the fraction of shuffles whose maximum
reaches its |r| (with the usual +1: (1 + #{b: max_b >= |r|}) / (B + 1)).

Each map task takes one block of SNPs (a chunk of the genotype dataset, stored SNP-major so a
block is one contiguous range) and a range of permutations. It reads and standardizes the block
once: a permutation of the subjects only reorders the rows of the standardized genotypes, and
since ``X[perm].T @ Y == X.T @ Y[inverse(perm)]`` the task permutes the (small, cached) imaging
side instead and computes r for several permutations in one BLAS-sized product
``Xz.T @ [Y_p1 | Y_p2 | ...]``. It keeps only what the reduction needs: the block's maximum |r|
per permutation and, for the unpermuted data, the pairs with |r| at or above ``keep_r``.
How many permutations one task takes follows from a target task duration (``task_seconds``), so
tasks are big enough that the matrix products, not the per-task cost, dominate. The
IterativeReduce tree takes the maximum per permutation and the union of the kept pairs, so the
full matrix of statistics (SNPs x voxels x permutations) is never stored; ``finalize`` turns the
pairs into corrected p-values.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from math import sqrt, tanh
from typing import TYPE_CHECKING, cast

import numpy as np

import tomus
from tomus.compute.dataset import Chunk, Dataset
from tomus.compute.engine import Session, TaskRecord, tomus_client, use_session
from tomus.compute.iterative import IterativeReduce, IterativeResult

if TYPE_CHECKING:
    from distributed import Client as DaskClient

__all__ = [
    "ABrainData",
    "ABrainResult",
    "Partial",
    "abrain",
    "abrain_job",
    "abrain_tasks",
    "keep_threshold",
    "load",
    "reference_abrain",
]


@dataclass(frozen=True)
class ABrainData:
    """The genotype dataset (records: SNPs, each a vector over subjects, int8) and the imaging
    dataset (records: subjects, each a vector over voxels, float32, in one chunk)."""

    genotypes: Dataset
    imaging: Dataset
    subjects: int
    snps: int
    voxels: int


def load(
    client: tomus.Client, x: np.ndarray, y: np.ndarray, *, snp_block: int = 256, objects: int = 2
) -> ABrainData:
    """Stores X (subjects x SNPs) SNP-major in blocks of ``snp_block`` SNPs, and Y."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"X has {x.shape[0]} subjects, Y {y.shape[0]}")
    g = Dataset.write(
        client, np.ascontiguousarray(x.T, dtype=np.int8), objects=objects, chunk_records=snp_block
    )
    im = Dataset.write(client, np.ascontiguousarray(y, dtype=np.float32), objects=1,
                       chunk_records=len(y))  # fmt: skip
    return ABrainData(g, im, x.shape[0], x.shape[1], y.shape[1])


@dataclass
class Partial:
    """A reduction object: max |r| per permutation, and the kept unpermuted pairs."""

    max_stat: dict[int, float] = field(default_factory=dict)
    hits: list[tuple[int, int, float]] = field(default_factory=list)  # (snp, voxel, r)


@dataclass
class ABrainResult:
    pairs: list[tuple[int, int, float, float]]  # (snp, voxel, r, corrected p), p <= alpha
    null_max: np.ndarray  # max |r| of each permutation
    critical_r: float  # |r| above which a pair is significant at alpha
    keep_r: float  # pairs below this were not kept by the maps
    complete: bool  # keep_r <= critical_r: no significant pair can have been dropped
    job: IterativeResult | None = field(default=None, repr=False)


def keep_threshold(subjects: int, p: float) -> float:
    """|r| whose uncorrected two-sided p-value is ``p`` (Fisher z approximation)."""
    z = statistics.NormalDist().inv_cdf(1 - p / 2)
    return tanh(z / sqrt(max(subjects - 3, 1)))


def permutation(seed: int, perm: int, subjects: int) -> np.ndarray | None:
    """The subject order of permutation ``perm`` (0: the data as they are)."""
    if perm == 0:
        return None
    return np.random.default_rng([seed, perm]).permutation(subjects)


def _standardize(a: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    a -= a.mean(0)
    sd = a.std(0)
    sd[sd == 0] = np.inf  # a constant column correlates with nothing
    a /= sd
    return a


def block_stats(xb: np.ndarray, yz: np.ndarray, perm: np.ndarray | None) -> np.ndarray:
    """r for every (SNP of the block, voxel): xb is subjects x SNPs, yz standardized imaging."""
    xz = _standardize(xb if perm is None else xb[perm])
    return cast("np.ndarray", (xz.T @ yz) / len(yz))  # numpy types a matmul's result as Any


#: Permutations stacked side by side in one matrix product (bounds its temporary to about
#: ``subjects x voxels x _STACK`` doubles).
_STACK = 8


def permuted_stats(
    xz: np.ndarray, yz: np.ndarray, perms: range, seed: int
) -> tuple[dict[int, float], np.ndarray | None]:
    """For a standardized block ``xz`` (subjects x SNPs) and standardized imaging ``yz``: the
    maximum |r| of every permutation in ``perms``, and r of the unpermuted data (permutation 0)
    if ``perms`` holds it. The block is standardized once; each permutation reorders the rows
    of the imaging side (``Xz[p].T @ Y == Xz.T @ Y[p^-1]``) and ``_STACK`` permutations go
    through one matrix product."""
    n, v = yz.shape
    maxes: dict[int, float] = {}
    r0: np.ndarray | None = None
    todo = list(perms)
    # Buffers reused by every group (large temporaries per group would be mapped and unmapped
    # each time in Dask's workers, which set MALLOC_TRIM_THRESHOLD_).
    width = v * min(_STACK, len(todo))
    stacked_buf = np.empty((n, width))
    r_buf = np.empty((xz.shape[1], width))
    a_buf = np.empty((xz.shape[1], width))
    xzt = xz.T
    for i in range(0, len(todo), _STACK):
        group = todo[i : i + _STACK]
        stacked = stacked_buf[:, : v * len(group)]
        for j, b in enumerate(group):
            perm = permutation(seed, b, n)
            part = stacked[:, j * v : (j + 1) * v]
            if perm is None:
                part[:] = yz
            else:
                part[perm] = yz  # row perm[i] gets yz[i]: the inverse permutation of Y
        r = r_buf[:, : v * len(group)]
        np.matmul(xzt, stacked, out=r)
        r /= n
        a = np.abs(r, out=a_buf[:, : v * len(group)]).reshape(len(r), len(group), v)
        per = a.max(axis=(0, 2)) if a.size else np.zeros(len(group))
        for j, b in enumerate(group):
            maxes[b] = float(per[j])
            if b == 0:
                r0 = r[:, j * v : (j + 1) * v].copy()
    return maxes, r0


_imaging: dict[tuple[str, int, int], np.ndarray] = {}
_imaging_lock = threading.Lock()


def _imaging_z(client: tomus.Client, chunk: Chunk) -> np.ndarray:
    """The standardized imaging matrix, read and standardized once per worker process."""
    key = (client.addr, chunk.blob, chunk.version)
    with _imaging_lock:
        if key not in _imaging:
            _imaging.clear()
            _imaging[key] = _standardize(chunk.read(client))
        return _imaging[key]


@dataclass(frozen=True)
class _Task:
    perms: range
    block: Chunk

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.block.hosts


def _hits(r0: np.ndarray, first: int, keep_r: float) -> list[tuple[int, int, float]]:
    return [(first + int(i), int(v), float(r0[i, v])) for i, v in np.argwhere(np.abs(r0) >= keep_r)]


@dataclass(frozen=True)
class _Associate:
    imaging: Chunk
    seed: int
    keep_r: float

    def __call__(self, task: _Task) -> Partial:
        client = tomus_client()
        yz = _imaging_z(client, self.imaging)
        xz = _standardize(task.block.read(client).T)  # subjects x SNPs of the block, once
        maxes, r0 = permuted_stats(xz, yz, task.perms, self.seed)
        out = Partial(maxes)
        if r0 is not None:
            out.hits = _hits(r0, task.block.first, self.keep_r)
        return out


#: Multiply-adds per second one worker's matrix products are assumed to run at (float64 GEMM
#: on one core of a current CPU, a few GFlop/s); it only sizes tasks, never changes an answer.
GEMM_RATE = 4e9


def perms_per_task(
    subjects: int, snps_per_block: int, voxels: int, total_perms: int, blocks: int,
    workers: int, task_seconds: float,
) -> int:  # fmt: skip
    """Permutations per task so a task runs about ``task_seconds``, yet there are at least
    two tasks per worker (when the work can be cut that fine) so none waits at the end."""
    per_perm = max(1e-9, subjects * snps_per_block * voxels / GEMM_RATE)
    by_time = max(1, int(task_seconds / per_perm))
    groups = max(1, -(-total_perms // by_time))
    want = 2 * max(1, workers)
    if blocks * groups < want:
        groups = min(total_perms, -(-want // max(1, blocks)))
    return -(-total_perms // groups)


def _merge(parts: list[Partial]) -> Partial:
    out = Partial()
    for p in parts:
        for b, m in p.max_stat.items():
            out.max_stat[b] = max(out.max_stat.get(b, 0.0), m)
        out.hits.extend(p.hits)
    return out


@dataclass(frozen=True)
class _Finalize:
    permutations: int
    alpha: float
    keep_r: float

    def __call__(self, total: Partial) -> ABrainResult:
        return corrected(total, self.permutations, self.alpha, self.keep_r)


def corrected(total: Partial, permutations: int, alpha: float, keep_r: float) -> ABrainResult:
    """Corrected p-values of the kept pairs against the null of per-permutation maxima."""
    null = np.array([total.max_stat[b] for b in range(1, permutations + 1)])
    allowed = int(np.floor(alpha * (permutations + 1))) - 1  # null maxima that may reach |r|
    desc = np.sort(null)[::-1]
    critical = float(desc[allowed]) if 0 <= allowed < len(desc) else float("inf")
    pairs = []
    for s, v, r in total.hits:
        p = (1 + int((null >= abs(r)).sum())) / (permutations + 1)
        if p <= alpha:
            pairs.append((s, v, r, p))
    pairs.sort(key=lambda t: (t[3], -abs(t[2]), t[0], t[1]))
    return ABrainResult(pairs, null, critical, keep_r, keep_r <= critical)


def abrain_job(
    data: ABrainData,
    permutations: int,
    *,
    alpha: float = 0.05,
    keep_p: float = 1e-3,
    seed: int = 0,
    ratio: int = 8,
) -> IterativeReduce:
    """The IterativeReduce of an A-Brain analysis of ``data`` (its inputs: ``abrain_tasks``);
    multi-site runs (``tomus.sites``) use its mapper, reducer and finalize as they are."""
    keep_r = keep_threshold(data.subjects, keep_p)
    (imaging,) = data.imaging.chunks
    return IterativeReduce(
        _Associate(imaging, seed, keep_r),
        _merge,
        ratio=ratio,
        finalize=_Finalize(permutations, alpha, keep_r),
    )


def abrain_tasks(
    data: ABrainData, permutations: int, workers: int, task_seconds: float = 1.0
) -> list[_Task]:
    """The map tasks of an A-Brain analysis: (SNP block, permutation range) pairs sized for
    ``workers`` workers (see ``perms_per_task``)."""
    blocks = [t.chunks[0] for t in data.genotypes.tasks()]  # round-robin over the objects
    total = permutations + 1  # permutation 0 is the data as they are
    block_snps = max((b.records for b in blocks), default=1)
    step = perms_per_task(
        data.subjects, block_snps, data.voxels, total, len(blocks), workers, task_seconds
    )
    # Permutation-range-major: consecutive tasks read different blocks (and objects).
    return [
        _Task(range(p, min(p + step, total)), block)
        for p in range(0, total, step)
        for block in blocks
    ]


def abrain(
    data: ABrainData,
    permutations: int = 99,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    alpha: float = 0.05,
    keep_p: float = 1e-3,
    seed: int = 0,
    ratio: int = 8,
    task_seconds: float = 1.0,
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> ABrainResult:
    """Significant (SNP, voxel) pairs with permutation-corrected p-values at ``alpha``.

    ``keep_p``: maps keep unpermuted pairs whose uncorrected p-value is below it (it must stay
    above the corrected threshold; ``result.complete`` tells whether it did). ``task_seconds``:
    the target duration of one task (each takes one SNP block and as many permutations as fit).
    """
    job = abrain_job(data, permutations, alpha=alpha, keep_p=keep_p, seed=seed, ratio=ratio)
    with use_session(session, client, addr) as s:
        tasks = abrain_tasks(data, permutations, len(s.placement.workers), task_seconds)
        res = job.run_in(s, tasks, on_task=on_task)
    out: ABrainResult = res.value
    out.job = res
    return out


def reference_abrain(
    x: np.ndarray,
    y: np.ndarray,
    permutations: int = 99,
    *,
    alpha: float = 0.05,
    keep_p: float = 1e-3,
    seed: int = 0,
) -> ABrainResult:
    """The same analysis in one process with numpy (the genotypes standardized once, the
    permutations applied to the imaging side, several per matrix product)."""
    keep_r = keep_threshold(len(x), keep_p)
    yz = _standardize(y.astype(np.float32))
    maxes, r0 = permuted_stats(_standardize(x), yz, range(permutations + 1), seed)
    total = Partial(maxes)
    assert r0 is not None
    total.hits = _hits(r0, 0, keep_r)
    return corrected(total, permutations, alpha, keep_r)
