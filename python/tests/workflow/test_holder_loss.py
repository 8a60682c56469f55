"""A workflow whose input lost its only copy (the holder's provider is SIGKILLed and its copy
removed, as a node lost with its disk): the driver runs the producing task again (its output is
registered anew) and the workflow still gives the right answer. Own cluster: it kills one of
its providers."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import tomus
from tomus import workflow
from tomus.workflow import Workflow


def provider_pid(data_dir: Path, provider_dir: Path) -> int:
    """The pid of the `tomus provider` process serving `provider_dir` (started by this test's
    cluster)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"provider" in args and str(provider_dir).encode() in args:
            return int(entry.name)
    raise AssertionError(f"no provider process serves {provider_dir}")


def test_lost_holder_reruns_producer(tmp_path: Path) -> None:
    with tomus.local_cluster(providers=2, fsync=False) as cluster:
        client = cluster.connect()
        d = f"/wf/loss-{uuid.uuid4().hex[:8]}"
        marker = tmp_path / "gen-runs"
        first = Workflow("loss", d)
        first.task("gen", f"echo run >> {marker}; seq 1 5000 > a.txt", outputs=["a.txt"])
        workflow.run(first, client, n_workers=1, progress=False, work_root=cluster.data_dir)
        rec = workflow.registered(client, f"{d}/a.txt")
        assert len(rec["holders"]) == 1
        # The provider directory holding the copy, and its process.
        (holder_dir,) = [
            p.parent.parent for p in cluster.data_dir.rglob("registered/*") if p.is_file()
        ]
        # The node is lost with its disk: the provider process dies (`tomus up` restarts
        # it) and its copy is gone.
        os.kill(provider_pid(cluster.data_dir, holder_dir), signal.SIGKILL)
        for copy in (holder_dir / "registered").iterdir():
            os.chmod(copy, 0o644)
            copy.unlink()
        second = Workflow("loss", d)
        second.task("gen", f"echo run >> {marker}; seq 1 5000 > a.txt", outputs=["a.txt"])
        second.task("count", "wc -l < a.txt > n.txt", inputs=["a.txt"], outputs=["n.txt"])
        report = workflow.run(
            second, client, n_workers=1, progress=False, work_root=cluster.data_dir
        )
        assert set(report.tasks) == {"gen", "count"}
        assert report.reruns == ["gen"] and report.skipped == ["gen"]
        assert marker.read_text().splitlines() == ["run", "run"]
        dest = tmp_path / "n"
        workflow.fetch(client, f"{d}/n.txt", dest)
        assert dest.read_text().strip() == "5000"
