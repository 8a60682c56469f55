"""Fixtures of the workflow tests: the session's embedded cluster (4 providers on loopback,
data under the system temp dir, so files written in ``tmp_path`` are on the providers' file
system and can be registered by hard link)."""

from __future__ import annotations

import pytest

import tomus


@pytest.fixture
def providers(client: tomus.Client) -> list[str]:
    return sorted(p.addr for p in client.providers() if p.alive)
