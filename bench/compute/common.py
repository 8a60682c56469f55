"""Shared setup of the compute benchmarks: one embedded tomus cluster and one Dask LocalCluster
(2 worker processes, one thread each) for every system compared, and a timer."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from tomus.compute.engine import Session, session

T = TypeVar("T")


@contextlib.contextmanager
def engines(
    workers: int = 2, providers: int = 4, processes: bool = True
) -> Iterator[Session]:
    """An embedded tomus cluster and a Dask LocalCluster of ``workers`` (processes, or
    threads of this process with ``processes=False``), started side by side."""
    with contextlib.ExitStack() as stack:
        yield stack.enter_context(
            session(
                None,
                None,
                workers=workers,
                providers=providers,
                processes=processes,
                fsync=False,
            )
        )


def timed(fn: Callable[[], T], repeat: int = 1) -> tuple[T, float]:
    """The result of ``fn`` and its best wall time over ``repeat`` runs."""
    best = float("inf")
    out: Any = None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def machine() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
