"""``tomus service ...``: data services on the storage nodes from the command line.

- ``submit compress --paths GLOB... --into ARCHIVE [--mode solid|dict] [--remove]``
- ``submit function --function MODULE:ATTR [--paths GLOB...] [--args JSON]``
- ``submit replicate --subtree PATH --target HOST:PORT``
- ``status ID [--wait] [--json]``, ``list [--json]``
- ``extract ARCHIVE [MEMBER...] (--to DIR | --restore)``, ``cat PATH``
- ``worker``: a Dask worker for this storage node (the ``storage`` resource set)

``submit`` prints the service id and returns at once: the service runs on the Dask workers
that have the ``storage`` resource (``--scheduler``, default ``$TOMUS_DASK_SCHEDULER``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import tomus
from tomus.services.records import ServiceState


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tomus service",
        description="Data services run on the storage nodes (Dask workers with the 'storage' "
        "resource), asynchronously: grouped compression, user functions, geo-replication.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--addr", default=os.environ.get("TOMUS_ADDR"), help="manager (default: $TOMUS_ADDR)"
    )
    sched = argparse.ArgumentParser(add_help=False)
    sched.add_argument(
        "--scheduler",
        default=os.environ.get("TOMUS_DASK_SCHEDULER"),
        help="the Dask scheduler the storage workers serve (default: $TOMUS_DASK_SCHEDULER)",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("submit", help="hand a service over and return its id at once")
    kinds = s.add_subparsers(dest="kind", required=True)
    c = kinds.add_parser("compress", parents=[common, sched], help="grouped compression")
    c.add_argument("--paths", nargs="+", required=True, help="files or globs ('/results/*')")
    c.add_argument("--into", required=True, help="the archive to write (e.g. /results.tzst)")
    c.add_argument(
        "--mode",
        choices=["solid", "dict"],
        default="solid",
        help="solid: one stream cut in frames (default); dict: a trained dictionary, a frame "
        "per file (many small files)",
    )
    c.add_argument("--level", type=int, default=9, help="zstd level (default 9)")
    c.add_argument("--frame-size", type=int, default=16 << 20, help="solid frame bytes")
    c.add_argument("--no-baseline", action="store_true", help="skip the per-file comparison")
    c.add_argument("--remove", action="store_true", help="remove the originals once archived")
    c.add_argument("--retries", type=int, default=0, help="runs again after an error")
    f = kinds.add_parser("function", parents=[common, sched], help="a user Python function")
    f.add_argument("--function", required=True, help="module:attribute, importable on workers")
    f.add_argument("--paths", nargs="*", default=[], help="its input (it runs next to them)")
    f.add_argument("--args", default="[]", help="JSON list of extra arguments")
    f.add_argument("--retries", type=int, default=0)
    r = kinds.add_parser("replicate", parents=[common, sched], help="geo-replicate a subtree")
    r.add_argument("--subtree", required=True)
    r.add_argument("--target", required=True, help="the other cluster's manager (HOST:PORT)")
    r.add_argument("--retries", type=int, default=0)
    for k in (c, f, r):
        k.add_argument("--wait", action="store_true", help="wait for it to finish")
        k.add_argument("--json", action="store_true", help="print {id} (or the state) as JSON")

    st = sub.add_parser("status", parents=[common], help="one service's state")
    st.add_argument("id")
    st.add_argument("--wait", action="store_true", help="until it finishes")
    st.add_argument("--json", action="store_true", help="the state as JSON")
    ls = sub.add_parser("list", parents=[common], help="every service, oldest first")
    ls.add_argument("--json", action="store_true", help="the states as a JSON list")
    ex = sub.add_parser("extract", parents=[common], help="members of a .tzst archive")
    ex.add_argument("archive")
    ex.add_argument("members", nargs="*", help="default: all")
    ex.add_argument("--to", help="a local directory")
    ex.add_argument("--restore", action="store_true", help="back to their namespace paths")
    ex.add_argument("--json", action="store_true", help="print the extracted paths as JSON")
    ct = sub.add_parser("cat", parents=[common], help="a file, or its copy in an archive")
    ct.add_argument("path")
    w = sub.add_parser("worker", parents=[sched], help="run a storage-node Dask worker here")
    w.add_argument("--nthreads", type=int, default=1)
    w.add_argument("--name", default=None)
    return p


def _line(st: ServiceState) -> str:
    prog = ""
    if st.progress and st.progress.get("total"):
        prog = f" {st.progress.get('done')}/{st.progress['total']}"
    where = f" on {st.attempts[-1].worker}" if st.attempts else ""
    return f"{st.id}  {st.state:8} {st.kind:9} attempts={len(st.attempts)}{prog}{where}  {st.name}"


def _show(st: ServiceState, as_json: bool) -> None:
    if as_json:
        print(json.dumps(st.to_dict(), default=str))
        return
    print(_line(st))
    for a in st.attempts:
        t = time.strftime("%H:%M:%S", time.gmtime(a.started))
        err = f": {a.error}" if a.error else ""
        print(f"  attempt {a.number} {a.outcome:7} {t}Z on {a.worker} (pid {a.pid}){err}")
    if st.progress:
        print(f"  progress {st.progress}")
    if st.result is not None:
        print(f"  result {json.dumps(st.result, default=str)}")
    if st.error:
        print(f"  error {st.error}")


def _dask(args: argparse.Namespace) -> Any:
    if not args.scheduler:
        raise SystemExit("tomus service: give --scheduler or set TOMUS_DASK_SCHEDULER")
    from distributed import Client

    return Client(args.scheduler, timeout=30, set_as_default=False)


def _submit(args: argparse.Namespace, client: tomus.Client) -> int:
    from tomus.services.compress import submit_compress
    from tomus.services.replicate import submit_replicate
    from tomus.services.runner import wait
    from tomus.services.user import submit_function

    with _dask(args) as dask:
        if args.kind == "compress":
            svc = submit_compress(
                client,
                dask,
                args.paths,
                args.into,
                mode=args.mode,
                level=args.level,
                frame_size=args.frame_size,
                baseline=not args.no_baseline,
                remove=args.remove,
                retries=args.retries,
            )
        elif args.kind == "function":
            extra = json.loads(args.args)
            if not isinstance(extra, list):
                raise SystemExit("tomus service: --args must be a JSON list")
            svc = submit_function(
                client, dask, args.function, *extra, paths=args.paths, retries=args.retries
            )
        else:
            svc = submit_replicate(client, dask, args.subtree, args.target, retries=args.retries)
    if not args.wait:
        print(json.dumps({"id": svc.id}) if args.json else svc.id)
        return 0
    st = wait(client, svc.id, timeout=24 * 3600)
    _show(st, args.json)
    return 0 if st.state == "done" else 1


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "worker":
        return _worker(args)
    if not args.addr:
        print("tomus service: give --addr or set TOMUS_ADDR", file=sys.stderr)
        return 2
    from tomus.services import compress, runner

    try:
        client = tomus.connect(args.addr)
        if args.cmd == "submit":
            return _submit(args, client)
        if args.cmd == "status":
            st = runner.status(client, args.id)
            if args.wait and not st.finished:
                st = runner.wait(client, args.id, timeout=24 * 3600)
            _show(st, args.json)
            return 0
        if args.cmd == "list":
            states = runner.list_services(client)
            if args.json:
                print(json.dumps([s.to_dict() for s in states], default=str))
            else:
                for s in states:
                    print(_line(s))
            return 0
        if args.cmd == "extract":
            if not args.to and not args.restore:
                print("tomus service extract: give --to DIR and/or --restore", file=sys.stderr)
                return 2
            done = compress.extract(
                client, args.archive, args.members or None, to=args.to, restore=args.restore
            )
            print(json.dumps(done) if args.json else "\n".join(done))
            return 0
        if args.cmd == "cat":
            sys.stdout.buffer.write(compress.read(client, args.path))
            return 0
    except (tomus.TomusError, ValueError, OSError) as e:
        # OSError: the Dask scheduler did not answer (TimeoutError is one).
        print(f"tomus service: {e}", file=sys.stderr)
        return 1
    return 2


def _worker(args: argparse.Namespace) -> int:
    """Runs ``dask worker SCHEDULER --resources storage=1`` in this process's place."""
    if not args.scheduler:
        print("tomus service worker: give --scheduler or set TOMUS_DASK_SCHEDULER", file=sys.stderr)
        return 2
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", args.scheduler]
    argv += ["--resources", "storage=1", "--nthreads", str(args.nthreads)]
    if args.name:
        argv += ["--name", args.name]
    os.execv(sys.executable, argv)
