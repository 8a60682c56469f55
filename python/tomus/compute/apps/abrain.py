"""A-Brain univariate analysis (TomusBlobs paper, section 6) on IterativeReduce.

Genotypes X (subjects x SNPs, allele counts 0/1/2) and imaging Y (subjects x voxels): for every
(SNP, voxel) pair the association statistic is the Pearson correlation r between the SNP's
allele dose and the voxel's signal (the allelic dose model). Family-wise error is controlled by
permutations: shuffling the subjects of X B times gives the null distribution of the *maximum*
|r| over all pairs, and a pair's corrected p-value is the fraction of shuffles whose maximum
reaches its |r| (with the usual +1: (1 + #{b: max_b >= |r|}) / (B + 1)).

Each map task takes one permutation and one block of SNPs (a chunk of the genotype dataset,
stored SNP-major so a block is one contiguous range) and computes r for every pair in the block.
It keeps only what the reduction needs: the block's maximum |r| for its permutation and, for the
unpermuted data, the pairs with |r| at or above ``keep_r``. The IterativeReduce tree takes the
maximum per permutation and the union of the kept pairs, so the full matrix of statistics
(SNPs x voxels x permutations) is never stored; ``finalize`` turns the pairs into corrected
p-values.
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
    perm: int
    block: Chunk

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.block.hosts


@dataclass(frozen=True)
class _Associate:
    imaging: Chunk
    seed: int
    keep_r: float

    def __call__(self, task: _Task) -> Partial:
        client = tomus_client()
        yz = _imaging_z(client, self.imaging)
        xb = task.block.read(client).T  # subjects x SNPs of the block
        r = block_stats(xb, yz, permutation(self.seed, task.perm, len(yz)))
        a = np.abs(r)
        out = Partial({task.perm: float(a.max()) if a.size else 0.0})
        if task.perm == 0:
            for i, v in np.argwhere(a >= self.keep_r):
                out.hits.append((task.block.first + int(i), int(v), float(r[i, v])))
        return out


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
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> ABrainResult:
    """Significant (SNP, voxel) pairs with permutation-corrected p-values at ``alpha``.

    ``keep_p``: maps keep unpermuted pairs whose uncorrected p-value is below it (it must stay
    above the corrected threshold; ``result.complete`` tells whether it did).
    """
    keep_r = keep_threshold(data.subjects, keep_p)
    (imaging,) = data.imaging.chunks
    # Permutation-major: consecutive tasks read different blocks (and objects).
    blocks = [t.chunks[0] for t in data.genotypes.tasks()]  # round-robin over the objects
    tasks = [_Task(b, block) for b in range(permutations + 1) for block in blocks]
    job = IterativeReduce(
        _Associate(imaging, seed, keep_r),
        _merge,
        ratio=ratio,
        finalize=_Finalize(permutations, alpha, keep_r),
    )
    with use_session(session, client, addr) as s:
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
    """The same analysis in one process with numpy."""
    keep_r = keep_threshold(len(x), keep_p)
    yz = _standardize(y.astype(np.float32))
    total = Partial()
    for b in range(permutations + 1):
        r = block_stats(x, yz, permutation(seed, b, len(x)))
        a = np.abs(r)
        total.max_stat[b] = float(a.max())
        if b == 0:
            total.hits = [(int(i), int(v), float(r[i, v])) for i, v in np.argwhere(a >= keep_r)]
    return corrected(total, permutations, alpha, keep_r)
