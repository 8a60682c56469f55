"""User service functions of the tests (importable by name on the Dask workers)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def summarize(ctx: Any, out: str) -> dict[str, Any]:
    """Counts lines and bytes of its input files and writes the summary to ``out``."""
    fs = ctx.fs
    summary = {}
    for i, p in enumerate(ctx.paths):
        data = fs.cat_file(p.strip("/"))
        summary[p] = {"bytes": len(data), "lines": data.count(b"\n")}
        ctx.progress(i + 1, len(ctx.paths), p)
    fs.pipe_file(out.strip("/"), json.dumps(summary, sort_keys=True).encode())
    return {"worker": ctx.worker, "host": ctx.host, "pid": os.getpid(), "files": len(summary)}


def slow_first_attempt(ctx: Any, marks: str) -> dict[str, Any]:
    """Leaves ``attempt<N>-<pid>`` in ``marks``; the first attempt then waits to be killed."""
    Path(marks, f"attempt{ctx.attempt}-{os.getpid()}").touch()
    if ctx.attempt == 1:
        time.sleep(60)
    ctx.fs.pipe_file("svc/retried.txt", f"attempt {ctx.attempt}".encode())
    return {"attempt": ctx.attempt, "pid": os.getpid()}


def fails(ctx: Any) -> None:
    raise RuntimeError(f"broken on purpose (attempt {ctx.attempt})")
