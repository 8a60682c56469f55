"""Scenario 2 of the AFM paper on separate hosts: large files broadcast to many tasks, each
worker node a network namespace of its own behind a rate-limited link.

Why: ``apps.py`` runs every "node" on one loopback, so a holder's link is never a hot spot and
spreading a broadcast over several holders cannot show. Here:

- ``--hosts`` worker hosts, each a network namespace with one tomus provider and one Dask
  worker (1 thread), joined to a bridge by a veth pair shaped by a ``tc`` token bucket of
  ``--mbit`` each way (this kernel has no ``netem``: no added delay);
- the manager and the Dask scheduler on a host of their own (same link);
- the remote object store (MinIO) on a host of its own behind a ``--s3-mbit`` link;
- the driver (this process) in the root namespace, on the bridge (metadata only).

Workloads, every strategy alternating, ``--repeat`` rounds, medians:

- ``bcast``: one task writes ``--bcast-size`` bytes, ``--hosts`` readers each read it whole
  (a checksum), one task gathers the checksums; every reader's checksum must equal the
  writer's;
- ``synth``: the synthetic workflow (``tomus.workflow.apps.synthetic``) with ``--synth-size``
  files and width ``--hosts``; the answer must equal the single-process reference.

Strategies: ``adaptive`` (default selection), ``direct`` and ``swarm`` (fixed modules),
``store`` (outputs copied into the striped store) and ``s3`` (every task downloads its inputs
from MinIO and uploads its outputs there).

Needs root, ``ip``, ``tc``, MinIO (``~/go/bin/minio``) and boto3. Namespaces, the bridge and
every process are removed on exit (and namespaces of dead runs swept at start)::

    python bench/workflow/multihost.py --out bench/results/workflow-netns.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

# bench/workflow/apps.py: the S3 wrapping of tasks.
import apps
import tomus
from tomus import _native
from tomus.workflow import Workflow
from tomus.workflow.replication import CostModel
from tomus.workflow.runner import run
from tomus.workflow.selection import SelectionConfig, parse_size

NET = "10.88.0"
PREFIX = "tmwfh"


def sh(*cmd: str) -> None:
    p = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {p.stderr.strip()}")


def sweep() -> None:
    """Removes namespaces and bridges of runs whose process is gone."""
    out = subprocess.run(
        ["ip", "netns", "list"], check=False, capture_output=True, text=True
    ).stdout
    for line in out.splitlines():
        name = (line.split() or [""])[0]
        m = re.fullmatch(PREFIX + r"-(\d+)-\w+", name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            subprocess.run(
                ["ip", "netns", "del", name], check=False, capture_output=True
            )


class Net:
    """A bridge in the root namespace and hosts (namespaces) on it, each behind a shaped
    veth pair: everything a host sends or receives crosses its own token buckets."""

    def __init__(self) -> None:
        self.tag = os.getpid() % 10000
        self.bridge = f"tmbr{self.tag}"
        self.hosts: dict[str, tuple[str, str, str]] = {}  # name -> (ns, outer veth, ip)
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{NET}.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")

    def host(self, name: str, n: int, mbit: float) -> str:
        """Host ``name`` at ``NET.n`` with a ``mbit`` link each way; returns its address."""
        ns, outer, ip = (
            f"{PREFIX}-{os.getpid()}-{name}",
            f"tmh{n}x{self.tag}",
            f"{NET}.{n}",
        )
        sh("ip", "netns", "add", ns)
        self.hosts[name] = (ns, outer, ip)
        sh(
            "ip",
            "link",
            "add",
            outer,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        )
        sh("ip", "link", "set", outer, "master", self.bridge)
        sh("ip", "link", "set", outer, "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # Egress of the bridge port = the host's download; egress of eth0 = its upload.
        for pre, dev in ((["ip", "netns", "exec", ns], "eth0"), ([], outer)):
            sh(*pre, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
               "burst", "64kb", "latency", "100ms")  # fmt: skip
        return ip

    def prefix(self, name: str) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[name][0]]

    def bytes(self, name: str) -> int:
        """Bytes the host sent and received so far."""
        base = Path("/sys/class/net", self.hosts[name][1], "statistics")
        return int((base / "rx_bytes").read_text()) + int(
            (base / "tx_bytes").read_text()
        )

    def close(self) -> None:
        for ns, outer, _ in self.hosts.values():
            subprocess.run(
                ["ip", "link", "del", outer], check=False, capture_output=True
            )
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        subprocess.run(
            ["ip", "link", "del", self.bridge], check=False, capture_output=True
        )


class Procs:
    """Processes started in hosts, each in its own process group, SIGKILLed on close."""

    def __init__(self, net: Net, dir: Path, env: dict[str, str]) -> None:
        self.net, self.dir, self.env = net, dir, env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, host: str, name: str, args: list[str], ready: bytes | None) -> str:
        log = self.dir / f"{name}.log"
        with log.open("wb") as out:
            p = subprocess.Popen(
                [*self.net.prefix(host), *args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**os.environ, **self.env}, start_new_session=True,
            )  # fmt: skip
        self.procs.append(p)
        if ready is None:
            return ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            m = re.search(ready, log.read_bytes())
            if m:
                return m.group(1).decode()
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"{name} not ready: {log.read_text()[-2000:]}")

    def close(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


# --- the broadcast workflow (tasks run on the workers: plain module-level functions) -------


def bcast_make(task_dir: Path, *, size: int, seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(task_dir / "db.bin", "wb") as f:
        left = size
        while left:
            n = min(left, 8 << 20)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            left -= n


def bcast_read(task_dir: Path, *, j: int) -> None:
    h = hashlib.sha256()
    with open(task_dir / "db.bin", "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    (task_dir / f"sum{j}.txt").write_text(h.hexdigest())


def bcast_gather(task_dir: Path, *, n: int) -> None:
    sums = [(task_dir / f"sum{j}.txt").read_text() for j in range(n)]
    (task_dir / "sums.txt").write_text("\n".join(sums))


def bcast_workflow(size: int, readers: int, dir: str) -> Workflow:
    wf = Workflow("bcast-" + dir.rsplit("-", 1)[-1], dir)
    wf.task(
        "make", fn=functools.partial(bcast_make, size=size, seed=12), outputs=["db.bin"]
    )
    for j in range(readers):
        wf.task(
            f"read{j}",
            fn=functools.partial(bcast_read, j=j),
            inputs=["db.bin"],
            outputs=[f"sum{j}.txt"],
        )
    wf.task(
        "gather",
        fn=functools.partial(bcast_gather, n=readers),
        inputs=[f"sum{j}.txt" for j in range(readers)],
        outputs=["sums.txt"],
    )
    return wf


def bcast_reference(size: int) -> str:
    with tempfile.TemporaryDirectory() as d:
        bcast_make(Path(d), size=size, seed=12)
        bcast_read(Path(d), j=0)
        return (Path(d) / "sum0.txt").read_text()


# --- runs -----------------------------------------------------------------------------------


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine since boot (/proc/stat): every host's
    processes share its cores, so the busy fraction over a run says how close the run came to
    the CPU ceiling."""
    first = Path("/proc/stat").read_text().split("\n", 1)[0]
    fields = [int(x) for x in first.split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def own_cpu_s() -> float:
    """CPU seconds used so far by this process and every process it started (the hosts'
    providers, Dask workers, the manager, the scheduler, MinIO), live ones only."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def read_result(
    ctx: dict[str, Any], strategy: str, wf: Workflow, name: str, dest: Path
) -> None:
    if strategy == "s3":
        prefix = wf.tasks[0].fn.keywords["prefix"]  # type: ignore[union-attr]
        apps.s3(ctx["s3"]).download_file(apps.BUCKET, prefix + name, str(dest))
        return
    from tomus.workflow.modules import BUILTIN, TransferContext
    from tomus.workflow.runner import file_info

    info = file_info(ctx["client"], wf.path_of(name))
    assert info is not None
    mod = BUILTIN["direct"] if info.registered else BUILTIN["store"]
    mod.fetch(info, dest, TransferContext(file=info, client=ctx["client"]))


def one_run(
    kind: str, strategy: str, args: argparse.Namespace, ctx: dict[str, Any]
) -> dict:
    from tomus.workflow.apps import synthetic

    d = f"/bench/{kind}-{strategy}-{uuid.uuid4().hex[:6]}"
    if kind == "bcast":
        size = parse_size(args.bcast_size)
        wf = bcast_workflow(size, args.hosts, d)
        result = "sums.txt"
    else:
        size = parse_size(args.synth_size)
        wf = synthetic.workflow(size, width=args.hosts, dir=d)
        result = "result.bin"
    kw: dict[str, Any] = {
        "dask_client": ctx["dask"],
        "progress": False,
        "work_root": ctx["work"],
        "providers": ctx["pairs"],
    }
    if strategy in ("direct", "swarm"):
        kw["config"] = SelectionConfig(module=strategy)
    if strategy == "store":
        kw["store_outputs"] = True
    if args.replicate and strategy not in ("store", "s3"):
        kw["replication"] = CostModel()
    run_wf = apps.via_s3(wf, ctx["s3"]) if strategy == "s3" else wf
    before = {h: ctx["net"].bytes(h) for h in ctx["net"].hosts}
    busy0, total0 = cpu_ticks()
    own0 = own_cpu_s()
    t0 = time.perf_counter()
    report = run(run_wf, ctx["client"], **kw)
    wall = time.perf_counter() - t0
    busy1, total1 = cpu_ticks()
    own1 = own_cpu_s()
    moved = {h: ctx["net"].bytes(h) - before[h] for h in ctx["net"].hosts}
    with tempfile.TemporaryDirectory(dir=ctx["work"]) as tmp:
        got = Path(tmp) / "r"
        read_result(ctx, strategy, run_wf, result, got)
        if kind == "bcast":
            want = ctx.get(f"bcast_ref{size}") or bcast_reference(size)
            ctx[f"bcast_ref{size}"] = want
            equal = got.read_text().split("\n") == [want] * args.hosts
        else:
            ref = ctx.get("synth_ref")
            if ref is None:
                ref = ctx["synth_ref"] = synthetic.reference(wf, tmp)
            equal = synthetic.answer(got) == ref
    ins, modules, reasons = [], {}, {}
    for name, t in report.tasks.items():
        if strategy == "s3":
            ins.append(json.loads(t["logs"]["stdout"].strip().splitlines()[-1])["in_s"])
            continue
        ins.append(sum(x["seconds"] for x in t["transfers"]))
        for x in t["transfers"]:
            modules[x["module"]] = modules.get(x["module"], 0) + x["bytes"]
            if name.startswith(("read", "L1")):
                reasons[x["module"]] = x["reason"]
    row = {
        "workload": kind,
        "strategy": strategy,
        "size": size,
        "readers": args.hosts,
        "makespan_s": report.makespan,
        "wall_s": wall,
        "median_job_in_s": statistics.median(ins) if ins else 0.0,
        "max_job_in_s": max(ins) if ins else 0.0,
        "modules_bytes": modules,
        "reasons": reasons,
        "replicas_added": len(report.replicas),
        "host_link_bytes": moved,
        # Busy fraction of all cores during the run (other helpers' jobs included).
        "cpu_busy": round((busy1 - busy0) / max(1, total1 - total0), 3),
        # Cores used by the deployment itself on average (CPU seconds / wall seconds).
        "own_cores": round((own1 - own0) / wall, 2),
        "equal_reference": bool(equal),
        # Swarm readers' piece timelines (piece, source kind, start s, end s).
        "timelines": [
            x["timeline"]
            for t in report.tasks.values()
            for x in t["transfers"]
            if x["timeline"]
        ],
    }
    print(json.dumps(row), flush=True)
    with contextlib.suppress(Exception):
        ctx["client"].fs().rm(d, recursive=True)
    return row


@contextlib.contextmanager
def deployment(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    sweep()
    base = Path(tempfile.mkdtemp(prefix="tomus-multihost-", dir=args.dir))
    secret = secrets.token_hex(16)
    (base / "secret").write_text(secret)
    net = Net()
    env = {
        "TOMUS_CLUSTER_SECRET": secret,
        "PYTHONPATH": str(Path(__file__).parent),
        "OMP_NUM_THREADS": "1",
    }
    procs = Procs(net, base, env)
    py = sys.executable
    sec = ["--secret-file", str(base / "secret")]
    ready = rb"(?m)^tomus \w+ listening on (\S+)\s*$"
    try:
        mip = net.host("mgr", 1, args.mbit)
        mgr = procs.start("mgr", "manager",
                          [py, "-m", "tomus", *sec, "--addr", f"{mip}:0", "manager",
                           "--data", str(base / "manager")], ready)  # fmt: skip
        sched = procs.start("mgr", "scheduler",
                            [py, "-m", "distributed.cli.dask_scheduler", "--host", mip, "--port",
                             "0", "--no-dashboard", "--no-show"], rb"Scheduler at:\s+(\S+)")  # fmt: skip
        for i in range(args.hosts):
            h = f"h{i}"
            ip = net.host(h, 10 + i, args.mbit)
            procs.start(h, f"provider-{i}",
                        [py, "-m", "tomus", *sec, "--addr", f"{ip}:0", "provider", "--manager",
                         mgr, "--data", str(base / f"provider-{i}"), "--no-fsync",
                         "--heartbeat-ms", "200"], ready)  # fmt: skip
            procs.start(h, f"worker-{i}",
                        [py, "-m", "distributed.cli.dask_worker", sched, "--host", ip,
                         "--nworkers", "1", "--nthreads", "1", "--no-dashboard"], None)  # fmt: skip
        s3ip = net.host("s3", 2, args.s3_mbit)
        minio = shutil.which("minio") or str(Path.home() / "go/bin/minio")
        (base / "minio").mkdir()
        procs.env = {**env, "MINIO_ROOT_USER": apps.ACCESS, "MINIO_ROOT_PASSWORD": apps.SECRET,
                     "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"}  # fmt: skip
        procs.start("s3", "minio", [minio, "server", str(base / "minio"), "--address",
                                    f"{s3ip}:9000", "--console-address", f"{s3ip}:9001"], None)  # fmt: skip
        endpoint = f"http://{s3ip}:9000"
        client = tomus.connect(mgr, secret=secret.encode())
        from distributed import Client

        dask = Client(sched, set_as_default=False)
        deadline = time.monotonic() + 120
        while True:
            provs = [p for p in client.providers() if p.alive]
            nw = len(dask.scheduler_info()["workers"])
            s3ok = False
            with contextlib.suppress(Exception):
                apps.s3(endpoint).list_buckets()
                s3ok = True
            if len(provs) == args.hosts and nw == args.hosts and s3ok:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(provs)} providers, {nw} workers, s3 {s3ok}")
            time.sleep(0.5)
        apps.s3(endpoint).create_bucket(Bucket=apps.BUCKET)
        # Each Dask worker is paired with the provider of its own host.
        by_ip = {p.addr.rsplit(":", 1)[0]: p.addr for p in provs}
        pairs = {
            w: by_ip[w.split("://")[1].rsplit(":", 1)[0]]
            for w in dask.scheduler_info()["workers"]
        }
        work = base / "tasks"
        work.mkdir()
        os.chmod(base, 0o755)
        yield {"client": client, "dask": dask, "pairs": pairs, "work": str(work), "s3": endpoint,
               "net": net}  # fmt: skip
        dask.close()
    finally:
        procs.close()
        net.close()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--out", default="bench/results/workflow-netns.json")
    ap.add_argument(
        "--hosts", type=int, default=8, help="worker hosts (= broadcast readers)"
    )
    ap.add_argument(
        "--mbit", type=float, default=100, help="each host's link, each way"
    )
    ap.add_argument(
        "--s3-mbit", type=float, default=100, help="the object store's link"
    )
    ap.add_argument("--bcast-size", default="64MiB")
    ap.add_argument("--synth-size", default="32MiB")
    ap.add_argument("--workloads", default="bcast,synth")
    ap.add_argument("--strategies", default="adaptive,direct,swarm,store,s3")
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds, strategies alternating"
    )
    ap.add_argument(
        "--replicate", action="store_true", help="replication agent on (not s3/store)"
    )
    ap.add_argument(
        "--dir", default=None, help="where the hosts' data lives (one file system)"
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="each round, also the broadcast of 1 MiB by adaptive (workload bcast-1MiB): the "
        "makespan that is not moving bytes (tasks, Dask, Python, registration)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces, tc)")
    strategies = args.strategies.split(",")
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with deployment(args) as ctx:
        one_run(
            "bcast",
            "adaptive",
            argparse.Namespace(**{**vars(args), "bcast_size": "1MiB"}),
            ctx,
        )  # fmt: skip  (warm-up: imports, connections; not measured)
        for kind in args.workloads.split(","):
            for _ in range(args.repeat):
                for s in strategies:
                    r = one_run(kind, s, args, ctx)
                    rows.setdefault(kind, {}).setdefault(s, []).append(r)
                if args.floor and kind == "bcast":
                    tiny = argparse.Namespace(**{**vars(args), "bcast_size": "1MiB"})
                    r = one_run("bcast", "adaptive", tiny, ctx)
                    floor = rows.setdefault("bcast-1MiB", {})
                    floor.setdefault("adaptive", []).append(r)
    summary: dict[str, Any] = {}
    medians: dict[str, dict[str, float]] = {}
    for kind, by in rows.items():
        medians[kind] = {
            s: statistics.median(r["makespan_s"] for r in rs) for s, rs in by.items()
        }
        a = medians[kind].get("adaptive")
        if a:
            summary[kind] = {
                f"{s}_over_adaptive": round(m / a, 2) for s, m in medians[kind].items()
            }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "bench": "workflow-netns",
        "note": f"{args.hosts} worker hosts (network namespaces, one provider + one 1-thread Dask "
                f"worker each) and a manager/scheduler host on a bridge, each link a {args.mbit} "
                f"Mbit/s tc token bucket each way; MinIO on its own host behind {args.s3_mbit} "
                f"Mbit/s; {_native.BUILD_PROFILE} build of tomus; 2-core machine; medians of "
                f"{args.repeat} "
                f"alternating rounds; replication agent {'on' if args.replicate else 'off'}",
        "median_makespan_s": medians,
        "makespan_over_adaptive": summary,
        "rows": rows,
    }, indent=1))  # fmt: skip
    print(json.dumps({"median_makespan_s": medians, "ratios": summary}, indent=1))


if __name__ == "__main__":
    main()
