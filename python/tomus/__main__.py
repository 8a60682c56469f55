"""``python -m tomus`` and the ``tomus`` script: the tomus command line."""

from __future__ import annotations

import os
import signal
import sys

from tomus import _native


def main() -> None:
    try:
        _main()
    except BrokenPipeError:
        # The reader of our output is gone (`tomus demo | head -1`): end quietly, as the
        # native commands do. stdout goes to /dev/null first, so that flushing it at exit
        # does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


def _main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["compute"]:
        # The compute layer's applications (Python, on Dask): tomus compute APP ...
        from tomus.compute.__main__ import main as compute_main

        sys.exit(compute_main(args[1:]))
    if args[:1] == ["workflow"]:
        # Workflows of tasks passing files (Python, on Dask): tomus workflow run FILE.yaml
        from tomus.workflow.cli import main as workflow_main

        sys.exit(workflow_main(args[1:]))
    if args[:1] == ["service"]:
        # Data services on the storage nodes (Python, on Dask): tomus service submit ...
        from tomus.services.cli import main as service_main

        sys.exit(service_main(args[1:]))
    if args[:1] == ["demo"]:
        if "--storage" not in args:
            # The main job runs the compute layer (Python, on Dask).
            from tomus.compute.demo import main as compute_demo

            sys.exit(compute_demo(args[1:]))
        # `tomus demo --storage`: the native storage demo.
        args = [a for a in args if a != "--storage"]
    parent = os.environ.pop("TOMUS_DIE_WITH_PARENT", None)
    if parent and not _native.die_with_parent(int(parent)):
        sys.exit(1)
    # The command runs in native code with the GIL released: let Ctrl-C end the process as it
    # would end the native binary (``tomus up`` installs its own handler to stop its cluster).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli_main(["tomus", *args]))


if __name__ == "__main__":
    main()
