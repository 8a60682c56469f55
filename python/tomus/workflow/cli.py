"""``tomus workflow run|status FILE.yaml``: the workflow runner from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys

import tomus
from tomus.workflow.dag import Workflow, WorkflowError
from tomus.workflow.runner import run, status
from tomus.workflow.selection import SelectionConfig


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
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
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
