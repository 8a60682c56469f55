"""Workflows: DAGs of tasks passing files inside the deployment (the AFM paper).

Files are registered in place (``register``: O(1), no copy), moved between tasks by
adaptive transfer modules, and tasks run on Dask next to their inputs.

Modules:

- ``dag``: :class:`Workflow` and :class:`Task`, from Python or YAML; validation.
- ``modules``: the transfer-module API and the built-in modules (memory, direct, swarm,
  store); :func:`register_module` for user modules.
- ``pieces``: the swarm's piece exchange between readers still downloading, and its board.
- ``turns``: holder turns for the swarm without piece exchange.
- ``selection``: the per-transfer choice (Algorithms 1 and 2) and its configuration.
- ``runner``: :func:`run` on Dask, resume, the report; :func:`status`.
- ``replication``: the replication agent and its cost model (the paper's section IV).
- ``scratch``: directories under the work root, for tasks and the agent's copies.
- ``cli``: ``tomus workflow run|status FILE.yaml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomus
from tomus import _native
from tomus.workflow.dag import Task, Workflow, WorkflowError
from tomus.workflow.modules import (
    FileInfo,
    TransferContext,
    TransferModule,
    register_module,
    unregister_module,
)
from tomus.workflow.runner import Report, run, status
from tomus.workflow.selection import SelectionConfig, choose

__all__ = [
    "FileInfo",
    "Report",
    "SelectionConfig",
    "Task",
    "TransferContext",
    "TransferModule",
    "Workflow",
    "WorkflowError",
    "choose",
    "fetch",
    "register",
    "register_module",
    "registered",
    "run",
    "status",
    "unregister_module",
]


def register(
    client: tomus.Client,
    local: str | Path,
    path: str,
    *,
    provider: str | None = None,
    hints: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Shares the local file ``local`` as ``path`` without copying it (see ``tomus fs
    register``); returns its record."""
    return dict(_native.register_file(client, Path(local), path, provider=provider, hints=hints))


def registered(client: tomus.Client, path: str) -> dict[str, Any]:
    """The record of a registered file: size, checksum, holders, hints."""
    return dict(_native.registered_file(client, path))


def fetch(
    client: tomus.Client,
    path: str,
    dest: str | Path,
    *,
    mode: str = "direct",
    holders: list[str] | None = None,
) -> dict[str, Any]:
    """Fetches a registered file to ``dest`` from its holders, checksum verified."""
    return dict(_native.fetch_registered(client, path, Path(dest), mode=mode, holders=holders))
