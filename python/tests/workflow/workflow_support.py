"""Helpers shared by the workflow tests (a module of its own: test directories here have
several conftest.py files, so tests do not import from conftest)."""

from __future__ import annotations

import os
from pathlib import Path


def write(path: Path, size: int, seed: int = 0) -> bytes:
    """Writes ``size`` bytes to ``path`` (random, or a pattern of ``seed``) and returns them."""
    data = os.urandom(size) if seed == 0 else bytes((i * seed) % 251 for i in range(size))
    path.write_bytes(data)
    return data
