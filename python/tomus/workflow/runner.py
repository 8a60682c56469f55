"""Runs a workflow on Dask (no scheduler of ours): each task is submitted once its inputs
exist, to the Dask worker whose tomus provider holds most of its input bytes (an idle worker
first, when there is one); on the worker it fetches its inputs through the adaptive transfers
into a task-local directory, runs, and registers its outputs with that worker's provider
(O(1), no copy). Each run's stdout and stderr are kept as ``{dir}/.workflow/logs/TASK.*``
(``tomus workflow logs``) and their tails in the report; the task directory is then removed.

Workers are paired with providers: ``providers`` maps Dask worker addresses to provider
addresses; by default workers and live providers are paired in address order (on one
machine, each worker stands for one node with its provider).

Failures: Dask retries a failed task (``retries``). A task whose input has no live holder
left makes the driver run the input's producer again first. Resume: a task whose outputs are
all registered already is not run again, so a driver that died (or was killed) and is
started again continues where it stopped. The report (makespan, per-task times, transfers
with their module and reason, bytes per module) is returned and stored as
``{dir}/.workflow/report.json``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomus
from tomus import _native
from tomus.workflow.dag import Task, Workflow, WorkflowError
from tomus.workflow.modules import FileInfo, TransferContext
from tomus.workflow.replication import CostModel, ReplicationAgent
from tomus.workflow.scratch import make_dir_under, remove_if_empty
from tomus.workflow.selection import SelectionConfig, choose

__all__ = ["Report", "file_info", "run", "status", "task_logs"]


@dataclass
class Report:
    workflow: str
    makespan: float = 0.0
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """Tasks not run because their outputs were registered already (resume)."""
    reruns: list[str] = field(default_factory=list)
    """Producers run again because no holder of their output was left."""
    replicas: list[list[str]] = field(default_factory=list)
    """(file, provider) of the holders the replication agent added."""

    @property
    def transfers(self) -> list[dict[str, Any]]:
        return [t for task in self.tasks.values() for t in task.get("transfers", [])]

    def bytes_per_module(self) -> dict[str, int]:
        c: Counter[str] = Counter()
        for t in self.transfers:
            c[t["module"]] += int(t["bytes"])
        return dict(c)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "makespan": self.makespan,
            "tasks": self.tasks,
            "skipped": self.skipped,
            "reruns": self.reruns,
            "replicas": self.replicas,
            "bytes_per_module": self.bytes_per_module(),
        }


def file_info(client: tomus.Client, path: str) -> FileInfo | None:
    """What the namespace says about ``path`` (``None``: not there)."""
    try:
        rec = _native.registered_file(client, path)
    except tomus.NotFound:
        return None
    except tomus.InvalidArgument:
        # An ordinary file (persisted, or put): read from the store.
        try:
            size = int(client.fs().info(path)["size"])
        except FileNotFoundError:
            return None
        return FileInfo(path, size, registered=False)
    holders = tuple(h["addr"] for h in rec["holders"] if h["alive"] and h["addr"])
    return FileInfo(path, int(rec["size"]), registered=True, holders=holders)


def _holder_bytes(client: tomus.Client, paths: list[str]) -> Counter[str]:
    c: Counter[str] = Counter()
    for p in paths:
        info = file_info(client, p)
        if info is not None:
            for h in info.holders:
                c[h] += info.size
    return c


def _execute(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one task on a Dask worker (a plain function: it is pickled to the worker)."""
    started = time.time()
    client = tomus.connect(spec["addr"])
    config = SelectionConfig.from_dict(spec["config"])
    task_dir = make_dir_under(Path(spec["work_root"]), f"{spec['name']}-")
    transfers = []
    for name, path, pending in spec["inputs"]:
        info = file_info(client, path)
        if info is None:
            raise FileNotFoundError(f"task {spec['name']!r}: input {path} does not exist")
        ctx = TransferContext(
            file=info,
            pending_readers=pending,
            node_load=os.getloadavg()[0] / (os.cpu_count() or 1),
            provider=spec["provider"],
            client=client,
        )
        choice = choose(ctx, config)
        t0 = time.perf_counter()
        result = choice.module.fetch(info, task_dir / name, ctx)
        transfers.append(
            {
                "file": path,
                "module": choice.module.name,
                "reason": choice.reason,
                "bytes": int(result.get("bytes", info.size)),
                "seconds": time.perf_counter() - t0,
                "served": [list(s) for s in result.get("served", [])],
                "failures": [list(f) for f in result.get("failures", [])],
                # Swarm: bytes from readers still downloading (piece exchange).
                "peer_bytes": int(result.get("peer_bytes", 0)),
                # Swarm: when each piece was read, from which kind of source.
                "timeline": [list(t) for t in result.get("timeline", [])],
            }
        )
    ran = time.time()
    try:
        _run_task(spec, task_dir)
    finally:
        # The logs of every run, failed ones included, for `tomus workflow logs`.
        logs = _save_logs(client, spec, task_dir)
    finished = time.time()
    outputs = {}
    for name, path in spec["outputs"]:
        local = task_dir / name
        if not local.is_file():
            raise FileNotFoundError(f"task {spec['name']!r} did not write its output {name!r}")
        if spec.get("store_outputs"):
            # A copy into the striped, replicated store: the fixed `store` strategy.
            with open(local, "rb") as src, client.fs().open(path, "wb") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
        else:
            try:
                _native.register_file(client, local, path, provider=spec["provider"])
            except tomus.Unavailable:
                # This worker's provider is down (restarting): any provider of this host.
                _native.register_file(client, local, path)
        outputs[path] = local.stat().st_size
    shared = time.time()
    if not spec.get("keep_task_dirs"):
        # The outputs are hard-linked into the provider and fetched inputs are copies (or
        # also linked, by the swarm): the task's directory is no longer needed.
        shutil.rmtree(task_dir, ignore_errors=True)
    return {
        "worker": spec["worker"],
        "provider": spec["provider"],
        "dir": str(task_dir),
        "start": started,
        "run_start": ran,
        "run_end": finished,
        "output_seconds": shared - finished,
        "end": time.time(),
        "seconds": time.time() - started,
        "transfers": transfers,
        "outputs": outputs,
        "logs": logs,
    }


def _run_task(spec: dict[str, Any], task_dir: Path) -> None:
    """The task itself, its stdout and stderr going to ``.stdout`` and ``.stderr`` in its
    directory (a command's by the shell; a Python callable's by redirection: a Dask worker
    here runs one task at a time)."""
    with open(task_dir / ".stdout", "wb") as out, open(task_dir / ".stderr", "wb") as err:
        if spec["command"] is not None:
            rc = subprocess.run(
                ["/bin/sh", "-c", spec["command"]], cwd=task_dir, stdout=out, stderr=err
            ).returncode
            if rc != 0:
                err.flush()
                tail = (task_dir / ".stderr").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"task {spec['name']!r} exited with {rc}: {tail}")
            return
        with (
            io.TextIOWrapper(out, write_through=True) as o,
            io.TextIOWrapper(err, write_through=True) as e,
            contextlib.redirect_stdout(o),
            contextlib.redirect_stderr(e),
        ):
            try:
                spec["fn"](task_dir)
            except BaseException:
                traceback.print_exc()
                raise


LOG_TAIL = 4096
"""Bytes of each stream kept in the report; the whole logs are files of the namespace."""


def _log_path(dir: str, task: str, stream: str) -> str:
    return f"/{dir.strip('/')}/.workflow/logs/{task}.{stream}"


def _save_logs(client: tomus.Client, spec: dict[str, Any], task_dir: Path) -> dict[str, Any]:
    """Stores the task's stdout and stderr as ``{dir}/.workflow/logs/TASK.stdout|stderr`` and
    returns their tails and paths."""
    out: dict[str, Any] = {}
    fs = client.fs()
    for stream in ("stdout", "stderr"):
        local = task_dir / f".{stream}"
        data = local.read_bytes() if local.exists() else b""
        path = _log_path(spec["dir"], spec["name"], stream)
        try:
            with fs.open(path, "wb") as f:
                f.write(data)
        except tomus.TomusError as e:  # a log that cannot be stored must not fail the task
            out[f"{stream}_error"] = str(e)
        out[stream] = data[-LOG_TAIL:].decode(errors="replace")
        out[f"{stream}_path"] = path
    return out


def task_logs(client: tomus.Client, wf: Workflow, task: str) -> dict[str, str] | None:
    """The stdout and stderr of ``task``'s last run (``None``: it has not run)."""
    fs = client.fs()
    logs = {}
    for stream in ("stdout", "stderr"):
        try:
            with fs.open(_log_path(wf.dir, task, stream), "rb") as f:
                logs[stream] = f.read().decode(errors="replace")
        except FileNotFoundError:
            return None
    return logs


def _pair(dask_workers: list[str], client: tomus.Client) -> dict[str, str]:
    providers = sorted(p.addr for p in client.providers() if p.alive)
    if not providers:
        raise WorkflowError("the tomus cluster has no live provider")
    return {w: providers[i % len(providers)] for i, w in enumerate(sorted(dask_workers))}


def run(
    workflow: Workflow,
    client: tomus.Client | None = None,
    *,
    dask_client: Any = None,
    config: SelectionConfig | None = None,
    providers: dict[str, str] | None = None,
    work_root: str | Path | None = None,
    n_workers: int | None = None,
    progress: bool = True,
    replication: CostModel | None = None,
    keep_task_dirs: bool = False,
    store_outputs: bool = False,
) -> Report:
    """Runs ``workflow`` (validated first) and returns its report. With ``replication``,
    the replication agent adds holders of outputs that several pending tasks read, in the
    background, as that cost model allows. A task's directory is removed once its outputs
    are registered, unless ``keep_task_dirs``. With ``store_outputs``, outputs are copied
    into the striped store instead of registered (persistent and replicated, but O(size);
    the fixed ``store`` strategy of the benchmarks)."""
    order = workflow.validate()
    client = client or tomus.connect()
    config = config or SelectionConfig()
    own_cluster = None
    if dask_client is None:
        from distributed import Client as DaskClient
        from distributed import LocalCluster

        n = n_workers or max(1, min(4, len([p for p in client.providers() if p.alive])))
        own_cluster = LocalCluster(
            n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
        )
        dask_client = DaskClient(own_cluster)
    try:
        return _drive(
            workflow,
            order,
            client,
            dask_client,
            config,
            providers,
            work_root,
            progress,
            replication,
            keep_task_dirs,
            store_outputs,
        )
    finally:
        if own_cluster is not None:
            dask_client.close()
            own_cluster.close()


def _done(client: tomus.Client, wf: Workflow, t: Task) -> bool:
    return bool(t.outputs) and all(
        (i := file_info(client, wf.path_of(o))) is not None and (not i.registered or i.holders)
        for o in t.outputs
    )


def _drive(
    wf: Workflow,
    order: list[Task],
    client: tomus.Client,
    dask: Any,
    config: SelectionConfig,
    providers: dict[str, str] | None,
    work_root: str | Path | None,
    progress: bool,
    replication: CostModel | None = None,
    keep_task_dirs: bool = False,
    store_outputs: bool = False,
) -> Report:
    from distributed import as_completed

    workers = sorted(dask.scheduler_info()["workers"])
    pairs = providers or _pair(workers, client)
    root = str(work_root or os.environ.get("TOMUS_WORKFLOW_WORKDIR") or tempfile.gettempdir())
    root = str(Path(root) / f"tomus-workflow-{wf.name}")
    prod = wf.producers()
    report = Report(wf.name)
    start = time.time()
    done: set[str] = set()
    for t in order:
        if _done(client, wf, t):
            done.add(t.name)
            report.skipped.append(t.name)
    readers: Counter[str] = Counter(i for t in order if t.name not in done for i in t.inputs)
    running: dict[Any, Task] = {}
    placed: dict[Any, str] = {}
    busy: Counter[str] = Counter()
    rerun_for: set[str] = set()
    agent = ReplicationAgent(client, replication, work_dir=root) if replication else None
    replicating = []
    pool = as_completed(loop=dask.loop)  # this client's: it need not be the default one

    def ready(t: Task) -> bool:
        return all(prod[i].name in done for i in t.inputs if i in prod)

    def submit(t: Task) -> None:
        paths = [wf.path_of(i) for i in t.inputs]
        # An input with no live holder left: its producer runs again first.
        for i in t.inputs:
            info = file_info(client, wf.path_of(i))
            if i in prod and (info is None or (info.registered and not info.holders)):
                p = prod[i]
                if p.name in done:
                    done.discard(p.name)
                    report.reruns.append(p.name)
                    if progress:
                        print(
                            f"[workflow] {i} has no live holder: running {p.name} again",
                            file=sys.stderr,
                        )
                if all(x is not p for x in running.values()):
                    submit(p)
                return
        by_holder = _holder_bytes(client, paths)
        # An idle worker first (a task waiting behind another on the worker holding its
        # inputs while others idle costs more than fetching them), then the most input
        # bytes on the worker's provider, then the least busy worker.
        worker = max(
            workers,
            key=lambda w: (busy[w] == 0, by_holder.get(pairs.get(w, ""), 0), -busy[w]),
        )
        busy[worker] += 1
        spec = {
            "name": t.name,
            "addr": client.addr,
            "config": config.__dict__,
            "work_root": root,
            "worker": worker,
            "provider": pairs.get(worker),
            "inputs": [(i, wf.path_of(i), readers[i]) for i in t.inputs],
            "outputs": [(o, wf.path_of(o)) for o in t.outputs],
            "command": t.command,
            "fn": t.fn,
            "dir": wf.dir,
            "keep_task_dirs": keep_task_dirs,
            "store_outputs": store_outputs,
        }
        fut = dask.submit(
            _execute,
            spec,
            key=f"{wf.name}-{t.name}-{time.time_ns()}",
            workers=[worker],
            allow_other_workers=True,
            retries=t.retries,
            pure=False,
        )
        running[fut] = t
        placed[fut] = worker
        pool.add(fut)

    for t in order:
        if t.name not in done and ready(t):
            submit(t)
    total = len(order)
    while running:
        fut = next(pool)
        t = running.pop(fut)
        busy[placed.pop(fut)] -= 1
        if fut.status == "error":
            exc = fut.exception()
            lost = [prod[i] for i in t.inputs if i in prod and prod[i].name not in rerun_for]
            if "no holder" in str(exc) and lost:
                # Its inputs' copies are gone (a node lost with its disk): their producers
                # run again (once each), then this task when they are done.
                for p in lost:
                    rerun_for.add(p.name)
                    done.discard(p.name)
                    report.reruns.append(p.name)
                    if progress:
                        print(
                            f"[workflow] {t.name}: inputs lost, running {p.name} again",
                            file=sys.stderr,
                        )
                    if all(x is not p for x in running.values()):
                        submit(p)
                continue
            raise WorkflowError(f"task {t.name!r} failed after {t.retries} retries: {exc}")
        result = fut.result()
        report.tasks[t.name] = result
        done.add(t.name)
        for i in t.inputs:
            readers[i] -= 1
        if agent is not None:
            broadcast = {wf.path_of(o): readers[o] for o in t.outputs if readers[o] > 1}
            if broadcast:
                Path(root).mkdir(parents=True, exist_ok=True)
                replicating.append(agent.start(broadcast))
        if progress:
            moved = sum(x["bytes"] for x in result["transfers"])
            print(
                f"[workflow] {len(done)}/{total} {t.name} done in {result['seconds']:.2f}s "
                f"on {result['worker']} ({moved} B in)",
                file=sys.stderr,
            )
        for n in order:
            if n.name not in done and ready(n) and all(x is not n for x in running.values()):
                submit(n)
    missing = [t.name for t in order if t.name not in done]
    if missing:
        raise WorkflowError(f"tasks never became ready: {missing}")
    for thread in replicating:
        thread.join()
    if agent is not None:
        report.replicas = [list(m) for m in agent.made]
    report.makespan = time.time() - start
    _store_report(client, wf, report)
    # Every task is done: the work root, where each ran, goes if it is empty (it keeps the
    # directories of tasks that failed and those kept on request), on every worker's host.
    # Best effort: a worker lost meanwhile must not fail a run whose tasks all succeeded.
    dask.run(remove_if_empty, root, on_error="ignore")
    remove_if_empty(root)
    return report


def _store_report(client: tomus.Client, wf: Workflow, report: Report) -> None:
    fs = client.fs()
    path = wf.path_of(".workflow/report.json")
    with fs.open(path, "wb") as f:
        f.write(json.dumps(report.to_dict(), indent=1).encode())


def status(client: tomus.Client, wf: Workflow) -> dict[str, Any]:
    """Which tasks are done (outputs registered) and the last stored report, if any."""
    wf.validate()
    tasks = {t.name: ("done" if _done(client, wf, t) else "pending") for t in wf.tasks}
    last = None
    try:
        with client.fs().open(wf.path_of(".workflow/report.json"), "rb") as f:
            last = json.loads(f.read())
    except FileNotFoundError:
        pass
    return {"workflow": wf.name, "tasks": tasks, "last_report": last}
