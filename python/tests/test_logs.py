"""Structured logs: ``--log-format json`` writes one JSON object per line, ``--log-level``
filters, and ``tomus up`` hands both to the servers it starts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from servers import start, wait_listening


def json_lines(text: str) -> list[dict[str, object]]:
    """The JSON log lines of a server's output (its stdout line ``tomus ... listening`` is
    not a log line)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_json_logs_parse_and_carry_level_target_and_message(tmp_path: Path) -> None:
    log = tmp_path / "manager.log"
    proc = start(
        ["--addr", "127.0.0.1:0", "--log-format", "json", "manager", "--data", str(tmp_path / "m")],
        log,
    )
    try:
        wait_listening(proc, log)
        deadline = time.monotonic() + 10
        lines: list[dict[str, object]] = []
        while time.monotonic() < deadline and not lines:
            lines = json_lines(log.read_text())
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    text = log.read_text()
    # Every line but the listening announcement is a JSON object.
    others = [x for x in text.splitlines() if x and not x.startswith("{")]
    assert all(x.startswith("tomus manager listening on ") for x in others), others
    listening = [
        x
        for x in json_lines(text)
        if "manager listening on" in str(x.get("fields", {}).get("message", ""))  # type: ignore[union-attr]
    ]
    assert len(listening) == 1
    assert listening[0]["level"] == "INFO"
    assert listening[0]["target"] == "tomus_manager"
    assert str(listening[0]["timestamp"]).startswith("20")


def test_log_level_filters(tmp_path: Path) -> None:
    log = tmp_path / "manager.log"
    proc = start(
        [
            "--addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log-level",
            "warn",
            "manager",
            "--data",
            str(tmp_path / "m"),
        ],
        log,
    )
    try:
        wait_listening(proc, log)
        time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert all(x["level"] in ("WARN", "ERROR") for x in json_lines(log.read_text()))
    r = subprocess.run(
        [sys.executable, "-m", "tomus", "--log-level", "no such=level", "status"],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert b"--log-level" in r.stderr
