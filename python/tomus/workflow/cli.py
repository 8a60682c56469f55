"""``tomus workflow run|status|logs FILE.yaml`` and ``tomus workflow synthetic|blast``: the
workflow runner and the paper's applications from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys

import tomus
from tomus.workflow.dag import Workflow, WorkflowError
from tomus.workflow.runner import run, status, task_logs
from tomus.workflow.selection import SelectionConfig
from tomus.workflow.selection import parse_size as selection_size


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tomus workflow",
        description="Run a DAG of tasks passing files through tomus (registered in place, "
        "moved by adaptive transfers), on Dask.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, text in (
        ("run", "run a workflow (resumes from registered outputs)"),
        ("status", "which tasks are done, and the last report"),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("file", help="the workflow's YAML file")
        s.add_argument(
            "--addr",
            default=os.environ.get("TOMUS_ADDR"),
            help="manager address (default: $TOMUS_ADDR)",
        )
        s.add_argument("--json", action="store_true", help="print the report as JSON")
        if name == "run":
            s.add_argument("--config", help="transfer settings (TOML, YAML or JSON)")
            s.add_argument(
                "--scheduler", help="a Dask scheduler address (default: a local cluster)"
            )
            s.add_argument("--workers", type=int, help="workers of the local Dask cluster")
            s.add_argument("--quiet", action="store_true", help="no progress lines")
    logs = sub.add_parser("logs", help="the stdout and stderr of a task's last run")
    logs.add_argument("file", help="the workflow's YAML file")
    logs.add_argument("task", help="the task's name")
    logs.add_argument("--addr", default=os.environ.get("TOMUS_ADDR"), help="manager address")
    for app, text, width in (
        ("synthetic", "the AFM paper's synthetic workflow: broadcast + reduction tree", 20),
        ("blast", "a BLAST-like workflow: split, N seed-and-extend matchers, assemble", 4),
    ):
        a = sub.add_parser(app, help=text, description=text)
        a.add_argument(
            "--size",
            type=parse_size,
            default=parse_size("4MiB"),
            help="bytes of each stage-in file (synthetic) or of the queries (blast); default 4MiB",
        )
        a.add_argument(
            "--width",
            type=int,
            default=width,
            help=f"jobs on the tree's first layer (synthetic) or matchers (blast); default {width}",
        )
        if app == "blast":
            a.add_argument(
                "--db-size", type=parse_size, help="bytes of each of the 3 databases (--size)"
            )
        a.add_argument(
            "--addr",
            default=os.environ.get("TOMUS_ADDR"),
            help="manager address (default: $TOMUS_ADDR; unset: an embedded cluster)",
        )
        a.add_argument("--providers", type=int, default=4, help="embedded cluster's providers")
        a.add_argument("--workers", type=int, help="workers of the local Dask cluster")
        a.add_argument("--config", help="transfer settings (TOML, YAML or JSON)")
        a.add_argument("--dir", help=f"namespace directory (default /wf/{app}-RANDOM)")
        a.add_argument("--no-check", action="store_true", help="skip the reference check")
        a.add_argument("--json", action="store_true", help="print the report as JSON")
        a.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def parse_size(text: str) -> int:
    try:
        return selection_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _app(args: argparse.Namespace) -> int:
    """``tomus workflow synthetic|blast``: on ``--addr``, or an embedded cluster."""
    import contextlib
    import uuid

    from tomus.workflow.apps import build, run_app

    d = args.dir or f"/wf/{args.cmd}-{uuid.uuid4().hex[:8]}"
    wf = build(args.cmd, args.size, width=args.width, db_size=getattr(args, "db_size", None),
               dir=d)  # fmt: skip
    config = SelectionConfig.load(args.config) if args.config else None
    with contextlib.ExitStack() as stack:
        work_dir = None
        if args.addr:
            client = tomus.connect(args.addr)
        else:
            cluster = stack.enter_context(tomus.local_cluster(providers=args.providers))
            client = cluster.connect()
            # Task directories on the providers' file system: outputs are hard-linked.
            work_dir = cluster.data_dir
        report, verdict = run_app(
            args.cmd,
            wf,
            client,
            verify=not args.no_check,
            work_dir=work_dir,
            config=config,
            n_workers=args.workers,
            progress=not args.quiet,
        )
    out = {"report": report.to_dict(), "check": verdict}
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"workflow {wf.name} in {d}: {len(report.tasks)} tasks, makespan {report.makespan:.2f}s"
        )
        for module, n in sorted(report.bytes_per_module().items()):
            print(f"  {module:8} {n} bytes moved")
        if verdict is not None:
            same = "equals" if verdict["equal"] else "DIFFERS FROM"
            print(f"  answer {same} the single-process reference")
            if args.cmd == "blast":
                print(
                    f"  {verdict['hits']} hits, planted matches found: "
                    f"{verdict['planted_found']}/{verdict['planted']}"
                )
    return 0 if verdict is None or verdict["equal"] else 3


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cmd in ("synthetic", "blast"):
        try:
            return _app(args)
        except (WorkflowError, ValueError) as e:
            print(f"tomus workflow: {e}", file=sys.stderr)
            return 1
    if not args.addr:
        print("tomus workflow: give --addr or set TOMUS_ADDR", file=sys.stderr)
        return 2
    try:
        wf = Workflow.from_yaml(args.file)
        wf.validate()
    except (WorkflowError, OSError) as e:
        print(f"tomus workflow: {e}", file=sys.stderr)
        return 2
    client = tomus.connect(args.addr)
    if args.cmd == "logs":
        return _logs(client, wf, args.task)
    if args.cmd == "status":
        st = status(client, wf)
        if args.json:
            print(json.dumps(st))
        else:
            for name, state in st["tasks"].items():
                print(f"{state:8} {name}")
        return 0
    config = SelectionConfig.load(args.config) if args.config else None
    dask_client = None
    if args.scheduler:
        from distributed import Client as DaskClient

        dask_client = DaskClient(args.scheduler)
    try:
        report = run(
            wf,
            client,
            dask_client=dask_client,
            config=config,
            n_workers=args.workers,
            progress=not args.quiet,
        )
    except WorkflowError as e:
        print(f"tomus workflow: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(
            f"workflow {wf.name}: {len(report.tasks)} tasks run, "
            f"{len(report.skipped)} already done, makespan {report.makespan:.2f}s"
        )
        for name, t in report.tasks.items():
            print(f"  {name:20} {t['seconds']:7.2f}s  on {t['worker']}")
        for module, n in sorted(report.bytes_per_module().items()):
            print(f"  {module:8} {n} bytes moved")
    return 0


def _logs(client: tomus.Client, wf: Workflow, task: str) -> int:
    if task not in {t.name for t in wf.tasks}:
        print(f"tomus workflow: no task {task!r} in {wf.name}", file=sys.stderr)
        return 2
    logs = task_logs(client, wf, task)
    if logs is None:
        print(f"tomus workflow: task {task!r} has not run yet", file=sys.stderr)
        return 1
    for stream in ("stdout", "stderr"):
        print(f"--- {task} {stream} ---")
        sys.stdout.write(logs[stream])
    return 0
