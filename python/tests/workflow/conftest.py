"""Fixtures of the workflow tests: the session's embedded cluster (4 providers on loopback,
data under the system temp dir, so files written in ``tmp_path`` are on the providers' file
system and can be registered by hard link)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tomus


def write(path: Path, size: int, seed: int = 0) -> bytes:
    data = os.urandom(size) if seed == 0 else bytes((i * seed) % 251 for i in range(size))
    path.write_bytes(data)
    return data


@pytest.fixture
def providers(client: tomus.Client) -> list[str]:
    return sorted(p.addr for p in client.providers() if p.alive)
