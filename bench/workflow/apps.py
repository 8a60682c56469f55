"""The workflow applications (synthetic, BLAST-like) with every way of passing files, side by
side in one run: adaptive selection, each fixed module (memory, direct, swarm), the striped
store (outputs copied into it), and a remote S3 object store standing for cloud storage
(MinIO in a network namespace behind a `tc` token bucket of --s3-mbit each way).

Scenarios (the AFM paper's, section V):
- ``s1``: the synthetic workflow with small files, no replication: per-job input transfer
  time (median over the jobs) and makespan per strategy.
- ``s2``: the synthetic workflow with large files broadcast (the replication agent adds
  holders of the stage-in files): makespan per strategy.
- ``blast``: the BLAST-like workflow's makespan for N matchers per strategy.

Every run's answer is checked against the single-process reference. S3 passing wraps each
task: it downloads its inputs from the bucket, runs, uploads its outputs, and hands the
runner a few-byte token per file (the runner keeps the dependencies and the placement).

Needs root for the network namespace (without it, or with --no-s3, S3 is left out), MinIO
(``~/go/bin/minio``, ``go install github.com/minio/minio@latest``) and boto3.

    python bench/workflow/apps.py --out bench/results/workflow-apps.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomus
from tomus.workflow import Workflow
from tomus.workflow.apps import build, check
from tomus.workflow.replication import CostModel
from tomus.workflow.runner import run
from tomus.workflow.selection import SelectionConfig

ACCESS, SECRET, BUCKET = "bench-access", "bench-secret", "workflows"
NS = f"tmwf-{os.getpid()}"
HOST_IP, NS_IP = "10.213.7.1", "10.213.7.2"


def sh(*cmd: str) -> None:
    p = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed: {p.stderr.strip()}")


@contextlib.contextmanager
def remote_s3(minio: str, mbit: int, data: Path) -> Iterator[str]:
    """MinIO in its own network namespace, reached over a veth pair shaped to ``mbit`` Mbit/s
    each way; yields its endpoint URL. Everything is removed on exit."""
    veth_h, veth_n = f"tmwf{os.getpid() % 10000}h", f"tmwf{os.getpid() % 10000}n"
    proc = None
    try:
        sh("ip", "netns", "add", NS)
        sh(
            "ip",
            "link",
            "add",
            veth_h,
            "type",
            "veth",
            "peer",
            "name",
            veth_n,
            "netns",
            NS,
        )
        sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", veth_h)
        sh("ip", "link", "set", veth_h, "up")
        sh("ip", "-n", NS, "addr", "add", f"{NS_IP}/30", "dev", veth_n)
        sh("ip", "-n", NS, "link", "set", veth_n, "up")
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        for prefix, dev in (((), veth_h), (("ip", "netns", "exec", NS), veth_n)):
            # A token bucket each way (this kernel has no netem: no added delay).
            sh(
                *prefix,
                "tc",
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                f"{mbit}mbit",
                "burst",
                "64kb",
                "latency",
                "50ms",
            )
        data.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            MINIO_ROOT_USER=ACCESS,
            MINIO_ROOT_PASSWORD=SECRET,
            MINIO_BROWSER="off",
            MINIO_UPDATE="off",
        )
        log = open(data.parent / "minio.log", "wb")  # noqa: SIM115 - lives with the server
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                NS,
                minio,
                "server",
                str(data),
                "--address",
                f"{NS_IP}:9000",
                "--console-address",
                f"{NS_IP}:9001",
            ],
            stdout=log,
            stderr=log,
            env=env,
        )
        endpoint = f"http://{NS_IP}:9000"
        deadline = time.monotonic() + 60
        while True:
            try:
                s3(endpoint).list_buckets()
                break
            except Exception as e:  # noqa: BLE001 - not up yet
                if proc.poll() is not None or time.monotonic() > deadline:
                    log_text = (data.parent / "minio.log").read_text()[-2000:]
                    raise SystemExit(f"minio did not start ({e}): {log_text}") from None
                time.sleep(0.5)
        s3(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        if proc is not None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        subprocess.run(["ip", "link", "del", veth_h], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", NS], check=False, capture_output=True)


def s3(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 3}),
    )


def s3_task(
    task_dir: Path,
    *,
    fn: Any,
    inputs: list[str],
    outputs: list[str],
    endpoint: str,
    prefix: str,
) -> None:
    """A task of the S3 strategy: inputs from the bucket, outputs to it, tokens for the
    runner; prints its transfer times (kept in the task's log)."""
    client = s3(endpoint)
    t0 = time.perf_counter()
    for name in inputs:
        client.download_file(BUCKET, prefix + name, str(task_dir / name))
    t1 = time.perf_counter()
    fn(task_dir)
    t2 = time.perf_counter()
    for name in outputs:
        client.upload_file(str(task_dir / name), BUCKET, prefix + name)
        (task_dir / f"{name}.token").write_bytes(b"s3")
    t3 = time.perf_counter()
    print(json.dumps({"in_s": t1 - t0, "out_s": t3 - t2}))


def via_s3(wf: Workflow, endpoint: str) -> Workflow:
    prefix = f"{uuid.uuid4().hex[:8]}/"
    out = Workflow(wf.name + "-s3", wf.dir + "-s3")
    for t in wf.tasks:
        out.task(
            t.name,
            fn=functools.partial(
                s3_task,
                fn=t.fn,
                inputs=t.inputs,
                outputs=t.outputs,
                endpoint=endpoint,
                prefix=prefix,
            ),
            inputs=[f"{i}.token" for i in t.inputs],
            outputs=[f"{o}.token" for o in t.outputs],
        )
    return out


def s3_answer(app: str, wf: Workflow, endpoint: str, tmp: Path) -> bool:
    """The S3 run's result against the reference."""
    from tomus.workflow.apps import blast, synthetic

    prefix = wf.tasks[0].fn.keywords["prefix"]  # type: ignore[union-attr]
    client = s3(endpoint)
    if app == "synthetic":
        client.download_file(BUCKET, prefix + "result.bin", str(tmp / "r"))
        return bool(
            synthetic.answer(tmp / "r") == synthetic.reference(_plain[wf.name], tmp)
        )
    client.download_file(BUCKET, prefix + "hits.tsv", str(tmp / "r"))
    return (tmp / "r").read_text() == blast.reference(_plain[wf.name], tmp)["hits"]


_plain: dict[str, Workflow] = {}


def one_run(
    app: str, strategy: str, size: int, width: int, ctx: dict[str, Any], replicate: bool
) -> dict[str, Any]:
    client, dask, work = ctx["client"], ctx["dask"], ctx["work"]
    d = f"/bench/{app}-{strategy}-{uuid.uuid4().hex[:6]}"
    wf = build(app, size, width=width, dir=d)
    kw: dict[str, Any] = {"dask_client": dask, "progress": False, "work_root": work}
    if strategy in ("memory", "direct", "swarm"):
        kw["config"] = SelectionConfig(module=strategy)
    if strategy == "store":
        kw["store_outputs"] = True
    if replicate and strategy not in ("store", "s3"):
        kw["replication"] = CostModel()
    run_wf = wf
    if strategy == "s3":
        run_wf = via_s3(wf, ctx["s3"])
        _plain[run_wf.name] = wf
    t0 = time.perf_counter()
    report = run(run_wf, client, **kw)
    wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        if strategy == "s3":
            equal = s3_answer(app, run_wf, ctx["s3"], Path(tmp))
        else:
            equal = bool(check(app, wf, client, tmp)["equal"])
    per_job_in, per_job_out = [], []
    for t in report.tasks.values():
        if strategy == "s3":
            line = t["logs"]["stdout"].strip().splitlines()[-1]
            times = json.loads(line)
            per_job_in.append(times["in_s"])
            per_job_out.append(times["out_s"])
        else:
            per_job_in.append(sum(x["seconds"] for x in t["transfers"]))
            per_job_out.append(t["output_seconds"])
    row = {
        "app": app,
        "strategy": strategy,
        "size": size,
        "width": width,
        "makespan_s": report.makespan,
        "wall_s": wall,
        "median_job_in_s": statistics.median(per_job_in),
        "median_job_out_s": statistics.median(per_job_out),
        "modules": report.bytes_per_module()
        if strategy != "s3"
        else {"s3": "see tokens"},
        "replicas_added": len(report.replicas),
        "equal_reference": equal,
    }
    print(json.dumps(row), flush=True)
    return row


def median_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    for k in ("makespan_s", "wall_s", "median_job_in_s", "median_job_out_s"):
        out[k] = statistics.median(r[k] for r in rows)
    out["runs"] = len(rows)
    out["equal_reference"] = all(r["equal_reference"] for r in rows)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--out", default="bench/results/workflow-apps.json")
    ap.add_argument("--scenarios", default="s1,s2,blast")
    ap.add_argument("--s1-size", default="1MiB")
    ap.add_argument("--s2-size", default="32MiB")
    ap.add_argument("--s2-width", type=int, default=8)
    ap.add_argument(
        "--blast-size", default="1MiB", help="query bytes (databases: 2x each)"
    )
    ap.add_argument("--blast-matchers", default="4,8,16")
    ap.add_argument("--repeat", type=int, default=3, help="runs per point, alternating")
    ap.add_argument("--providers", type=int, default=4)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--s3-mbit", type=int, default=400, help="link to the remote store")
    ap.add_argument("--no-s3", action="store_true")
    args = ap.parse_args()
    from distributed import Client, LocalCluster
    from tomus.workflow.selection import parse_size

    minio = shutil.which("minio") or str(Path.home() / "go/bin/minio")
    use_s3 = not args.no_s3 and os.geteuid() == 0 and Path(minio).exists()
    if not use_s3 and not args.no_s3:
        print("S3 left out: needs root (network namespace) and minio", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            tomus.local_cluster(providers=args.providers, fsync=False)
        )
        work = str(Path(cluster.data_dir) / "tasks")
        Path(work).mkdir()
        lc = stack.enter_context(
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
        )
        dask = stack.enter_context(Client(lc, set_as_default=False))
        ctx: dict[str, Any] = {"client": cluster.connect(), "dask": dask, "work": work}
        if use_s3:
            ctx["s3"] = stack.enter_context(
                remote_s3(
                    minio,
                    args.s3_mbit,
                    Path(cluster.data_dir) / "minio",
                )
            )
        # Warm up: Dask workers import numpy and tomus, pools connect (not measured).
        one_run("synthetic", "adaptive", 4096, 2, ctx, False)
        remote = ["s3"] if use_s3 else []
        plan: list[tuple[str, str, list[str], int, int, bool]] = []
        scen = args.scenarios.split(",")
        if "s1" in scen:
            plan.append(
                (
                    "s1",
                    "synthetic",
                    ["adaptive", "memory", "direct", "store", *remote],
                    parse_size(args.s1_size),
                    20,
                    False,
                )
            )
        if "s2" in scen:
            plan.append(
                (
                    "s2",
                    "synthetic",
                    ["adaptive", "direct", "swarm", "store", *remote],
                    parse_size(args.s2_size),
                    args.s2_width,
                    True,
                )
            )
        if "blast" in scen:
            for n in (int(x) for x in args.blast_matchers.split(",")):
                plan.append(
                    (
                        f"blast-{n}",
                        "blast",
                        ["adaptive", "store", *remote],
                        parse_size(args.blast_size),
                        n,
                        True,
                    )
                )
        for name, app, strategies, size, width, replicate in plan:
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in strategies}
            for _ in range(
                args.repeat
            ):  # alternating: the machine's noise hits all alike
                for strategy in strategies:
                    r = one_run(app, strategy, size, width, ctx, replicate)
                    r["scenario"] = name
                    runs[strategy].append(r)
            rows.extend(median_rows(v) for v in runs.values())
    summary: dict[str, dict[str, float]] = {}
    for r in rows:
        base = next(
            x
            for x in rows
            if x["scenario"] == r["scenario"] and x["strategy"] == "adaptive"
        )
        summary.setdefault(r["scenario"], {})[r["strategy"]] = round(
            r["makespan_s"] / base["makespan_s"], 3
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "bench": "workflow-apps",
                "note": f"one machine (2 cores, shared with other jobs: noisy), {args.providers} "
                f"providers and {args.workers} Dask workers on loopback; S3 = MinIO in a network "
                f"namespace behind a {args.s3_mbit} Mbit/s token bucket each way; medians of "
                f"{args.repeat} alternating runs",
                "makespan_vs_adaptive": summary,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
