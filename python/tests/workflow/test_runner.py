"""Workflows end to end: YAML through ``tomus workflow run`` (a real driver process with its
own Dask LocalCluster), validation before anything runs, Python tasks, and resume after the
driver is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import tomus
from tomus import workflow
from tomus.workflow import Workflow, WorkflowError
from tomus.workflow.replication import CostModel

DIAMOND = """
name: diamond
dir: {dir}
tasks:
  - name: gen
    command: "seq 1 100000 > nums.txt"
    outputs: [nums.txt]
  - name: count
    command: "wc -l < nums.txt > total.txt"
    inputs: [nums.txt]
    outputs: [total.txt]
  - name: sum
    command: |
      awk '{{s += $1}} END {{printf "%.0f\\n", s}}' nums.txt > sum.txt
    inputs: [nums.txt]
    outputs: [sum.txt]
  - name: report
    command: "echo $(cat total.txt) $(cat sum.txt) > report.txt"
    inputs: [total.txt, sum.txt]
    outputs: [report.txt]
"""


def tomus_cmd(addr: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, TOMUS_ADDR=addr)
    return subprocess.Popen(
        [sys.executable, "-m", "tomus", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


def run_cli(addr: str, *args: str, timeout: float = 120) -> tuple[int, str, str]:
    p = tomus_cmd(addr, *args)
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def fetch_text(client: tomus.Client, path: str, tmp: Path) -> str:
    dest = tmp / f"got-{uuid.uuid4().hex}"
    workflow.fetch(client, path, dest)
    return dest.read_text().strip()


def test_diamond_yaml_runs_and_answers(client: tomus.Client, tmp_path: Path) -> None:
    d = f"/wf/diamond-{uuid.uuid4().hex[:8]}"
    wf = tmp_path / "wf.yaml"
    wf.write_text(DIAMOND.format(dir=d))
    rc, out, err = run_cli(client.addr, "workflow", "run", str(wf), "--workers", "2", "--json")
    assert rc == 0, err
    report = json.loads(out)
    assert set(report["tasks"]) == {"gen", "count", "sum", "report"}
    assert fetch_text(client, f"{d}/report.txt", tmp_path) == "100000 5000050000"
    # Every transfer says which module ran and why; nums.txt is small: memory.
    transfers = [t for task in report["tasks"].values() for t in task["transfers"]]
    assert len(transfers) == 4
    assert all(t["module"] == "memory" and t["reason"] for t in transfers)
    assert report["bytes_per_module"]["memory"] == 2 * 588895 + 7 + 11
    rc, out, _ = run_cli(client.addr, "workflow", "status", str(wf))
    assert rc == 0 and out.split() == [
        "done",
        "gen",
        "done",
        "count",
        "done",
        "sum",
        "done",
        "report",
    ]
    # A second run has nothing left to do.
    rc, out, err = run_cli(client.addr, "workflow", "run", str(wf), "--workers", "1", "--json")
    assert rc == 0, err
    assert sorted(json.loads(out)["skipped"]) == ["count", "gen", "report", "sum"]


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        (
            [{"name": "a", "command": "true", "inputs": ["x"], "outputs": ["y"]}],
            "task 'a' reads 'x', which no task produces",
        ),
        (
            [
                {"name": "a", "command": "true", "outputs": ["x"]},
                {"name": "b", "command": "true", "outputs": ["x"]},
            ],
            "produced by two tasks: 'a' and 'b'",
        ),
        (
            [
                {"name": "a", "command": "true", "inputs": ["y"], "outputs": ["x"]},
                {"name": "b", "command": "true", "inputs": ["x"], "outputs": ["y"]},
            ],
            "cycle between tasks",
        ),
    ],
)
def test_invalid_workflows_fail_before_running(
    client: tomus.Client, tmp_path: Path, tasks: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(WorkflowError, match=message):
        Workflow.from_dict({"name": "bad", "dir": "/wf/bad", "tasks": tasks}).validate()
    import yaml

    wf = tmp_path / "bad.yaml"
    wf.write_text(yaml.safe_dump({"name": "bad", "dir": "/wf/bad", "tasks": tasks}))
    rc, _, err = run_cli(client.addr, "workflow", "run", str(wf))
    assert rc == 2 and message in err


def square_numbers(task_dir: Path) -> None:
    nums = [int(x) for x in (task_dir / "nums.txt").read_text().split()]
    (task_dir / "squares.txt").write_text(str(sum(n * n for n in nums)))


def test_python_tasks_and_broadcast(client: tomus.Client, tmp_path: Path) -> None:
    wf = Workflow("py", f"/wf/py-{uuid.uuid4().hex[:8]}")
    wf.task("gen", "seq 1 1000 > nums.txt", outputs=["nums.txt"])
    # A 20 MiB file read by 3 tasks: large, so direct or swarm (not memory).
    wf.task("big", "head -c 20971520 /dev/zero > big.bin", outputs=["big.bin"])
    for i in range(3):
        wf.task(
            f"read{i}", f"wc -c < big.bin > n{i}.txt", inputs=["big.bin"], outputs=[f"n{i}.txt"]
        )
    wf.task("sq", fn=square_numbers, inputs=["nums.txt"], outputs=["squares.txt"])
    report = workflow.run(wf, client, n_workers=2, progress=False, replication=CostModel())
    assert fetch_text(client, wf.path_of("squares.txt"), tmp_path) == str(
        sum(n * n for n in range(1, 1001))
    )
    for i in range(3):
        assert fetch_text(client, wf.path_of(f"n{i}.txt"), tmp_path) == "20971520"
    modules = {t["file"].rsplit("/", 1)[1]: t["module"] for t in report.transfers}
    assert modules["nums.txt"] == "memory"
    assert modules["big.bin"] in ("direct", "swarm")
    assert report.bytes_per_module().get("memory") == len("\n".join(map(str, range(1, 1001)))) + 1
    # The replication agent added holders of the file 3 tasks read.
    assert report.replicas and all(f == wf.path_of("big.bin") for f, _ in report.replicas)
    holders = workflow.registered(client, wf.path_of("big.bin"))["holders"]
    assert len(holders) >= 2
    assert report.makespan > 0 and all(t["seconds"] > 0 for t in report.tasks.values())


def test_driver_killed_resumes_without_rerunning(client: tomus.Client, tmp_path: Path) -> None:
    d = f"/wf/resume-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "gen-runs"
    delay = tmp_path / "delay"
    delay.write_text("60")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"""
name: resume
dir: {d}
tasks:
  - name: gen
    command: "echo run >> {marker}; seq 1 1000 > a.txt"
    outputs: [a.txt]
  - name: slow
    command: "sleep $(cat {delay}); wc -l < a.txt > n.txt"
    inputs: [a.txt]
    outputs: [n.txt]
""")
    p = tomus_cmd(client.addr, "workflow", "run", str(wf), "--workers", "1", start_new_session=True)
    deadline = time.time() + 90
    while True:
        try:
            workflow.registered(client, f"{d}/a.txt")
            break
        except tomus.NotFound:
            assert time.time() < deadline and p.poll() is None, "gen never finished"
            time.sleep(0.1)
    time.sleep(0.5)  # slow is running now
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    delay.write_text("0")
    rc, out, err = run_cli(client.addr, "workflow", "run", str(wf), "--workers", "1", "--json")
    assert rc == 0, err
    report = json.loads(out)
    assert report["skipped"] == ["gen"] and list(report["tasks"]) == ["slow"]
    assert marker.read_text().splitlines() == ["run"], "gen ran again"
    assert fetch_text(client, f"{d}/n.txt", tmp_path) == "1000"


def test_a_task_dir_is_made_when_another_run_removes_the_root_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tomus.workflow import scratch

    root = tmp_path / "tomus-workflow-x"
    make_dir = tempfile.mkdtemp
    raced: list[bool] = []

    def racing(prefix: str, dir: Path) -> str:
        if not raced:  # another run of the workflow ends now and removes the empty root
            raced.append(True)
            os.rmdir(root)
        return make_dir(prefix=prefix, dir=dir)

    monkeypatch.setattr(scratch.tempfile, "mkdtemp", racing)
    made = scratch.make_dir_under(root, "t-")
    assert raced and made.parent == root and made.is_dir() and made.name.startswith("t-")
