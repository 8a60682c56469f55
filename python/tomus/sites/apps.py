"""A-Brain and MostFrequentWords across sites: scatter the data, run a part per site, combine.

A-Brain: the units are blocks of ``snp_block`` SNPs. Each site stores its blocks as a
genotype dataset of its own (blocks kept whole, so every map task computes exactly what it
computes in a single-site run) plus a copy of the imaging matrix, which every map needs. A
site's maps number SNPs locally; ``_GlobalSnps`` renames them to the SNPs of the whole study
before results leave the map, so the sites' results combine by the single-site reducer.
Permutations depend only on the seed and the subjects, so every site draws the same ones and
the per-permutation maxima combine across sites exactly as across blocks.

MostFrequentWords: the units are pieces of the input files cut at line ends (``piece_size``
bytes or a little more); each site stores its pieces as blobs and splits them as a single-site
job would. A site's reduced result is its word counter; the top k is taken from the combined
counter, so the answer is exactly the single-site one. Data already stored at the sites
(``resident_text_parts``) are processed where they are, without a scatter step.

If a site's part is missing (``MultiSiteResult.missing``), the answer covers the other units
only: MostFrequentWords then counts the words of the pieces present, and A-Brain's corrected
p-values are computed over the SNPs present (the family of tests is smaller: only a full
result controls the family-wise error of the whole study).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tomus
from tomus.compute.apps.abrain import Partial, abrain_job, abrain_tasks, load
from tomus.compute.apps.text import _count_split, _merge_counts, _TopK
from tomus.compute.splits import Input, plan_splits
from tomus.sites.config import OpenSites
from tomus.sites.metareducer import MetaReducer, MultiSiteResult, Part, PartRun
from tomus.sites.scatter import plan

__all__ = [
    "Piece",
    "abrain_sites",
    "cut_pieces",
    "most_frequent_words_sites",
    "read_local",
    "resident_text_parts",
    "scatter_abrain",
    "scatter_text",
]


# --- A-Brain ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _GlobalSnps:
    """A site's A-Brain mapper with its hits renamed from site-local to study-wide SNPs: the
    site's SNPs are its blocks (``units``, in order) of ``snp_block`` SNPs each, so local SNP
    ``s`` is SNP ``s % snp_block`` of block ``units[s // snp_block]``. (Block numbers, not an
    array of SNP ids: the mapper travels to the site with the job.)"""

    inner: Callable[[Any], Partial]
    units: tuple[int, ...]
    snp_block: int

    def __call__(self, task: Any) -> Partial:
        out = self.inner(task)
        b = self.snp_block
        out.hits = [(self.units[s // b] * b + s % b, v, r) for s, v, r in out.hits]
        return out


def abrain_sites(
    sites: OpenSites,
    x: np.ndarray,
    y: np.ndarray,
    permutations: int = 99,
    *,
    snp_block: int = 256,
    weights: Mapping[str, float] | None = None,
    assignment: Mapping[str, Sequence[int]] | None = None,
    alpha: float = 0.05,
    keep_p: float = 1e-3,
    seed: int = 0,
    ratio: int = 8,
    task_seconds: float = 1.0,
    rerun: bool = True,
    on_arrival: Callable[[PartRun], None] | None = None,
) -> MultiSiteResult:
    """A-Brain on X (subjects x SNPs) and Y (subjects x voxels) across ``sites``: the SNP
    blocks are scattered (``weights``: per-site weights instead of the sites' own;
    ``assignment``: site -> block indexes), each site analyses its blocks, the MetaReducer
    combines. ``.value`` is an ``ABrainResult`` (over the blocks present if any are missing)."""
    meta, parts = scatter_abrain(
        sites, x, y, permutations, snp_block=snp_block, weights=weights, assignment=assignment,
        alpha=alpha, keep_p=keep_p, seed=seed, ratio=ratio, task_seconds=task_seconds,
        rerun=rerun,
    )  # fmt: skip
    return meta.run(sites, parts, on_arrival=on_arrival)


def scatter_abrain(
    sites: OpenSites,
    x: np.ndarray,
    y: np.ndarray,
    permutations: int = 99,
    *,
    snp_block: int = 256,
    weights: Mapping[str, float] | None = None,
    assignment: Mapping[str, Sequence[int]] | None = None,
    alpha: float = 0.05,
    keep_p: float = 1e-3,
    seed: int = 0,
    ratio: int = 8,
    task_seconds: float = 1.0,
    rerun: bool = True,
) -> tuple[MetaReducer, list[Part]]:
    """The scatter step of ``abrain_sites``: stores each site's SNP blocks (and a copy of the
    imaging) at the site; returns the MetaReducer and the parts for ``MetaReducer.run``."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"X has {x.shape[0]} subjects, Y {y.shape[0]}")
    snps = x.shape[1]
    blocks = -(-snps // snp_block)
    shares = plan(blocks, weights or sites.weights(), assignment)
    parts: list[Part] = []
    job = None
    for name, units in shares.items():
        if not units:
            continue
        rt = sites.up[name]
        ids = np.concatenate(
            [np.arange(b * snp_block, min((b + 1) * snp_block, snps)) for b in units]
        )
        # Whole blocks in study order: the site's chunks are the single-site run's blocks.
        data = load(rt.tomus, x[:, ids], y, snp_block=snp_block)
        job = abrain_job(data, permutations, alpha=alpha, keep_p=keep_p, seed=seed, ratio=ratio)
        tasks = abrain_tasks(data, permutations, rt.workers, task_seconds)
        last = [min((b + 1) * snp_block, snps) - 1 for b in units]
        describe = tuple(f"SNPs {b * snp_block}-{e}" for b, e in zip(units, last, strict=True))
        # Each site has its own copy of the imaging matrix: the mapper is the part's own.
        mapper = _GlobalSnps(job.mapper, tuple(units), snp_block)
        parts.append(Part(name, tuple(tasks), tuple(units), describe, mapper))
    if job is None:
        raise ValueError("A-Brain needs at least one SNP")
    # Reducer and finalize are the same for every site (they do not depend on the data).
    meta = MetaReducer(job.mapper, job.reducer, ratio, finalize=job.finalize, rerun=rerun)
    return meta, parts


# --- MostFrequentWords ------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """Bytes ``[start, end)`` of input ``name``: a unit of the text scatter."""

    name: str
    start: int
    end: int
    data: bytes

    def __str__(self) -> str:
        return f"{self.name} bytes {self.start}-{self.end}"


def cut_pieces(files: Sequence[tuple[str, bytes]], piece_size: int = 4 << 20) -> list[Piece]:
    """The files cut into pieces of about ``piece_size`` bytes, each ending at a line end
    (a piece that lacks one at the end of its file gets one: words never span files)."""
    if piece_size < 1:
        raise ValueError(f"piece_size must be positive, got {piece_size}")
    out = []
    for name, data in files:
        start = 0
        while start < len(data):
            end = data.find(b"\n", min(start + piece_size, len(data)) - 1)
            end = len(data) if end < 0 else end + 1
            body = data[start:end]
            out.append(Piece(name, start, end, body if body.endswith(b"\n") else body + b"\n"))
            start = end
    return out


def read_local(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[str, bytes]]:
    """Local files (directories: every file below, in name order) as (name, bytes)."""
    out: list[tuple[str, bytes]] = []
    for p in map(Path, paths):
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        out.extend((str(f), f.read_bytes()) for f in files)
    return out


def scatter_text(
    sites: OpenSites,
    files: Sequence[tuple[str, bytes]],
    *,
    piece_size: int = 4 << 20,
    split_size: int | None = None,
    weights: Mapping[str, float] | None = None,
    assignment: Mapping[str, Sequence[int]] | None = None,
) -> list[Part]:
    """Cuts ``files`` into pieces, stores each site's pieces there (a blob each); the parts."""
    pieces = cut_pieces(files, piece_size)
    shares = plan(len(pieces), weights or sites.weights(), assignment)
    parts = []
    for name, units in shares.items():
        if not units:
            continue
        client = sites.up[name].tomus
        blobs = []
        for u in units:
            blob = client.create_blob(chunk_size=_chunk_for(len(pieces[u].data)))
            blob.write(0, pieces[u].data)
            blobs.append(blob.id)
        splits = plan_splits(client, blobs, split_size)
        parts.append(Part(name, tuple(splits), tuple(units), tuple(str(pieces[u]) for u in units)))
    return parts


def _chunk_for(n: int) -> int:
    size = 64 << 10
    while size < n and size < (4 << 20):
        size <<= 1
    return size


def resident_text_parts(
    sites: OpenSites, inputs: Mapping[str, Sequence[Input]], split_size: int | None = None
) -> list[Part]:
    """Parts for text already stored at the sites: site -> its inputs (namespace paths or
    blob ids of that site's cluster). Units are numbered across sites in input order."""
    parts, unit = [], 0
    for name, items in inputs.items():
        if name not in sites.sites.names:
            raise ValueError(f"inputs name an unknown site {name!r}")
        units = tuple(range(unit, unit + len(items)))
        unit += len(items)
        rt = sites.up.get(name)
        try:
            # A site whose Dask is down may still have a cluster that answers (then its part
            # can be rerun elsewhere); one that does not gets no items and is reported missing.
            client = rt.tomus if rt else _connect(sites, name)
            splits = tuple(plan_splits(client, list(items), split_size))
        except tomus.TomusError:
            if rt is not None:
                raise
            splits = ()
        describe = tuple(f"{name}:{i}" for i in items)
        parts.append(Part(name, splits, units, describe))
    return parts


def _connect(sites: OpenSites, name: str) -> tomus.Client:
    site = sites.sites[name]
    return tomus.connect(site.addr, secret=site.secret, connect_timeout=3, timeout=10)


def most_frequent_words_sites(
    sites: OpenSites,
    parts: Sequence[Part],
    k: int = 10,
    *,
    ratio: int = 5,
    rerun: bool = True,
    on_arrival: Callable[[PartRun], None] | None = None,
) -> MultiSiteResult:
    """The k most frequent words of the parts' text; ``.value`` is ``[(word, count), ...]``."""
    meta = MetaReducer(_count_split, _merge_counts, ratio, finalize=_TopK(k), rerun=rerun)
    return meta.run(sites, parts, on_arrival=on_arrival)
