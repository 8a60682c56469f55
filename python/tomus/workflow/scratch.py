"""Scratch directories under a workflow's work root (``tomus-workflow-NAME``, made on each
host that needs one): where tasks run, and where the replication agent stages its copies.

A run removes the root from its hosts when it ends and the root is empty, so another run of
the same workflow on a host may remove it between the moment a directory is to be made in it
and the moment it is: :func:`make_dir_under` makes the root again then.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from tomus.workflow.dag import WorkflowError

__all__ = ["make_dir_under", "remove_if_empty"]


def make_dir_under(root: Path, prefix: str) -> Path:
    """A new directory named ``prefix...`` under ``root``, which need not exist."""
    for _ in range(3):
        root.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # removed in between: make it again
            return Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    raise WorkflowError(f"cannot make a directory {prefix}* under {root}")


def remove_if_empty(path: str) -> None:
    """Removes the directory ``path`` if it exists and is empty (a plain function: it is
    pickled to the workers)."""
    with contextlib.suppress(OSError):  # not empty, or gone already
        os.rmdir(path)
