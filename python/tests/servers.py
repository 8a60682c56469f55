"""Servers started one by one as ``python -m tomus manager|provider`` processes, for tests that
pass them flags ``tomus up`` does not (HTTP and metrics addresses), and HTTP helpers to read
what they serve."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def free_port() -> int:
    """A port free on loopback now (the kernel picks it; the server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Starts ``python -m tomus ARGS`` with its output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tomus", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )


def wait_listening(proc: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> str:
    """The address a server printed as ``tomus ROLE listening on ADDR``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if " listening on " in line and line.startswith("tomus "):
                return line.rsplit(" ", 1)[1]
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}): {log.read_text()}")
        time.sleep(0.05)
    raise TimeoutError(f"server not listening after {timeout}s: {log.read_text()}")


def http_get(url: str, auth: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    """GET ``url``: status, body and headers (names in lower case; errors are answers too).
    ``auth``: the Authorization header."""
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}


def basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"anyone:{password}".encode()).decode()


def scrape(
    http: str, auth: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` of the server at ``http`` (host:port), parsed by the Prometheus client's
    OpenMetrics parser: sample name and sorted labels -> value."""
    status, body, headers = http_get(f"http://{http}/metrics", auth)
    assert status == 200, body
    assert headers["content-type"].startswith("application/openmetrics-text")
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """One sample's value (0 when absent: a labelled series appears with its first event)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, ls), v in samples.items()
        if n == name and all((k, want) in ls for k, want in labels.items())
    )


@dataclass
class Cluster:
    """A manager with its HTTP server and providers with their metrics servers."""

    addr: str
    http: str
    provider_metrics: list[str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)


@contextmanager
def cluster(
    root: Path,
    providers: int,
    env: dict[str, str] | None = None,
    manager_args: list[str] | None = None,
    http_host: str = "127.0.0.1",
) -> Iterator[Cluster]:
    """``http_host``: where the manager's HTTP server listens (``Cluster.http`` is still its
    loopback address, for requests)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        http = f"127.0.0.1:{port}"
        log = root / "manager.log"
        manager = start(
            [
                "--addr",
                "127.0.0.1:0",
                "manager",
                "--data",
                str(root / "manager"),
                "--http-addr",
                f"{http_host}:{port}",
                "--maintenance-interval-ms",
                "200",
                *(manager_args or []),
            ],
            log,
            env,
        )
        procs.append(manager)
        addr = wait_listening(manager, log)
        metrics = []
        for i in range(providers):
            m = f"127.0.0.1:{free_port()}"
            log = root / f"provider-{i}.log"
            p = start(
                [
                    "--addr",
                    "127.0.0.1:0",
                    "provider",
                    "--manager",
                    addr,
                    "--data",
                    str(root / f"provider-{i}"),
                    "--no-fsync",
                    "--heartbeat-ms",
                    "200",
                    "--metrics-addr",
                    m,
                ],
                log,
                env,
            )
            procs.append(p)
            wait_listening(p, log)
            metrics.append(m)
        yield Cluster(addr, http, metrics, procs)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
