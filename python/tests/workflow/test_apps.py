"""The workflow applications end to end, on the session's cluster: the synthetic workflow
from the command line (38 jobs, a real driver process with its own Dask cluster) and the
BLAST-like one from Python, both equal to their single-process references; task logs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import tomus
from tomus import workflow
from tomus.workflow import Workflow
from tomus.workflow.apps import blast, check, synthetic
from tomus.workflow.selection import SelectionConfig


def cli(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tomus", "workflow", *args],
        env=dict(os.environ, TOMUS_ADDR=addr),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_synthetic_from_the_cli_equals_the_reference(client: tomus.Client) -> None:
    d = f"/wf/synth-{uuid.uuid4().hex[:8]}"
    size = (256 << 10) + 8
    p = cli(client.addr, "synthetic", "--size", str(size), "--workers", "2", "--dir", d,
            "--json", "--quiet")  # fmt: skip
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    report, verdict = out["report"], out["check"]
    # The paper's shape: 2 stage-in jobs, 20 on the first layer, then 10, 5 and the last.
    assert len(report["tasks"]) == 38
    assert sum(n.startswith("L1-") for n in report["tasks"]) == 20
    assert sum(n.startswith("L2-") for n in report["tasks"]) == 10
    assert verdict["equal"] and verdict["answer"]["bytes"] == size
    transfers = [t for task in report["tasks"].values() for t in task["transfers"]]
    assert len(transfers) == 20 * 2 + 10 * 2 + 5 * 2 + 5
    assert {t["module"] for t in transfers} == {"memory"}  # small files
    assert report["bytes_per_module"]["memory"] == len(transfers) * size
    # The result is a registered file of the namespace, and the fetched bytes are the answer.
    rec = workflow.registered(client, f"{d}/result.bin")
    assert rec["size"] == size and rec["holders"]


def test_blast_hits_equal_the_reference_with_fixed_swarm(
    client: tomus.Client, tmp_path: Path
) -> None:
    wf = blast.workflow(
        120_000, matchers=3, db_size=150_000, dir=f"/wf/blast-{uuid.uuid4().hex[:8]}"
    )
    report = workflow.run(wf, client, n_workers=2, progress=False,
                          config=SelectionConfig(module="swarm"))  # fmt: skip
    verdict = check("blast", wf, client, tmp_path)
    assert verdict["equal"], verdict
    assert verdict["planted"] >= 20 and verdict["planted_found"] == verdict["planted"]
    assert verdict["hits"] == verdict["reference_hits"] >= verdict["planted"]
    assert {t["module"] for t in report.transfers} == {"swarm"}
    assert all(t["reason"] == "fixed by the configuration" for t in report.transfers)
    # Each database went to the query generator and 3 matchers: swarm readers became holders.
    for i in range(3):
        holders = workflow.registered(client, wf.path_of(f"db{i}.fa"))["holders"]
        assert len(holders) >= 2, holders
    # Every matcher read its own part and the 3 databases.
    for i in range(3):
        files = sorted(t["file"].rsplit("/", 1)[1] for t in report.tasks[f"match-{i}"]["transfers"])
        assert files == sorted([f"part-{i}.fa", "db0.fa", "db1.fa", "db2.fa"])


def test_synthetic_reference_depends_on_every_job(tmp_path: Path) -> None:
    # A wrong file passed anywhere changes the answer: two widths give two answers, and
    # the answer is the same for the same workflow.
    a = synthetic.reference(synthetic.workflow(4096, width=4), tmp_path)
    b = synthetic.reference(synthetic.workflow(4096, width=4), tmp_path)
    c = synthetic.reference(synthetic.workflow(4096, width=8), tmp_path)
    assert a == b and a["sha256"] != c["sha256"]


def test_task_logs_are_kept(client: tomus.Client, tmp_path: Path) -> None:
    d = f"/wf/logs-{uuid.uuid4().hex[:8]}"
    spec = tmp_path / "wf.yaml"
    spec.write_text(f"""
name: logs
dir: {d}
tasks:
  - name: talk
    command: "echo to-stdout; echo to-stderr >&2; echo 7 > x.txt"
    outputs: [x.txt]
  - name: fail
    command: "cat x.txt; echo broken-on-purpose >&2; exit 3"
    inputs: [x.txt]
    outputs: [y.txt]
    retries: 0
""")
    p = cli(client.addr, "run", str(spec), "--workers", "1", "--quiet")
    assert p.returncode == 1 and "broken-on-purpose" in p.stderr
    p = cli(client.addr, "logs", str(spec), "talk")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "--- talk stdout ---",
        "to-stdout",
        "--- talk stderr ---",
        "to-stderr",
    ]
    # The failed run's logs too: it read its input before failing.
    p = cli(client.addr, "logs", str(spec), "fail")
    assert "7\n" in p.stdout and "broken-on-purpose" in p.stdout
    p = cli(client.addr, "logs", str(spec), "nope")
    assert p.returncode == 2 and "no task 'nope'" in p.stderr


def shout(task_dir: Path) -> None:
    print("hello from python")
    (task_dir / "out.txt").write_text("ok")


def test_python_task_logs_in_the_report_and_task_dirs_removed(client: tomus.Client) -> None:
    wf = Workflow("pylogs", f"/wf/pylogs-{uuid.uuid4().hex[:8]}")
    wf.task("shout", fn=shout, outputs=["out.txt"])
    report = workflow.run(wf, client, n_workers=1, progress=False)
    t = report.tasks["shout"]
    assert t["logs"]["stdout"] == "hello from python\n" and t["logs"]["stderr"] == ""
    assert not Path(t["dir"]).exists(), "the task directory was left behind"
    assert not Path(t["dir"]).parent.exists(), "the workflow's work root was left behind"
    # Its output survived the directory: the provider holds its own link.
    assert workflow.registered(client, wf.path_of("out.txt"))["size"] == 2
    wf2 = Workflow("pylogs2", f"/wf/pylogs-{uuid.uuid4().hex[:8]}")
    wf2.task("shout", fn=shout, outputs=["out.txt"])
    report = workflow.run(wf2, client, n_workers=1, progress=False, keep_task_dirs=True)
    kept = Path(report.tasks["shout"]["dir"])
    assert (kept / "out.txt").read_text() == "ok"
    shutil.rmtree(kept.parent)


def test_synthetic_through_the_store_and_fixed_direct(client: tomus.Client, tmp_path: Path) -> None:
    # The fixed strategies the benchmarks compare with: outputs copied into the striped store
    # (read back by the store module), and every registered file by the direct module.
    wf = synthetic.workflow(40_000, width=4, dir=f"/wf/synth-store-{uuid.uuid4().hex[:8]}")
    report = workflow.run(wf, client, n_workers=2, progress=False, store_outputs=True)
    assert {t["module"] for t in report.transfers} == {"store"}
    assert client.fs().info(wf.path_of("result.bin"))["size"] == 40_000
    assert check("synthetic", wf, client, tmp_path)["equal"]
    wf = synthetic.workflow(40_000, width=4, dir=f"/wf/synth-direct-{uuid.uuid4().hex[:8]}")
    report = workflow.run(wf, client, n_workers=2, progress=False,
                          config=SelectionConfig(module="direct"))  # fmt: skip
    assert {t["module"] for t in report.transfers} == {"direct"}
    assert check("synthetic", wf, client, tmp_path)["equal"]


def test_blast_from_the_cli(client: tomus.Client) -> None:
    p = cli(client.addr, "blast", "--size", "60000", "--db-size", "80KB", "--width", "2",
            "--workers", "2", "--quiet")  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("workflow blast in /wf/blast-") and "8 tasks" in lines[0]
    assert "  answer equals the single-process reference" in lines
    found = next(x for x in lines if "planted matches found" in x)
    n, total = found.rsplit(" ", 1)[1].split("/")
    assert n == total and int(total) >= 10
    p = cli(client.addr, "blast", "--size", "lots")
    assert p.returncode == 2 and "not a size: 'lots'" in p.stderr
