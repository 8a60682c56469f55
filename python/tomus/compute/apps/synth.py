"""Synthetic inputs with known answers: text, clustered points, genotypes and imaging."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np

__all__ = ["clustered_points", "genotypes_imaging", "pieces", "stdlib_text"]


def stdlib_text(size: int) -> bytes:
    """``size`` bytes of text: the Python standard library's sources (files already on every
    machine with Python), in a fixed order, repeated as needed; cut at a line end."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[bytes] = []
    total = 0
    for path in sorted(root.glob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        parts.append(data if data.endswith(b"\n") else data + b"\n")
        total += len(parts[-1])
        if total >= size:
            break
    if not parts:
        raise RuntimeError(f"no Python sources under {root}")
    base = b"".join(parts)
    text = base * (size // len(base) + 1)
    cut = text.rfind(b"\n", 0, size)
    return text[: cut + 1] if cut >= 0 else text[:size]


def pieces(text: bytes, n: int) -> list[bytes]:
    """``text`` cut into about ``n`` parts at line ends (so no word is split between files)."""
    out: list[bytes] = []
    step = max(1, -(-len(text) // n))
    start = 0
    while start < len(text):
        cut = text.find(b"\n", min(start + step, len(text)) - 1)
        end = len(text) if cut < 0 else cut + 1
        out.append(text[start:end])
        start = end
    return out


def clustered_points(
    n: int, d: int, k: int, *, seed: int = 0, spread: float = 1.0, scale: float = 10.0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` float32 points around ``k`` random centers in ``d`` dimensions; (points, centers)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-scale, scale, (k, d))
    labels = rng.integers(k, size=n)
    points = centers[labels] + rng.normal(0, spread, (n, d))
    return points.astype(np.float32), centers


def genotypes_imaging(
    subjects: int,
    snps: int,
    voxels: int,
    *,
    planted: int = 3,
    effect: float = 1.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Genotypes X (subjects x SNPs, int8 allele counts with minor allele frequencies in
    [0.1, 0.5]) and imaging Y (subjects x voxels, float32 noise), with ``planted`` true
    associations: voxel v's signal gets ``effect`` times the standardized dose of SNP s.
    Returns (X, Y, [(s, v), ...]) with distinct SNPs and voxels."""
    rng = np.random.default_rng(seed)
    maf = rng.uniform(0.1, 0.5, snps)
    x = rng.binomial(2, maf, (subjects, snps)).astype(np.int8)
    y = rng.standard_normal((subjects, voxels))
    ss = rng.choice(snps, planted, replace=False)
    vs = rng.choice(voxels, planted, replace=False)
    pairs = sorted(zip(ss.tolist(), vs.tolist(), strict=True))
    for s, v in pairs:
        dose = x[:, s].astype(np.float64)
        sd = dose.std() or 1.0
        y[:, v] += effect * (dose - dose.mean()) / sd
    return x, y.astype(np.float32), pairs
