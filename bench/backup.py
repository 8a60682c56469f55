"""Backup and restore throughput, and the backup's overhead on foreground writes.

Starts two clusters in one run: a target (``tomus up --s3``, the project's own S3 gateway) and
a source whose manager backs up to ``s3://backup/bench`` through it. Then measures:
  backup.full_mib_s        the first point of a DATA-MiB dataset, unthrottled (logical MiB/s)
  backup.incremental_s     a second point after appending 1 MiB to one file (seconds; bytes)
  foreground.*_mib_s       ``tomus bench --scenarios s3s4`` S3 write throughput (N writers,
                           each its own blob) alone, during an unthrottled point and during a
                           point throttled to --rate; overhead = 1 - during / alone
  restore.mib_s            ``tomus backup restore --data`` of the first point (logical MiB/s)
Medians of --runs runs where it repeats. Prints JSON; --out writes it too.

    cargo build --release -p tomus-cli
    python3 bench/backup.py [--tomus target/release/tomus] [--data-mib 512] [--rate 64MiB/s]
        [--clients 4] [--runs 3] [--out bench/results/backup.json]

Not a test: it takes minutes and wants the machine to itself.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACCESS, SECRET = "bench-access", "bench-secret-key"
MIB = 1 << 20


def free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def wait_for(addr: str, timeout: float = 60.0) -> None:
    host, port = addr.split(":")
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing serves on {addr}")


class Bench:
    def __init__(self, tomus: str, scratch: Path, env: dict[str, str]) -> None:
        self.tomus = tomus
        self.scratch = scratch
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def run(self, addr: str, *args: str) -> str:
        out = subprocess.run(
            [self.tomus, "--addr", addr, *args],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def up(self, name: str, providers: int, extra: list[str]) -> str:
        addr = free_addr()
        with open(self.scratch / f"{name}.log", "wb") as log:
            p = subprocess.Popen(
                [
                    self.tomus,
                    "up",
                    "--addr",
                    addr,
                    "--providers",
                    str(providers),
                    "--data",
                    str(self.scratch / name),
                    *extra,
                ],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(p)
        wait_for(addr)
        time.sleep(1.0)
        return addr

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def fill(b: Bench, addr: str, prefix: str, mib: int) -> None:
    """Writes `mib` MiB as 32 MiB files under `prefix`."""
    local = b.scratch / "block.bin"
    per = 32
    local.write_bytes(os.urandom(per * MIB))
    for i in range(max(1, mib // per)):
        b.run(addr, "fs", "put", str(local), f"{prefix}/f{i}")


def point(b: Bench, addr: str) -> tuple[float, dict]:
    start = time.perf_counter()
    st = json.loads(
        b.run(addr, "--json", "backup", "now", "--wait", "--timeout", "3600")
    )
    return time.perf_counter() - start, st


def points(b: Bench, addr: str) -> list[dict]:
    return json.loads(b.run(addr, "--json", "backup", "list"))


def s3_write(b: Bench, addr: str, clients: int) -> float:
    """S3 write MiB/s of `tomus bench` (N writers, each its own blob) on the cluster."""
    out = json.loads(
        b.run(
            addr,
            "bench",
            "--cluster",
            addr,
            "--scenarios",
            "s3s4",
            "--clients",
            str(clients),
            "--runs",
            "1",
            "--per-client",
            "64MiB",
        )
    )
    return find_s3(out)


def find_s3(doc: dict) -> float:
    """The S3 write throughput in `tomus bench` JSON: {"s3": {"write": [{"median": ...}]}}."""
    return float(doc["s3"]["write"][0]["median"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tomus", default=str(ROOT / "target/release/tomus"))
    ap.add_argument("--data-mib", type=int, default=512)
    ap.add_argument("--rate", default="64MiB/s")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="tomus-bench-backup-"))
    env = dict(os.environ, TOMUS_S3_ACCESS_KEY=ACCESS, TOMUS_S3_SECRET_KEY=SECRET)
    b = Bench(a.tomus, scratch, env)
    try:
        s3 = free_addr()
        target = b.up("target", 2, ["--s3", s3])
        wait_for(s3)
        b.run(target, "fs", "mkdir", "/backup")
        b.env = dict(
            env,
            AWS_ACCESS_KEY_ID=ACCESS,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_REGION="us-east-1",
            AWS_ENDPOINT_URL=f"http://{s3}",
        )
        url = "s3://backup/bench"
        src = b.up("source", 4, [])
        fill(b, src, "/data", a.data_mib)
        b.run(src, "backup", "enable", "--target", url, "--rate", "0")
        secs, _ = point(b, src)
        first = points(b, src)[-1]
        full = first["logical_bytes"] / MIB / secs

        one = scratch / "one.bin"
        one.write_bytes(os.urandom(MIB))
        b.run(src, "fs", "put", str(one), "/data/small")
        inc_secs, _ = point(b, src)
        inc = points(b, src)[-1]

        # Foreground writes alone, during an unthrottled point, during a throttled one.
        fg: dict[str, list[float]] = {"alone": [], "unthrottled": [], "throttled": []}
        for run in range(a.runs):
            fg["alone"].append(s3_write(b, src, a.clients))
            for mode, rate in (("unthrottled", "0"), ("throttled", a.rate)):
                b.run(src, "backup", "enable", "--target", url, "--rate", rate)
                fill(b, src, f"/more-{mode}-{run}", 256)
                b.run(src, "backup", "now")
                time.sleep(0.5)
                fg[mode].append(s3_write(b, src, a.clients))
                point(b, src)
        med = {k: statistics.median(v) for k, v in fg.items()}

        start = time.perf_counter()
        subprocess.run(
            [
                a.tomus,
                "backup",
                "restore",
                "--target",
                url,
                "--at",
                first["point"],
                "--data",
                str(scratch / "restored"),
                "--providers",
                "4",
            ],
            env=b.env,
            check=True,
            capture_output=True,
        )
        restore_secs = time.perf_counter() - start
        result = {
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "binary": a.tomus,
            },
            "dataset_mib": a.data_mib,
            "backup": {
                "full_seconds": secs,
                "full_mib_s": full,
                "full_uploaded_bytes": first["uploaded_bytes"],
                "incremental_seconds": inc_secs,
                "incremental_uploaded_bytes": inc["uploaded_bytes"],
            },
            "foreground": {
                "clients": a.clients,
                "runs": fg,
                "alone_mib_s": med["alone"],
                "during_unthrottled_mib_s": med["unthrottled"],
                "during_throttled_mib_s": med["throttled"],
                "rate": a.rate,
                "overhead_unthrottled": 1 - med["unthrottled"] / med["alone"],
                "overhead_throttled": 1 - med["throttled"] / med["alone"],
            },
            "restore": {
                "seconds": restore_secs,
                "mib_s": first["logical_bytes"] / MIB / restore_secs,
            },
        }
        text = json.dumps(result, indent=2)
        print(text)
        if a.out:
            Path(a.out).write_text(text + "\n")
    finally:
        b.stop()


if __name__ == "__main__":
    sys.exit(main())
