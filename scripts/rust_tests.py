#!/usr/bin/env python3
"""Runs the workspace's Rust tests: builds every test binary once, then runs the binaries side
by side.

`cargo test` runs test binaries one after another, and most of their time goes to waiting on
the manager and provider processes, clusters and network namespaces they start: on a 2-core
machine the CPU sat two-thirds idle through six minutes of tests. Every binary is written to
share the machine (scratch directories, ports, namespace and bridge names are its own), so
running a few at once only fills that idle time.

Usage: scripts/rust_tests.py [--jobs N] [-- ARGS FOR EVERY TEST BINARY]
Every binary runs even when one fails; the outputs of failed ones are printed in full, and the
exit status is 1 if any failed. Doc tests run as one more job (`cargo test --doc`) for the crates
that have Rust examples in their docs: rustdoc takes 8 s a crate even to find none.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = re.compile(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")
# A fence in a doc comment, with its info string.
DOC_FENCE = re.compile(r"^\s*//[/!]\s*```(.*)$", re.MULTILINE)
# Info-string words that leave a fenced block Rust, which rustdoc compiles and runs.
RUST_FENCE_WORDS = {
    "rust",
    "ignore",
    "should_panic",
    "no_run",
    "compile_fail",
    "test_harness",
    "standalone",
    "edition2015",
    "edition2018",
    "edition2021",
    "edition2024",
}


@dataclass
class Job:
    name: str
    command: list[str]
    cwd: Path
    # Integration test binaries start servers and clusters: they go first, so the long ones
    # do not end up alone at the tail.
    integration: bool


@dataclass
class Outcome:
    job: Job
    code: int
    seconds: float
    output: str

    def counts(self) -> tuple[int, int, int]:
        passed = failed = ignored = 0
        for m in RESULT.finditer(self.output):
            passed += int(m[1])
            failed += int(m[2])
            ignored += int(m[3])
        return passed, failed, ignored


def has_doc_examples(package_dir: Path) -> bool:
    """Whether the crate's doc comments hold a block rustdoc would run as a doc test."""
    for source in (package_dir / "src").rglob("*.rs"):
        text = source.read_text(encoding="utf-8")
        if re.search(r"#!?\[doc\s*=\s*include_str!", text):
            return True
        # Fences open and close in turn: only an opening one says what the block is.
        for m in list(DOC_FENCE.finditer(text))[::2]:
            words = {w for w in re.split(r"[\s,]+", m[1].strip()) if w}
            if words <= RUST_FENCE_WORDS:
                return True
    return False


def package_name(package_id: str) -> str:
    """`tomus-wire` of `path+file:///.../crates/wire#tomus-wire@0.1.0` (or of the older
    `tomus-wire 0.1.0 (path+file:///...)`)."""
    if "#" in package_id:
        return package_id.rsplit("#", 1)[1].split("@")[0]
    return package_id.split(" ")[0]


def build() -> tuple[list[Job], list[str]]:
    """Builds every test binary of the workspace and lists them (cargo's own order), with
    the packages that have doc examples."""
    out = subprocess.run(
        [
            "cargo",
            "test",
            "--workspace",
            "--locked",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        sys.exit(out.returncode)
    jobs = []
    documented = []
    for line in out.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        target = msg["target"]
        package_dir = Path(msg["manifest_path"]).parent
        if "lib" in target["kind"] and has_doc_examples(package_dir):
            documented.append(package_name(msg["package_id"]))
        jobs.append(
            Job(
                name=str(Path(target["src_path"]).relative_to(ROOT)),
                command=[msg["executable"]],
                cwd=package_dir,
                integration="test" in target["kind"],
            )
        )
    return jobs, documented


def run(job: Job, args: list[str]) -> Outcome:
    # As `cargo test` runs a test binary; cargo itself (the doc tests) gets the plain
    # environment, or build scripts that watch it would run again.
    env = dict(os.environ)
    if job.command[0] != "cargo":
        env["CARGO_MANIFEST_DIR"] = str(job.cwd)
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        code = subprocess.run(
            job.command + args,
            cwd=job.cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        ).returncode
        log.seek(0)
        output = log.read()
    return Outcome(job, code, time.monotonic() - started, output)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("TOMUS_TEST_JOBS", "3")),
        help="test binaries run at once (default 3, or TOMUS_TEST_JOBS)",
    )
    parser.add_argument("args", nargs="*", help="passed to every test binary (after --)")
    opts = parser.parse_args()
    if opts.jobs < 1:
        parser.error("--jobs must be at least 1")

    jobs, documented = build()
    jobs.sort(key=lambda j: not j.integration)
    if documented:
        packages = [arg for name in documented for arg in ("-p", name)]
        jobs.append(
            Job(
                name="doc tests of " + ", ".join(documented),
                command=["cargo", "test", "--locked", "--doc", "--quiet", *packages],
                cwd=ROOT,
                integration=False,
            )
        )
    else:
        print("doc tests: no crate has Rust examples in its docs", flush=True)
    started = time.monotonic()
    failed: list[Outcome] = []
    totals = [0, 0, 0]
    with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        # Doc tests take no extra arguments: a test name filter means nothing to them.
        futures = [
            pool.submit(run, j, [] if j.name.startswith("doc tests") else opts.args) for j in jobs
        ]
        for future in as_completed(futures):
            o = future.result()
            passed, nfailed, ignored = o.counts()
            totals = [totals[0] + passed, totals[1] + nfailed, totals[2] + ignored]
            state = "ok" if o.code == 0 else "FAILED"
            print(
                f"{state:6} {o.seconds:6.1f}s  {o.job.name}  "
                f"({passed} passed, {nfailed} failed, {ignored} ignored)",
                flush=True,
            )
            if o.code != 0:
                failed.append(o)
    for o in failed:
        print(f"\n===== {o.job.name} (exit {o.code}) =====\n{o.output}", flush=True)
    print(
        f"\nRust tests: {totals[0]} passed, {totals[1]} failed, {totals[2]} ignored, "
        f"{len(jobs)} binaries in {time.monotonic() - started:.0f} s, {opts.jobs} at a time"
    )
    if failed:
        print("failed: " + ", ".join(o.job.name for o in failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
