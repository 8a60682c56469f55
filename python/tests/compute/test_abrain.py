"""A-Brain univariate analysis: planted associations are found, and nothing else."""

from __future__ import annotations

from typing import Any

import numpy as np

import tomus
from tomus.compute.apps.abrain import abrain, load, reference_abrain
from tomus.compute.apps.synth import genotypes_imaging


def test_abrain_finds_the_planted_associations_and_no_others(
    dask: Any, addr: str, tc: tomus.Client
) -> None:
    x, y, planted = genotypes_imaging(150, 300, 80, planted=3, effect=0.8, seed=11)
    data = load(tc, x, y, snp_block=64)
    perms = 39
    res = abrain(data, perms, dask, addr, alpha=0.05, seed=4)
    assert res.complete
    assert sorted((s, v) for s, v, _, _ in res.pairs) == planted
    assert all(p == 1 / (perms + 1) for *_, p in res.pairs)  # beyond every null maximum
    assert res.job is not None
    # Each task reads one SNP block and takes many permutations of it.
    assert (
        len(data.genotypes.chunks) <= res.job.map_tasks < (perms + 1) * len(data.genotypes.chunks)
    )
    ref = reference_abrain(x, y, perms, alpha=0.05, seed=4)
    assert [(s, v, p) for s, v, _, p in res.pairs] == [(s, v, p) for s, v, _, p in ref.pairs]
    np.testing.assert_allclose(res.null_max, ref.null_max, rtol=1e-9)


def test_abrain_without_planted_signal_finds_nothing(
    dask: Any, addr: str, tc: tomus.Client
) -> None:
    x, y, _ = genotypes_imaging(100, 128, 40, planted=0, seed=2)
    res = abrain(load(tc, x, y, snp_block=64), 19, dask, addr, alpha=0.05, seed=1)
    assert res.pairs == []
    assert len(res.null_max) == 19
