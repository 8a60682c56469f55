"""Fixtures of the workflow tests: the session's embedded cluster (4 providers on loopback,
data under the system temp dir, so files written in ``tmp_path`` are on the providers' file
system and can be registered by hard link)."""

from __future__ import annotations

import pytest

import tomus


@pytest.fixture
def providers(client: tomus.Client) -> list[str]:
    return sorted(p.addr for p in client.providers() if p.alive)


@pytest.fixture(autouse=True)
def workflow_workdir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs' task directories (failed tasks' stay for inspection) under pytest's temporary
    tree, which pytest prunes, not in the system temp dir, which they would litter. The
    command-line runs the tests start inherit it."""
    work = tmp_path_factory.mktemp("workflow-work")
    monkeypatch.setenv("TOMUS_WORKFLOW_WORKDIR", str(work))
