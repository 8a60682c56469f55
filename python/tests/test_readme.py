"""The README examples, run as written: a README that promises what the code does not do fails
here.

Every fenced block right after the marker line ``<!-- example: run by
python/tests/test_readme.py -->`` runs. Python blocks run one by one in a fresh namespace (each
starts its own cluster). The shell blocks of one file run in order as one script, since later
ones use the cluster the first one starts, with three adjustments a person at a terminal makes
without noticing: the `cargo build` line is left out (the package's own `tomus` is first on
PATH), the manager's default address is swapped for a free port, and the script waits for the
manager to answer after starting it in the background.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- example: run by python/tests/test_readme.py -->"
FENCE = re.compile(r"```(\w+)\n(.*?)^```", re.S | re.M)
DEFAULT_ADDR = "127.0.0.1:7070"


def examples(document: Path, language: str) -> list[str]:
    """The marked blocks of `language` in `document`, in order."""
    blocks = []
    for part in document.read_text(encoding="utf-8").split(MARKER)[1:]:
        m = FENCE.match(part.lstrip("\n"))
        assert m, f"{document.name}: the example marker must be followed by a fenced block"
        if m.group(1) == language:
            blocks.append(m.group(2))
    return blocks


def run_python(code: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(cwd)
    # Run as a script is: its `if __name__ == "__main__":` part runs.
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


def test_top_readme_python_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (block,) = examples(ROOT / "README.md", "python")
    ns = run_python(block, tmp_path, monkeypatch)
    # pyarrow read the file pandas wrote through tomus://, given the file system.
    assert ns["table"].column("x").to_pylist() == [1, 2]
    assert ns["out"][-1] == (1 << 20) - 1


def test_package_readme_python_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = examples(ROOT / "python" / "README.md", "python")
    assert len(blocks) == 3, "python/README.md lost an example marker"
    (tmp_path / "local.bin").write_bytes(os.urandom(100_000))  # the workflow example's input
    # The blob example, the data services example, the workflow example.
    blob_example, _, workflow_example = (run_python(b, tmp_path, monkeypatch) for b in blocks)
    assert blob_example["out"][-1] == 999
    # The workflow ran both tasks, sq read gen's output, and the registered file came back.
    report = workflow_example["report"]
    assert sorted(report.tasks) == ["gen", "sq"]
    assert report.tasks["sq"]["transfers"][0]["file"] == "/wf/py/nums.txt"
    assert (tmp_path / "copy.bin").read_bytes() == (tmp_path / "local.bin").read_bytes()


def free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def shell_script(blocks: list[str], addr: str) -> str:
    lines = []
    for block in blocks:
        for line in block.replace(DEFAULT_ADDR, addr).splitlines():
            if line.startswith("cargo build"):
                continue
            lines.append(line)
            if re.search(r"^tomus up\b.*&\s*(#.*)?$", line):
                lines.append(
                    f"for _ in $(seq 300); do TOMUS_ADDR={addr} tomus status >/dev/null 2>&1"
                    " && break; sleep 0.2; done"
                )
    # The cluster started in the background stops with the script.
    return "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + "\n".join(lines)


def test_top_readme_shell_examples(tmp_path: Path) -> None:
    blocks = examples(ROOT / "README.md", "sh")
    assert len(blocks) >= 2, "README.md lost its shell example markers"
    # The local inputs the examples name.
    (tmp_path / "input.bin").write_bytes(os.urandom(3 << 20))
    (tmp_path / "more.bin").write_bytes(b"appended bytes\n")
    (tmp_path / "results.csv").write_text("x,y\n1,2\n")
    (tmp_path / "part.log").write_text("a log line\n")
    (tmp_path / "out" / "sub").mkdir(parents=True)
    (tmp_path / "out" / "a.csv").write_text("a\n")
    (tmp_path / "out" / "sub" / "b.csv").write_text("b\n")
    addr = free_addr()
    script = shell_script(blocks, addr)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["TOMUS_ADDR"] = addr
    r = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, timeout=300
    )
    out = r.stdout.decode(errors="replace")
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, f"{script}\n--- stdout\n{out}\n--- stderr\n{err}"
    # What the examples say they do: the version read back is the bytes written, the files
    # fetched are the files put.
    assert (tmp_path / "v1.bin").read_bytes() == (tmp_path / "input.bin").read_bytes()
    assert (tmp_path / "copy.csv").read_text() == "x,y\n1,2\n"
    assert (tmp_path / "r2-copy" / "sub" / "b.csv").read_text() == "b\n"
