"""Python client throughput vs the Rust client, one client, 4 providers, 256 MiB.

Measures, against ``tomus.local_cluster(providers=4)``:
  python.write_one_call   one ``Blob.write(0, data)`` of the whole size
  python.append_4mib      4 MiB appends up to the size (the pattern of ``tomus bench`` S1)
  python.read_bytes       one ``Blob.read()`` of the whole size, returned as ``bytes``
  python.read_into        one ``Blob.read_into()`` into a preallocated numpy array
  python.read_16mib       ``read_into`` in 16 MiB windows (the pattern of ``tomus bench`` S2)
and, in the same run, the Rust client's figures:
  rust.cli_write_one_call ``tomus blob write ID 0 FILE`` from /dev/shm (same cluster)
  rust.cli_read           ``tomus blob read ID`` to a file in /dev/shm (64 MiB windows)
                          (both minus the time of a ``tomus blob stat``: process start and
                          connect)
  rust.s1_append_4mib     ``tomus bench`` S1 with one client (its own cluster of 4 providers)
  rust.s2_read_16mib      ``tomus bench`` S2 with one client
Prints JSON with the medians (MiB/s) and the Python/Rust ratios.

Run it with a release build of the extension (the JSON records the build profile):

    python3 -m venv bench/.venv
    bench/.venv/bin/pip install maturin numpy
    bench/.venv/bin/maturin build --release -m python/Cargo.toml -o target/wheels
    bench/.venv/bin/pip install --force-reinstall target/wheels/tomus-*.whl
    bench/.venv/bin/python bench/python_io.py [--size-mib 256] [--runs 3] [--fsync]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tomus
from tomus import _native

MIB = 1 << 20
BLOCK = 4 * MIB


def timed(fn: Callable[[], object], size: int, runs: int) -> dict[str, object]:
    speeds = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        speeds.append(size / MIB / (time.perf_counter() - start))
    return {
        "median_mib_s": round(statistics.median(speeds), 1),
        "runs": [round(s, 1) for s in speeds],
    }


def python_and_cli_figures(
    size: int, runs: int, fsync: bool
) -> tuple[dict[str, object], dict[str, object]]:
    data = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8).tobytes()
    py: dict[str, object] = {}
    cli: dict[str, object] = {}
    with tomus.local_cluster(providers=4, fsync=fsync) as cluster:
        client = cluster.connect()

        def write_one() -> None:
            client.create_blob(chunk_size=BLOCK).write(0, data)

        def append_blocks() -> None:
            blob = client.create_blob(chunk_size=BLOCK)
            view = memoryview(data)
            for at in range(0, size, BLOCK):
                blob.append(view[at : at + BLOCK])

        py["write_one_call"] = timed(write_one, size, runs)
        py["append_4mib"] = timed(append_blocks, size, runs)
        blob = client.create_blob(chunk_size=BLOCK)
        blob.write(0, data)
        assert blob.read(0, MIB) == data[:MIB]
        array = np.empty(size, dtype=np.uint8)

        def read_windows() -> None:
            for at in range(0, size, 16 * MIB):
                blob.read_into(array[at : at + 16 * MIB], at)

        py["read_bytes"] = timed(lambda: blob.read(), size, runs)
        py["read_into"] = timed(lambda: blob.read_into(array), size, runs)
        py["read_16mib"] = timed(read_windows, size, runs)
        assert array.tobytes() == data

        with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
            src, dst = Path(shm) / "in", Path(shm) / "out"
            src.write_bytes(data)
            cli_blob = client.create_blob(chunk_size=BLOCK)

            def tomus_cli(*args: str, out: Path | None = None) -> float:
                cmd = [sys.executable, "-m", "tomus", "--addr", cluster.addr, *args]
                start = time.perf_counter()
                with open(out or os.devnull, "wb") as sink:
                    subprocess.run(cmd, check=True, stdout=sink)
                return time.perf_counter() - start

            startup = statistics.median(
                tomus_cli("blob", "stat", str(blob.id)) for _ in range(5)
            )
            writes = [
                tomus_cli("blob", "write", str(cli_blob.id), "0", str(src))
                for _ in range(runs)
            ]
            reads = [
                tomus_cli("blob", "read", str(blob.id), out=dst) for _ in range(runs)
            ]
            assert dst.read_bytes() == data
        cli["startup_seconds"] = round(startup, 3)
        for name, times in (("cli_write_one_call", writes), ("cli_read", reads)):
            speeds = [size / MIB / max(t - startup, 1e-6) for t in times]
            cli[name] = {
                "median_mib_s": round(statistics.median(speeds), 1),
                "runs": [round(x, 1) for x in speeds],
            }
    return py, cli


def rust_figures(size: int, runs: int, fsync: bool) -> dict[str, object]:
    cmd = [
        sys.executable, "-m", "tomus", "bench", "--scenarios", "s1,s2", "--clients", "1",
        "--providers", "4", "--runs", str(runs),
        "--s1-size", f"{size // MIB}MiB", "--per-client", f"{size // MIB}MiB",
    ]  # fmt: skip
    if not fsync:
        cmd.append("--no-fsync")
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
    s1 = result["s1"]["points"][0]
    s2 = result["s2"]["points"][0]
    return {
        "s1_append_4mib": {
            "median_mib_s": round(s1["median"], 1),
            "runs": [round(r, 1) for r in s1["runs"]],
        },
        "s2_read_16mib": {
            "median_mib_s": round(s2["median"], 1),
            "runs": [round(r, 1) for r in s2["runs"]],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--fsync", action="store_true", help="providers fdatasync every chunk"
    )
    args = parser.parse_args()
    size = args.size_mib * MIB
    if _native.BUILD_PROFILE != "release":
        print(
            f"warning: the extension is a {_native.BUILD_PROFILE} build",
            file=sys.stderr,
        )
    rust = rust_figures(size, args.runs, args.fsync)
    python, cli = python_and_cli_figures(size, args.runs, args.fsync)
    rust.update(cli)

    def ratio(py: str, rs: str) -> float:
        p, r = python[py]["median_mib_s"], rust[rs]["median_mib_s"]  # type: ignore[index]
        return round(p / r, 3)

    report = {
        "config": {
            "providers": 4,
            "clients": 1,
            "size_bytes": size,
            "runs": args.runs,
            "fsync": args.fsync,
            "extension_build_profile": _native.BUILD_PROFILE,
            "python": platform.python_version(),
            "cores": os.cpu_count(),
        },
        "python": python,
        "rust": rust,
        "ratios_python_over_rust": {
            "write_one_call/cli_write_one_call": ratio(
                "write_one_call", "cli_write_one_call"
            ),
            "read_bytes/cli_read": ratio("read_bytes", "cli_read"),
            "read_into/cli_read": ratio("read_into", "cli_read"),
            "append_4mib/s1_append_4mib": ratio("append_4mib", "s1_append_4mib"),
            "read_16mib/s2_read_16mib": ratio("read_16mib", "s2_read_16mib"),
        },
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
