"""Structured logs: ``--log-format json`` writes one JSON object per line, ``--log-level``
filters, and ``tomus up`` hands both to the servers it starts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from servers import start, wait_listening

import tomus


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


def request_ids(line: dict[str, object]) -> set[str]:
    """The request ids of a JSON log line: its span's and those of the spans around it."""
    spans = [line.get("span"), *(line.get("spans") or [])]  # type: ignore[list-item]
    return {str(s["request_id"]) for s in spans if isinstance(s, dict) and "request_id" in s}


def served_under(
    data: Path, rid: str, done: Callable[[dict[str, set[str]]], bool]
) -> dict[str, set[str]]:
    """The kinds of requests each server (``manager``, ``provider-N``) logged as ``served``
    under request id ``rid``, once ``done`` says they are all there (their log files may lag a
    moment behind the answers) or after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        served: dict[str, set[str]] = {}
        for f in sorted((data / "logs").glob("*.log")):
            served[f.stem] = {
                str(x["fields"]["kind"])  # type: ignore[index]
                for x in json_lines(f.read_text(errors="replace"))
                if rid in request_ids(x) and x["fields"].get("message") == "served"  # type: ignore[union-attr]
            }
        if done(served) or time.monotonic() > deadline:
            return served
        time.sleep(0.2)


def by_providers(served: dict[str, set[str]]) -> set[str]:
    """The kinds served by any provider."""
    return set().union(*(v for k, v in served.items() if k.startswith("provider")))


def test_one_request_id_follows_a_write_and_a_read_through_client_manager_and_provider(
    tmp_path: Path,
) -> None:
    log = tmp_path / "up.log"
    data = tmp_path / "data"
    up = [
        "--addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug",
        "up", "--providers", "2", "--data", str(data), "--no-fsync",
    ]  # fmt: skip
    proc = start(up, log)
    try:
        addr = wait_listening(proc, log)
        src = tmp_path / "f.bin"
        content = bytes(range(256)) * 40
        src.write_bytes(content)
        cli = [sys.executable, "-m", "tomus", "--addr", addr, "--log-format", "json"]
        put = [*cli, "--log-level", "debug", "fs", "put", str(src), "traced/f.bin"]
        r = subprocess.run(put, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        client = json_lines(r.stderr.decode())
        committed = [x for x in client if x["fields"]["message"] == "committed"]  # type: ignore[index]
        assert len(committed) == 1, client
        ids = request_ids(committed[0])
        assert len(ids) == 1
        rid = ids.pop()
        assert len(rid) == 16 and int(rid, 16) > 0
        # A small file: its chunk and its metadata go to the providers in one request.
        served = served_under(
            data, rid, lambda s: "PutSmallWrite" in by_providers(s) and "Assign" in s["manager"]
        )
        assert "Assign" in served["manager"] and "FsCreateRetained" in served["manager"], served
        assert "PutSmallWrite" in by_providers(served), served

        # A read is followed the same way: the client's line of the read, the manager's
        # lookups and the providers' GetChunk all carry one id, another than the write's.
        cat = [*cli, "--log-level", "debug", "fs", "cat", "traced/f.bin"]
        r = subprocess.run(cat, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout == content
        reads = [x for x in json_lines(r.stderr.decode()) if x["fields"]["message"] == "read"]  # type: ignore[index]
        assert len(reads) == 1, r.stderr
        assert reads[0]["fields"]["bytes"] == len(content)  # type: ignore[index]
        ids = request_ids(reads[0])
        assert len(ids) == 1 and rid not in ids
        read_id = ids.pop()
        served = served_under(data, read_id, lambda s: "GetChunk" in by_providers(s))
        assert "GetChunk" in by_providers(served), served
        assert "FsStat" in served["manager"], served
        assert not {"PutChunk", "PutSmallWrite"} & by_providers(served), served

        # A read from Python gets an id of its own without the caller setting one: the
        # manager's GetVersion and the providers' GetChunk of that read share it.
        c = tomus.connect(addr)
        _, blob = c.namespace().open("traced/f.bin")
        assert blob.read(100, 1000) == content[100:1100]

        def python_read() -> str | None:
            for f in sorted((data / "logs").glob("provider*.log")):
                for x in json_lines(f.read_text(errors="replace")):
                    fields = x["fields"]
                    if fields.get("message") == "served" and fields.get("kind") == "GetChunk":  # type: ignore[union-attr]
                        for i in request_ids(x) - {read_id}:
                            return i
            return None

        deadline = time.monotonic() + 10
        while (py_id := python_read()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert py_id is not None
        served = served_under(data, py_id, lambda s: "GetVersion" in s["manager"])
        assert "GetVersion" in served["manager"], served

        # Another command is another operation: another id; the text format shows it too.
        text = [a if a != "json" else "text" for a in put]
        r = subprocess.run(text, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        seen = set(re.findall(r"request\{request_id=([0-9a-f]{16})\}", r.stderr.decode()))
        assert len(seen) == 1 and rid not in seen, r.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=15)
