"""Many similar result files: what grouped compression is for (shared by tests and bench)."""

from __future__ import annotations

import random


def similar_files(n: int, size: int, seed: int = 7, mutate: float = 0.02) -> list[bytes]:
    """``n`` files of ``size`` bytes: one random-looking CSV template (compresses poorly on
    its own) with ``mutate`` of its values changed per file, as results of one simulation run
    with different parameters look."""
    rng = random.Random(seed)
    rows: list[str] = []
    header = "step,x,y,z,energy,flag\n"
    while sum(len(r) for r in rows) < size:
        vals = [rng.randint(0, 10**6), rng.random(), rng.random(), rng.random(), rng.random()]
        row = ",".join([str(vals[0]), *(f"{v:.6f}" for v in vals[1:])]) + "," + rng.choice("ab")
        rows.append(row + "\n")
    files = []
    for i in range(n):
        r = random.Random(seed * 1000 + i)
        out = [header]
        for row in rows:
            out.append(f"{r.random():.6f},{row}" if r.random() < mutate else row)
        files.append("".join(out).encode()[:size])
    return files
