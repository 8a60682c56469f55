"""Small deterministic text inputs for the compute tests."""

from __future__ import annotations

import random

import tomus

VOCAB = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
    "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "Error",
    "warning", "info", "x1", "y_2", "the", "of", "and",
]  # fmt: skip


def make_text(seed: int, lines: int) -> bytes:
    """Lines of Zipf-ish words and punctuation, some empty, some long."""
    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(VOCAB))]
    out = []
    for _ in range(lines):
        n = rng.choice([0, 1, 3, 8, 12, 40, 200])
        ws = rng.choices(VOCAB, weights, k=n)
        out.append(" ".join(w + rng.choice(["", ",", ".", "!"]) for w in ws))
    return ("\n".join(out) + "\n").encode()


def put_text(client: tomus.Client, text: bytes, chunk_size: int = 4096) -> int:
    blob = client.create_blob(chunk_size=chunk_size)
    blob.write(0, text)
    return int(blob.id)
