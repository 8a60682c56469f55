"""Appends to one object through the S3 gateway from P boto3 processes: S3 Express offset
appends (``WriteOffsetBytes``) under contention, next to ``x-tomus-append`` (the store picks
the offset, so appenders never conflict).

Each process appends ``--appends`` records of ``--record-kib`` to the object ``log``; in the
offset mode it sends the size it believes the object has, and on ``InvalidWriteOffset`` asks
for the size again (HeadObject, as an S3 Express client does) and retries. Bodies are file
objects, as ``upload_fileobj`` and the AWS CLI send them, so boto3 asks ``Expect:
100-continue`` and a request refused before its body is read costs no upload. Reported per
binary (``--binary NAME=PATH``, several to compare builds side by side, alternating round by
round): appended MiB/s, conflicts per successful append, the median time to answer a refused
append, and the gateway's CPU seconds (process and children, from /proc) per appended MiB.
The content is checked after every run: each record exactly once, none torn. MinIO does not
implement offset appends, so there is no peer here.

    cargo build --release -p tomus-cli
    bench/.venv/bin/python bench/s3_appends.py [--processes 8] [--appends 32]
        [--record-kib 1024] [--rounds 3] [--binary before=/tmp/tomus-old]
        [--out bench/results/s3-appends.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3 as common  # the sibling benchmark's servers and clients
from s3_cpu import cpu_seconds

KEY = "log"
MODES = ["offset", "tomus_append"]


def record(proc: int, seq: int, size: int) -> bytes:
    """A record that names its writer and number and can be recognised in the content."""
    head = f"<p{proc:03d} s{seq:05d}>".encode()
    return head + bytes([65 + (proc + seq) % 26]) * (size - 2 * len(head)) + head


def appender(mode: str, index: int, endpoint: str, args, barrier, results) -> None:
    s3 = common.client(endpoint)
    if mode == "tomus_append":

        def add_header(request, **_) -> None:
            request.headers["x-tomus-append"] = "true"

        s3.meta.events.register("before-sign.s3.PutObject", add_header)
    size_of = args.record_kib * 1024
    s3.head_bucket(Bucket=common.BUCKET)
    barrier.wait()
    start = time.monotonic()
    believed = 0
    refusals: list[float] = []
    for seq in range(args.appends):
        body = record(index, seq, size_of)
        while True:
            t0 = time.monotonic()
            try:
                extra = {} if mode == "tomus_append" else {"WriteOffsetBytes": believed}
                s3.put_object(
                    Bucket=common.BUCKET, Key=KEY, Body=io.BytesIO(body), **extra
                )
                believed += size_of
                break
            except s3.exceptions.ClientError as e:
                if e.response["Error"]["Code"] != "InvalidWriteOffset":
                    raise
                refusals.append(time.monotonic() - t0)
                believed = s3.head_object(Bucket=common.BUCKET, Key=KEY)[
                    "ContentLength"
                ]
    results.put((start, time.monotonic(), refusals))


def run(mode: str, endpoint: str, args) -> dict:
    s3 = common.client(endpoint)
    s3.put_object(Bucket=common.BUCKET, Key=KEY, Body=b"")
    got = common.run_processes(appender, mode, endpoint, args, timeout=1800)
    seconds = max(e for _, e, _ in got) - min(s for s, _, _ in got)
    refusals = [r for _, _, rs in got for r in rs]
    check(s3.get_object(Bucket=common.BUCKET, Key=KEY)["Body"].read(), args)
    s3.delete_object(Bucket=common.BUCKET, Key=KEY)
    appended = args.processes * args.appends
    return {
        "mib_s": appended * args.record_kib / 1024 / seconds,
        "appends_s": appended / seconds,
        "conflicts_per_append": len(refusals) / appended,
        "refusal_ms_median": statistics.median(refusals) * 1e3 if refusals else None,
    }


def check(content: bytes, args) -> None:
    """Every record exactly once, whole, at a record boundary."""
    size_of = args.record_kib * 1024
    want = args.processes * args.appends
    if len(content) != want * size_of:
        raise SystemExit(f"object has {len(content)} bytes, want {want * size_of}")
    seen = set()
    for at in range(0, len(content), size_of):
        head = content[at : at + 14]
        proc, seq = int(head[2:5]), int(head[7:12])
        if content[at : at + size_of] != record(proc, seq, size_of):
            raise SystemExit(f"torn record at offset {at}")
        seen.add((proc, seq))
    if len(seen) != want:
        raise SystemExit(f"{want - len(seen)} records twice, others missing")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    ap.add_argument(
        "--binary",
        action="append",
        metavar="NAME=PATH",
        help="a tomus binary to measure (repeatable; default: this=target/release/tomus)",
    )
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--appends", type=int, default=32, help="records per process")
    ap.add_argument("--record-kib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument("--out", type=Path)
    cli = ap.parse_args()
    if cli.record_kib < 1:
        ap.error("--record-kib must be at least 1")
    binaries = dict(
        b.split("=", 1)
        for b in cli.binary or [f"this={common.ROOT / 'target/release/tomus'}"]
    )
    for name, path in binaries.items():
        if not Path(path).exists():
            sys.exit(f"{name}: {path} missing (cargo build --release -p tomus-cli)")
    runs: dict[str, dict[str, list[dict]]] = {}
    with tempfile.TemporaryDirectory(prefix="tomus-s3-appends-") as tmp:
        servers = {}
        try:
            for name, path in binaries.items():
                (Path(tmp) / name).mkdir()
                proc, _, endpoint = common.start_cluster(
                    path, Path(tmp) / name / "data", cli
                )
                servers[name] = (proc, endpoint)
                common.client(endpoint).create_bucket(Bucket=common.BUCKET)
            for _ in range(cli.rounds):
                for name, (proc, endpoint) in servers.items():
                    for mode in MODES:
                        cpu0 = cpu_seconds(proc.pid)
                        row = run(mode, endpoint, cli)
                        mib = cli.processes * cli.appends * cli.record_kib / 1024
                        row["server_cpu_s_per_mib"] = (
                            cpu_seconds(proc.pid) - cpu0
                        ) / mib
                        runs.setdefault(name, {}).setdefault(mode, []).append(row)
                        print(
                            json.dumps({"binary": name, "mode": mode, **row}),
                            flush=True,
                        )
        finally:
            for proc, _ in servers.values():
                common.stop(proc)
    median = {
        name: {
            mode: {
                k: statistics.median(r[k] for r in rows if r[k] is not None)
                if any(r[k] is not None for r in rows)
                else None
                for k in rows[0]
            }
            for mode, rows in modes.items()
        }
        for name, modes in runs.items()
    }
    result = {
        "bench": "s3-appends",
        "note": f"{cli.processes} boto3 processes x {cli.appends} appends of "
        f"{cli.record_kib} KiB to one object, binaries alternating over {cli.rounds} rounds, "
        f"fsync {'off' if cli.no_fsync else 'on'}, {cli.providers} providers; "
        f"{os.cpu_count()} cores shared by clients and servers",
        "binaries": binaries,
        "median": median,
        "runs": runs,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    text = json.dumps(result, indent=1)
    if cli.out:
        cli.out.parent.mkdir(parents=True, exist_ok=True)
        cli.out.write_text(text)
    print(json.dumps(median, indent=1))


if __name__ == "__main__":
    main()
