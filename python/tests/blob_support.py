"""Helpers shared by the blob tests (a module of its own: test directories here have several
conftest.py files, so tests do not import from conftest)."""

from __future__ import annotations

import random

CHUNK = 64 << 10  # small chunks, so small data spans many chunks


def record(tag: int, seq: int, size: int) -> bytes:
    """Deterministic pseudo-random bytes for record `seq` of writer `tag`."""
    return random.Random(tag * 1_000_003 + seq).randbytes(size)
