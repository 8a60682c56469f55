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


def test_config_file_sets_flags_and_the_command_line_wins(tmp_path: Path) -> None:
    config = tmp_path / "tomus.toml"
    data = tmp_path / "from-file"
    config.write_text(
        '[global]\nlog_format = "json"\n'
        f'[manager]\ndata = "{data}"\nhttp-addr = "127.0.0.1:1"\nno_gc = true\n'
    )
    show = ["config", "show", "manager", "--http-addr", "127.0.0.1:2"]
    r = subprocess.run(
        [sys.executable, "-m", "tomus", "--config", str(config), *show],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    shown = r.stdout.decode()
    assert f'data = "{data}"  # file' in shown
    assert 'http-addr = "127.0.0.1:2"  # command line' in shown
    assert "no-gc = true  # file" in shown
    assert 'log-format = "json"  # file' in shown
    assert "writer-lease-ms = 10000  # default" in shown
    assert "# secret-file (not set)" in shown
    # The server runs with it: its state goes where the file says, its logs are JSON.
    log = tmp_path / "manager.log"
    args = [
        "--config",
        str(config),
        "--addr",
        "127.0.0.1:0",
        "manager",
        "--http-addr",
        "127.0.0.1:0",
    ]
    proc = start(args, log)
    try:
        wait_listening(proc, log)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert data.is_dir()
    assert json_lines(log.read_text())
    config.write_text("[manager]\nno_such_flag = 1\n")
    r = subprocess.run(
        [sys.executable, "-m", "tomus", "--config", str(config), "manager"],
        capture_output=True,
        timeout=30,
    )
    assert r.returncode != 0
    assert b"--no-such-flag" in r.stderr
