"""Server CPU per S3 request, tomus next to MinIO: what each request costs the server.

Why: on this 2-core machine the 8 boto3 processes of ``s3.py`` and the server share the
cores, so request rates swing 2-3x from round to round with whatever else runs. The CPU
seconds the server process (and its children) spend per request move much less, and say
what a request costs whatever the load. Same servers, clients and phases as ``s3.py``
(its functions are reused): HeadBucket, 4 KiB PutObject and 4 KiB GetObject from P
processes, the servers alternating round by round; per phase and server, the request rate
and the server's CPU microseconds per request (utime + stime from /proc, counted until the
server is idle again: ``settle``), medians. With ``--object-mib N`` (N > 0), also one N MiB
PutObject and GetObject per process (``put_big``, ``get_big``), per MiB moved. Every phase
also reports the boto3 processes' own CPU per unit (``clients_us_per_op``, from the barrier
to their last request): where it dwarfs the server's, the request rate is the clients' to
set, not the server's.

    cargo build --release -p tomus-cli
    bench/.venv/bin/python bench/s3_cpu.py [--processes 8] [--small-ops 300] [--rounds 3]
        [--object-mib 0] [--get-repeats 1] [--minio PATH] [--fresh-keys]
        [--out bench/results/s3-cpu.json]

Needs MinIO (``go install github.com/minio/minio@latest``); what it writes is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3 as common  # the sibling benchmark's servers, clients and phases

SMALL_PHASES = ["head_bucket", "put_small", "get_small"]
BIG_PHASES = ["put_big", "get_big"]


def cpu_seconds(pid: int) -> float:
    """CPU seconds of process ``pid`` and its direct children so far."""
    pids = [pid] + [int(x) for x in subprocess.run(
        ["pgrep", "-P", str(pid)], check=False, capture_output=True, text=True
    ).stdout.split()]  # fmt: skip
    total = 0.0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


#: A server is settled once it spends less than this share of a core over SETTLE_WINDOW.
SETTLE_SHARE = 0.05
SETTLE_WINDOW = 0.5
#: The longest wait for a server to settle after a phase.
SETTLE_MAX = 15.0


class _CpuFromBarrier:
    """The barrier and result queue of one ``s3.worker`` process, adding to its result the
    CPU seconds the process spent from the barrier on (not its imports and payloads)."""

    def __init__(self, barrier, results) -> None:
        self.barrier, self.results, self.at = barrier, results, 0.0

    def wait(self) -> None:
        self.barrier.wait()
        self.at = time.process_time()

    def put(self, item: tuple) -> None:
        self.results.put((*item, time.process_time() - self.at))


def cpu_worker(phase: str, index: int, endpoint: str, args, barrier, results) -> None:
    both = _CpuFromBarrier(barrier, results)
    common.worker(phase, index, endpoint, args, both, both)


def run_phase(phase: str, endpoint: str, args) -> tuple[float, float]:
    """``s3.run_phase``, also returning the CPU seconds the client processes spent."""
    got = common.run_processes(cpu_worker, phase, endpoint, args)
    seconds = max(g[1] for g in got) - min(g[0] for g in got)
    return sum(g[2] for g in got) / seconds, sum(g[3] for g in got)


def settle(pid: int) -> float:
    """Waits until the server is idle again (or SETTLE_MAX), returning the seconds waited.
    The work a phase leaves behind (tomus reclaims the versions that overwriting PUTs
    replaced in the background, seconds later) then counts for that phase, not for the one
    that happens to run next: measured without this, that work doubled the CPU charged to
    the 4 KiB GETs that followed each round of overwrites."""
    start = time.monotonic()
    last = cpu_seconds(pid)
    while time.monotonic() - start < SETTLE_MAX:
        time.sleep(SETTLE_WINDOW)
        now = cpu_seconds(pid)
        if now - last < SETTLE_SHARE * SETTLE_WINDOW:
            break
        last = now
    return time.monotonic() - start


def delete_small(endpoint: str) -> None:
    """Deletes the objects the 4 KiB phases made (not measured)."""
    s3 = common.client(endpoint)
    while True:
        listed = s3.list_objects_v2(Bucket=common.BUCKET, Prefix="small/")
        keys = [{"Key": o["Key"]} for o in listed.get("Contents", [])]
        if not keys:
            return
        s3.delete_objects(Bucket=common.BUCKET, Delete={"Objects": keys})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tomus", default=str(common.ROOT / "target" / "release" / "tomus")
    )
    ap.add_argument("--minio", default=str(Path.home() / "go" / "bin" / "minio"))
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument(
        "--small-ops", type=int, default=300, help="requests per process and phase"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--object-mib",
        type=int,
        default=0,
        help="also one PutObject and one GetObject of this many MiB per process, "
        "counted per MiB (0: the small phases only)",
    )
    ap.add_argument(
        "--get-repeats",
        type=int,
        default=1,
        help="GETs of its large object per process in get_big (the first reads what the PUT "
        "left on disk, the others the page cache)",
    )
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument(
        "--fresh-keys",
        action="store_true",
        help="delete the 4 KiB objects before every PUT phase, so that each round creates "
        "its objects (without it, rounds after the first overwrite them)",
    )
    ap.add_argument("--out", default="bench/results/s3-cpu.json")
    cli = ap.parse_args()
    if not Path(cli.minio).exists():
        raise SystemExit(
            f"no MinIO at {cli.minio}: go install github.com/minio/minio@latest"
        )
    # What s3.py's phases read from their arguments (no ranged GETs here).
    args = argparse.Namespace(
        processes=cli.processes, small_ops=cli.small_ops, object_mib=max(cli.object_mib, 1),
        get_repeats=cli.get_repeats, range_object_mib=2,
        range_ops=1, providers=cli.providers, no_fsync=False,
    )  # fmt: skip
    phases = SMALL_PHASES + (BIG_PHASES if cli.object_mib > 0 else [])
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="tomus-s3-cpu-") as tmp:
        base = Path(tmp)
        (base / "tomus").mkdir()
        tomus, _, tomus_ep = common.start_cluster(
            cli.tomus, base / "tomus" / "data", args
        )
        minio, minio_ep = common.start_minio(cli.minio, base / "minio" / "data")
        servers = {"tomus": (tomus, tomus_ep), "minio": (minio, minio_ep)}
        try:
            for _, endpoint in servers.values():
                common.prepare(endpoint, args)
            for _ in range(cli.rounds):
                for name, (proc, endpoint) in servers.items():
                    for phase in phases:
                        if phase == "put_small" and cli.fresh_keys:
                            delete_small(endpoint)
                        before = cpu_seconds(proc.pid)
                        rate, clients = run_phase(phase, endpoint, args)
                        waited = settle(proc.pid)
                        used = cpu_seconds(proc.pid) - before
                        big = phase in BIG_PHASES
                        ops = cli.processes * (cli.object_mib if big else cli.small_ops)
                        if phase == "get_big":
                            ops *= cli.get_repeats
                        row = {
                            "ops_s": rate / common.MIB if big else rate,
                            "server_us_per_op": used / ops * 1e6,
                            "clients_us_per_op": clients / ops * 1e6,
                            "settle_s": round(waited, 2),
                        }
                        runs.setdefault(name, {}).setdefault(phase, []).append(row)
                        print(
                            json.dumps({"server": name, "phase": phase, **row}),
                            flush=True,
                        )
        finally:
            for proc, _ in servers.values():
                common.stop(proc)
    median = {
        name: {
            phase: {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            for phase, rows in phases.items()
        }
        for name, phases in runs.items()
    }
    ratios = {
        phase: {
            "ops_s_tomus_over_minio": median["tomus"][phase]["ops_s"]
            / median["minio"][phase]["ops_s"],
            "cpu_per_op_minio_over_tomus": median["minio"][phase]["server_us_per_op"]
            / median["tomus"][phase]["server_us_per_op"],
        }
        for phase in phases
    }
    out = Path(cli.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "bench": "s3-cpu",
        "note": f"{cli.processes} boto3 processes, {cli.small_ops} requests each per phase, "
                f"{f'one {cli.object_mib} MiB object each in put_big/get_big (per MiB; read {cli.get_repeats} times), ' if cli.object_mib else ''}"
                f"{'new keys in every PUT round' if cli.fresh_keys else 'PUTs overwrite after round 1'}, "
                f"servers alternating over {cli.rounds} rounds, fsync on, "
                f"{cli.providers} providers in tomus up; server CPU from /proc "
                f"(process and children), counted until the server is idle again after the "
                f"phase (background work a phase causes is charged to it); "
                f"{os.cpu_count()} cores shared with the clients",
        "median": median,
        "ratios": ratios,
        "runs": runs,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }, indent=1))  # fmt: skip
    print(json.dumps({"median": median, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
