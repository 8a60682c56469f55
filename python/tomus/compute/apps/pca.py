"""PCA as one generalized-reduction pass: mean and scatter matrix, merged pairwise.

The reduction object is (count, mean, centered scatter), combined with the parallel update of
Chan et al. instead of raw sums of x and x x^T, which lose precision when the mean is large
compared with the spread. ``finalize`` takes the eigenvectors of the covariance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tomus.compute.dataset import Dataset
from tomus.compute.engine import Session, TaskRecord, use_session
from tomus.compute.generalized import GeneralizedReduction
from tomus.compute.iterative import IterativeResult

if TYPE_CHECKING:
    from distributed import Client as DaskClient

__all__ = ["PCAPass", "PCAResult", "pca", "reference_pca"]

Moments = tuple[int, np.ndarray, np.ndarray]

#: Rows per block of ``PCAPass.local``.
_BLOCK = 1 << 15


@dataclass
class PCAResult:
    mean: np.ndarray
    components: np.ndarray  # (k, d), rows sorted by explained variance
    explained_variance: np.ndarray  # (k,)
    job: IterativeResult | None = None


def _combine(a: Moments, b: Moments) -> Moments:
    na, ma, sa = a
    nb, mb, sb = b
    if na == 0:
        return b
    if nb == 0:
        return a
    n = na + nb
    delta = mb - ma
    return n, ma + delta * (nb / n), sa + sb + np.outer(delta, delta) * (na * nb / n)


def _components(moments: Moments, k: int) -> PCAResult:
    n, mean, scatter = moments
    cov = scatter / max(n - 1, 1)
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1][:k]
    comps = vectors[:, order].T
    # A sign convention, so answers are comparable: the largest entry of each is positive.
    signs = np.sign(comps[np.arange(len(comps)), np.abs(comps).argmax(1)])
    return PCAResult(mean, comps * signs[:, None], values[order])


class PCAPass(GeneralizedReduction):
    ratio = 4

    def __init__(self, components: int) -> None:
        super().__init__()
        self.k = components

    def init(self) -> Moments | None:
        return None

    def local(self, obj: Moments | None, chunk: np.ndarray) -> Moments | None:
        # Block by block through one reused buffer (no chunk-sized float64 temporaries, which
        # Dask's workers, with MALLOC_TRIM_THRESHOLD_ set, map and unmap every time), each
        # block's moments merged in with the same stable update as the tree uses.
        size = min(_BLOCK, len(chunk))
        buf = np.empty((size, *chunk.shape[1:]))
        for s in range(0, len(chunk), _BLOCK):
            x = buf[: min(_BLOCK, len(chunk) - s)]
            np.copyto(x, chunk[s : s + len(x)], casting="same_kind")
            m = x.mean(0)
            x -= m
            mine: Moments = (len(x), m, x.T @ x)
            obj = mine if obj is None else _combine(obj, mine)
        return obj

    def merge(self, a: Moments | None, b: Moments | None) -> Moments | None:
        if a is None or b is None:
            return a if b is None else b
        return _combine(a, b)

    def finalize(self, obj: Moments | None) -> PCAResult:
        if obj is None:
            raise ValueError("PCA of an empty dataset")
        return _components(obj, self.k)


def pca(
    dataset: Dataset,
    components: int,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> PCAResult:
    with use_session(session, client, addr) as s:
        job = PCAPass(components).run(dataset, session=s, on_task=on_task)
    out: PCAResult = job.value
    out.job = job
    return out


def reference_pca(points: np.ndarray, components: int) -> PCAResult:
    x = points.astype(np.float64)
    m = x.mean(0)
    c = x - m
    return _components((len(x), m, c.T @ c), components)
