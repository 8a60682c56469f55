"""S3 gateway throughput next to the native Rust client, on one cluster, in one run.

Starts ``tomus up --s3`` (release build), then measures from P processes (default 8):
  s3.put_mib_s / s3.get_mib_s      boto3 PutObject / GetObject of one large object each
                                   (default 128 MiB), aggregate MiB/s
  s3.put_4k_ops_s / s3.get_4k_ops_s  boto3 4 KiB PutObject / GetObject, aggregate ops/s
  s3.head_bucket_ops_s             boto3 HeadBucket (answered from the gateway's cache): what
                                   boto3 and HTTP alone allow here, the ceiling of the above
and, on the same cluster in the same run, the native client doing the same operations
through the namespace (``tomus bench --cluster ADDR --scenarios objects --clients P``: one
process, P concurrent tasks). Prints JSON with both and the S3/native ratios.

    cargo build --release -p tomus-cli
    python3 -m venv bench/.venv && bench/.venv/bin/pip install boto3
    bench/.venv/bin/python bench/s3.py [--processes 8] [--object-mib 128] [--small-ops 250]
        [--providers 4] [--no-fsync] [--out bench/results/s3.json]

Not a test: it takes a minute or two and wants the machine to itself.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACCESS, SECRET = "bench-access", "bench-secret"
BUCKET = "bench"
MIB = 1 << 20


def client(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=f"http://{endpoint}",
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            # Only the checksums S3 requires: the gateway is measured, not the client's CRCs.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=4,
        ),
    )


def worker(phase: str, index: int, endpoint: str, args, barrier, results) -> None:
    """One process of one phase: prepares, waits for the others, runs, reports its times."""
    s3 = client(endpoint)
    big = f"big/{index}"
    small = f"small/{index}"
    payload = os.urandom(args.object_mib * MIB) if phase == "put_big" else None
    tiny = os.urandom(4096)
    s3.head_bucket(Bucket=BUCKET)  # connect before the clock starts
    barrier.wait()
    start = time.monotonic()
    moved = 0
    if phase == "put_big":
        s3.put_object(Bucket=BUCKET, Key=big, Body=payload)
        moved = len(payload)
    elif phase == "get_big":
        body = s3.get_object(Bucket=BUCKET, Key=big)["Body"]
        while chunk := body.read(4 * MIB):
            moved += len(chunk)
    elif phase == "put_small":
        for k in range(args.small_ops):
            s3.put_object(Bucket=BUCKET, Key=f"{small}/{k}", Body=tiny)
        moved = args.small_ops
    elif phase == "head_bucket":
        for _ in range(args.small_ops):
            s3.head_bucket(Bucket=BUCKET)
        moved = args.small_ops
    elif phase == "get_small":
        for k in range(args.small_ops):
            moved += (
                len(s3.get_object(Bucket=BUCKET, Key=f"{small}/{k}")["Body"].read())
                // 4096
            )
    results.put((start, time.monotonic(), moved))


def run_phase(phase: str, endpoint: str, args) -> float:
    """Runs `phase` in every process at once; returns units moved per second (aggregate)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(phase, i, endpoint, args, barrier, results))
        for i in range(args.processes)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"{phase}: a worker failed (exit {p.exitcode})")
    seconds = max(e for _, e, _ in got) - min(s for s, _, _ in got)
    moved = sum(m for _, _, m in got)
    return moved / seconds


def start_cluster(tomus: str, data: Path, args) -> tuple[subprocess.Popen, str, str]:
    cmd = [tomus, "up", "--providers", str(args.providers), "--data", str(data)]
    cmd += ["--addr", "127.0.0.1:0", "--s3", "127.0.0.1:0"]
    if args.no_fsync:
        cmd.append("--no-fsync")
    env = {**os.environ, "TOMUS_S3_ACCESS_KEY": ACCESS, "TOMUS_S3_SECRET_KEY": SECRET}
    log = open(data.parent / "up.log", "wb")  # noqa: SIM115 - lives as long as the cluster
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line.decode().strip())

    threading.Thread(target=read, daemon=True).start()
    manager = endpoint = None
    while endpoint is None:
        line = lines.get(timeout=60)
        if line.startswith("tomus cluster listening on"):
            manager = line.rsplit(" ", 1)[1]
        elif line.startswith("tomus s3 listening on"):
            endpoint = line.rsplit(" ", 1)[1]
    return proc, manager, endpoint


def native(tomus: str, manager: str, args) -> dict:
    cmd = [tomus, "bench", "--cluster", manager, "--scenarios", "objects"]
    cmd += ["--clients", str(args.processes), "--runs", "1"]
    cmd += [
        "--object-size",
        f"{args.object_mib}MiB",
        "--small-ops",
        str(args.small_ops),
    ]
    out = subprocess.run(cmd, capture_output=True, check=True).stdout
    return json.loads(out)["objects"]["points"][0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tomus", default=str(ROOT / "target" / "release" / "tomus"))
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--object-mib", type=int, default=128)
    ap.add_argument("--small-ops", type=int, default=250, help="4 KiB ops per process")
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not Path(args.tomus).exists():
        sys.exit(f"{args.tomus} missing: cargo build --release -p tomus-cli")
    with tempfile.TemporaryDirectory(prefix="tomus-s3-bench-") as tmp:
        proc, manager, endpoint = start_cluster(args.tomus, Path(tmp) / "data", args)
        try:
            client(endpoint).create_bucket(Bucket=BUCKET)
            s3 = {
                "put_mib_s": run_phase("put_big", endpoint, args) / MIB,
                "get_mib_s": run_phase("get_big", endpoint, args) / MIB,
                "put_4k_ops_s": run_phase("put_small", endpoint, args),
                "get_4k_ops_s": run_phase("get_small", endpoint, args),
                "head_bucket_ops_s": run_phase("head_bucket", endpoint, args),
            }
            rust = native(args.tomus, manager, args)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    keys = ["put_mib_s", "get_mib_s", "put_4k_ops_s", "get_4k_ops_s"]
    report = {
        "config": {
            "processes": args.processes,
            "object_mib": args.object_mib,
            "small_ops_per_process": args.small_ops,
            "providers": args.providers,
            "fsync": not args.no_fsync,
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "s3_boto3": s3,
        "native_rust": {k: rust[k] for k in keys},
        "ratio_s3_to_native": {k: s3[k] / rust[k] for k in keys},
    }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
