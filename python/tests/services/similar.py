"""Many similar result files: what grouped compression is for (shared by tests and bench).

Each file is one run of a simulation: the same CSV schema, and rows taken from one shared
template except a fraction ``fresh`` of them drawn anew per file. ``fresh=0.02``: near-repeats
(runs differing in a few outputs); ``fresh=1.0``: only the schema and value formats shared.
"""

from __future__ import annotations

import random

HEADER = "step,x,y,z,energy,flag\n"


def _row(rng: random.Random) -> str:
    vals = [f"{rng.random():.6f}" for _ in range(4)]
    return ",".join([str(rng.randint(0, 10**6)), *vals, rng.choice("ab")]) + "\n"


def similar_files(n: int, size: int, seed: int = 7, fresh: float = 0.02) -> list[bytes]:
    """``n`` files of ``size`` bytes (see the module doc)."""
    rng = random.Random(seed)
    template: list[str] = []
    while sum(len(r) for r in template) < size:
        template.append(_row(rng))
    files = []
    for i in range(n):
        r = random.Random(seed * 1000 + i)
        out = [HEADER, *(_row(r) if r.random() < fresh else row for row in template)]
        files.append("".join(out).encode()[:size])
    return files
