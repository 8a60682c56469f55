"""S3 gateway throughput next to the native Rust client and next to MinIO, in one run.

Starts ``tomus up --s3`` (release build) and, when a ``minio`` binary is found (``--minio``,
``$PATH`` or ``~/go/bin``; build it with ``go install github.com/minio/minio@latest``), a
single-drive MinIO server (it syncs every object, as tomus does with fsync on), then measures
each from P processes (default 8), the servers alternating round by round (``--rounds``,
default 3) so that the machine's noise hits both alike; medians per server:
  put_mib_s / get_mib_s        boto3 PutObject / GetObject of one large object each
                               (default 128 MiB), aggregate MiB/s
  range_get_mib_s              boto3 ranged GETs (1 MiB at random offsets) of one shared
                               object (default 1 GiB), aggregate MiB/s
  put_4k_ops_s / get_4k_ops_s  boto3 4 KiB PutObject / GetObject, aggregate ops/s
  head_bucket_ops_s            boto3 HeadBucket: what boto3 and HTTP alone allow here
and, on the tomus cluster, the native client doing the same operations through the namespace
(``tomus bench --cluster ADDR --scenarios objects --clients P``: one process, P concurrent
tasks). Prints JSON with the medians, the tomus/MinIO and S3/native ratios. Without MinIO it
says so and measures tomus alone.

    cargo build --release -p tomus-cli
    python3 -m venv bench/.venv && bench/.venv/bin/pip install boto3
    bench/.venv/bin/python bench/s3.py [--processes 8] [--object-mib 128] [--get-repeats 1]
        [--small-ops 250] [--range-object-mib 1024] [--range-ops 64] [--rounds 3]
        [--minio PATH] [--no-minio]
        [--providers 4] [--no-fsync] [--through-sockets] [--out bench/results/s3.json]

Not a test: it takes minutes and wants the machine to itself; what it writes is removed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import queue
import random
import shutil
import signal
import socket
import statistics
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
    rng = random.Random(index)
    range_size = args.range_object_mib * MIB
    s3.head_bucket(Bucket=BUCKET)  # connect before the clock starts
    barrier.wait()
    start = time.monotonic()
    moved = 0
    if phase == "put_big":
        s3.put_object(Bucket=BUCKET, Key=big, Body=payload)
        moved = len(payload)
    elif phase == "get_big":
        # The first GET reads what its PUT left (tomus's providers drop written pages from
        # the page cache, so from the disk); the ones after it read the page cache.
        for _ in range(args.get_repeats):
            body = s3.get_object(Bucket=BUCKET, Key=big)["Body"]
            while chunk := body.read(4 * MIB):
                moved += len(chunk)
    elif phase == "get_ranges":
        for _ in range(args.range_ops):
            at = rng.randrange(0, range_size - MIB)
            rng_header = f"bytes={at}-{at + MIB - 1}"
            moved += len(
                s3.get_object(Bucket=BUCKET, Key="shared", Range=rng_header)[
                    "Body"
                ].read()
            )
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


def run_processes(target, name: str, endpoint: str, args, timeout: float = 900) -> list:
    """Runs ``target(name, i, endpoint, args, barrier, results)`` in ``args.processes``
    processes at once; returns what each put on ``results``."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(name, i, endpoint, args, barrier, results))
        for i in range(args.processes)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"{name}: a worker failed (exit {p.exitcode})")
    return got


def run_phase(phase: str, endpoint: str, args) -> float:
    """Runs `phase` in every process at once; returns units moved per second (aggregate)."""
    got = run_processes(worker, phase, endpoint, args)
    seconds = max(e for _, e, _ in got) - min(s for s, _, _ in got)
    moved = sum(m for _, _, m in got)
    return moved / seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_minio(args) -> str | None:
    if args.no_minio:
        return None
    for candidate in (
        args.minio,
        shutil.which("minio"),
        str(Path.home() / "go/bin/minio"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def start_minio(minio: str, data: Path) -> tuple[subprocess.Popen, str]:
    """A single-drive MinIO server on `data` (it syncs each object, as tomus with fsync)."""
    data.mkdir(parents=True)
    endpoint = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "MINIO_ROOT_USER": ACCESS,
        "MINIO_ROOT_PASSWORD": SECRET,
        "MINIO_BROWSER": "off",
        "MINIO_UPDATE": "off",
    }
    log = open(data.parent / "minio.log", "wb")  # noqa: SIM115 - lives as long as the server
    cmd = [
        minio,
        "server",
        str(data),
        "--address",
        endpoint,
        "--console-address",
        "127.0.0.1:0",
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            client(endpoint).list_buckets()
            return proc, endpoint
        except Exception:  # noqa: BLE001 - not up yet
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"minio did not start: {(data.parent / 'minio.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)


def prepare(endpoint: str, args) -> None:
    """The bucket and the shared object the ranged GETs read."""
    s3 = client(endpoint)
    s3.create_bucket(Bucket=BUCKET)
    with tempfile.TemporaryFile() as f:
        block = os.urandom(MIB)
        for i in range(args.range_object_mib):
            f.write(i.to_bytes(8, "little") + block[8:])
        f.seek(0)
        s3.upload_fileobj(f, BUCKET, "shared")


def measure(endpoint: str, args) -> dict:
    return {
        "put_mib_s": run_phase("put_big", endpoint, args) / MIB,
        "get_mib_s": run_phase("get_big", endpoint, args) / MIB,
        "range_get_mib_s": run_phase("get_ranges", endpoint, args) / MIB,
        "put_4k_ops_s": run_phase("put_small", endpoint, args),
        "get_4k_ops_s": run_phase("get_small", endpoint, args),
        "head_bucket_ops_s": run_phase("head_bucket", endpoint, args),
    }


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_cluster(
    tomus: str, data: Path, args, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str, str]:
    cmd = [tomus, "up", "--providers", str(args.providers), "--data", str(data)]
    cmd += ["--addr", "127.0.0.1:0", "--s3", "127.0.0.1:0"]
    if args.no_fsync:
        cmd.append("--no-fsync")
    env = {**os.environ, "TOMUS_S3_ACCESS_KEY": ACCESS, "TOMUS_S3_SECRET_KEY": SECRET}
    env.update(env_extra or {})
    log = open(data.parent / f"{data.name}-up.log", "wb")  # noqa: SIM115 - lives as long as the cluster
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
    ap.add_argument(
        "--get-repeats",
        type=int,
        default=1,
        help="GETs of its large object per process (reads after the first are from memory)",
    )
    ap.add_argument("--range-object-mib", type=int, default=1024)
    ap.add_argument(
        "--range-ops", type=int, default=64, help="1 MiB ranged GETs per process"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--minio", help="the minio binary (default: $PATH, then ~/go/bin)")
    ap.add_argument("--no-minio", action="store_true", help="measure tomus alone")
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument(
        "--through-sockets",
        action="store_true",
        help="also measure a second tomus cluster whose gateway reads and writes every chunk "
        "through the providers' sockets (TOMUS_LOCAL_READS=0, TOMUS_LOCAL_WRITES=0: no "
        "short-circuit reads or writes), as server tomus_sockets",
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not Path(args.tomus).exists():
        sys.exit(f"{args.tomus} missing: cargo build --release -p tomus-cli")
    minio = find_minio(args)
    if minio is None and not args.no_minio:
        print(
            "MinIO not found (--minio PATH, or `go install github.com/minio/minio@latest`): "
            "measuring tomus alone",
            file=sys.stderr,
        )
    rounds: dict[str, list[dict]] = {"tomus": []}
    with tempfile.TemporaryDirectory(prefix="tomus-s3-bench-") as tmp:
        servers: list[tuple[str, subprocess.Popen, str]] = []
        try:
            proc, manager, endpoint = start_cluster(
                args.tomus, Path(tmp) / "data", args
            )
            servers.append(("tomus", proc, endpoint))
            if args.through_sockets:
                off = {"TOMUS_LOCAL_READS": "0", "TOMUS_LOCAL_WRITES": "0"}
                sproc, _, sendpoint = start_cluster(
                    args.tomus, Path(tmp) / "socket", args, off
                )
                servers.append(("tomus_sockets", sproc, sendpoint))
                rounds["tomus_sockets"] = []
            if minio:
                mproc, mendpoint = start_minio(minio, Path(tmp) / "minio" / "data")
                servers.append(("minio", mproc, mendpoint))
                rounds["minio"] = []
            for _, _, ep in servers:
                prepare(ep, args)
            for r in range(args.rounds):
                # Alternate which server goes first, so neither always runs on a warmer machine.
                order = servers if r % 2 == 0 else servers[::-1]
                for name, _, ep in order:
                    rounds[name].append(measure(ep, args))
                    print(f"round {r + 1} {name}: {rounds[name][-1]}", file=sys.stderr)
            rust = native(args.tomus, manager, args)
        finally:
            for _, p, _ in servers:
                stop(p)
    metrics = list(rounds["tomus"][0])
    medians = {
        name: {k: statistics.median(x[k] for x in runs) for k in metrics}
        for name, runs in rounds.items()
    }
    keys = ["put_mib_s", "get_mib_s", "put_4k_ops_s", "get_4k_ops_s"]
    report = {
        "config": {
            "processes": args.processes,
            "object_mib": args.object_mib,
            "small_ops_per_process": args.small_ops,
            "range_object_mib": args.range_object_mib,
            "range_ops_per_process": args.range_ops,
            "rounds": args.rounds,
            "providers": args.providers,
            "fsync": not args.no_fsync,
            "minio": minio,
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "rounds": rounds,
        "median": medians,
        "s3_boto3": medians["tomus"],
        "native_rust": {k: rust[k] for k in keys},
        "ratio_s3_to_native": {k: medians["tomus"][k] / rust[k] for k in keys},
    }
    for peer in ("minio", "tomus_sockets"):
        if peer in medians:
            report[f"ratio_tomus_to_{peer}"] = {
                k: medians["tomus"][k] / medians[peer][k] for k in metrics
            }
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
