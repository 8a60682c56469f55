"""The workflow applications of the AFM paper, each with a single-process reference answer.

- ``synthetic``: the synthetic benchmark (2 stage-in jobs, a broadcast to ``width`` jobs,
  a reduction tree; 38 jobs with the paper's width of 20).
- ``blast``: the BLAST-like case study (splitter, N seed-and-extend matchers reading 3 shared
  database files, assembler).
- this module: :func:`run_app`, which runs one of them on a cluster and checks its answer
  (``tomus workflow synthetic|blast`` and the demo call it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import tomus
from tomus.workflow.apps import blast, synthetic
from tomus.workflow.dag import Workflow
from tomus.workflow.runner import Report, run

__all__ = ["blast", "build", "check", "run_app", "synthetic"]


def build(app: str, size: int, *, width: int = 20, db_size: int | None = None,
          dir: str | None = None) -> Workflow:  # fmt: skip
    """The workflow of ``app`` (``synthetic``: ``width`` first-layer jobs; ``blast``:
    ``width`` matchers and databases of ``db_size`` bytes)."""
    if app == "synthetic":
        return synthetic.workflow(size, width=width, dir=dir or "/wf/synthetic")
    if app == "blast":
        return blast.workflow(size, matchers=width, db_size=db_size, dir=dir or "/wf/blast")
    raise ValueError(f"unknown workflow application {app!r} (synthetic or blast)")


def _get(client: tomus.Client, path: str, dest: Path) -> None:
    """A registered file from its holders, an ordinary one (``store_outputs``) from the store."""
    from tomus.workflow import fetch

    try:
        fetch(client, path, dest)
    except tomus.InvalidArgument:
        with client.fs().open(path, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 8 << 20)


def check(
    app: str, wf: Workflow, client: tomus.Client, work_dir: str | Path | None = None
) -> dict[str, Any]:
    """Fetches the workflow's result and compares it with the single-process reference."""
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        got = Path(tmp) / "result"
        if app == "synthetic":
            _get(client, wf.path_of("result.bin"), got)
            answer = synthetic.answer(got)
            t0 = time.perf_counter()
            ref = synthetic.reference(wf, work_dir)
            return {
                "answer": answer,
                "reference": ref,
                "equal": answer == ref,
                "reference_seconds": time.perf_counter() - t0,
            }
        _get(client, wf.path_of("hits.tsv"), got)
        hits = got.read_text()
        _get(client, wf.path_of("planted.tsv"), got)
        planted = got.read_text()
        t0 = time.perf_counter()
        ref = blast.reference(wf, work_dir)
        found, total = blast.found_planted(hits, planted)
        return {
            "hits": len(hits.splitlines()),
            "reference_hits": len(ref["hits"].splitlines()),
            "planted": total,
            "planted_found": found,
            "equal": hits == ref["hits"] and planted == ref["planted"],
            "reference_seconds": time.perf_counter() - t0,
        }


def run_app(
    app: str,
    wf: Workflow,
    client: tomus.Client,
    *,
    verify: bool = True,
    work_dir: str | Path | None = None,
    **run_args: Any,
) -> tuple[Report, dict[str, Any] | None]:
    """Runs ``wf`` (see :func:`tomus.workflow.run` for ``run_args``), then, with ``verify``,
    checks its answer against the reference."""
    report = run(wf, client, work_root=work_dir, **run_args)
    return report, (check(app, wf, client, work_dir) if verify else None)
