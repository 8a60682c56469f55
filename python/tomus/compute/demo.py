"""The demo main job: storage cluster + Dask + three applications, with a short report.

``main(argv)`` starts an embedded tomus cluster and a Dask LocalCluster on this machine,
generates its inputs (text from the Python standard library's sources, clustered points, and
genotype/imaging matrices with a few planted associations), loads them into tomus, runs
MostFrequentWords (IterativeReduce), KMeans (generalized reduction, up to 10 passes), A-Brain
(IterativeReduce over permutations x SNP blocks) and a short BLAST-like workflow (tasks
passing registered files, ``tomus.workflow``), then prints what was found, the time of each
phase and the storage traffic. ``--size`` scales every input from a few seconds of work to many
minutes. The ``tomus demo`` command is meant to call this function.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import numpy as np

import tomus
from tomus.compute.apps.abrain import ABrainData, abrain, load
from tomus.compute.apps.kmeans import kmeans
from tomus.compute.apps.synth import clustered_points, genotypes_imaging, pieces, stdlib_text
from tomus.compute.apps.text import most_frequent_words
from tomus.compute.dataset import Dataset
from tomus.compute.engine import Session, TaskRecord, session
from tomus.compute.iterative import reduce_tasks_needed
from tomus.compute.splits import plan_splits

if TYPE_CHECKING:  # tqdm is optional: imported when there is a terminal to draw bars on
    from tqdm import tqdm as Tqdm

__all__ = ["main", "parse_size"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``123``, ``64k``, ``32MiB``, ``1.5GB`` (binary units) -> bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    tasks: int = 0

    @property
    def throughput(self) -> float:
        """Bytes moved to and from tomus per second of the phase."""
        return (self.bytes_read + self.bytes_written) / self.seconds if self.seconds else 0.0


@dataclass
class Report:
    size: int
    providers: int
    workers: int
    phases: list[Phase] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Phase]:
        p = Phase(name)
        start = time.perf_counter()
        try:
            yield p
        finally:
            p.seconds = time.perf_counter() - start
            self.phases.append(p)

    def as_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "providers": self.providers,
            "workers": self.workers,
            "phases": [
                {
                    "name": p.name,
                    "seconds": round(p.seconds, 3),
                    "tasks": p.tasks,
                    "bytes_read": p.bytes_read,
                    "bytes_written": p.bytes_written,
                    "throughput_bytes_per_s": round(p.throughput),
                }
                for p in self.phases
            ],
            "results": self.results,
        }


class _Progress:
    """A progress bar per job (tqdm on stderr when available and attached to a terminal)."""

    def __init__(self, enabled: bool, out: TextIO) -> None:
        self.enabled = enabled
        self.out = out
        try:
            import tqdm  # noqa: F401

            self.tqdm = True
        except ImportError:
            self.tqdm = False

    @contextlib.contextmanager
    def bar(self, label: str, total: int, phase: Phase) -> Iterator[Callable[[TaskRecord], None]]:
        bar: Tqdm[NoReturn] | None = None
        started = time.perf_counter()
        if self.enabled and self.tqdm and self.out.isatty():
            from tqdm import tqdm

            bar = tqdm(total=total, desc=f"{label:<20}", unit="task", file=self.out, leave=True)
        elif self.enabled:  # a log, not a terminal: one line when the job starts and ends
            print(f"{label}: {total} tasks ...", file=self.out, flush=True)

        def on_task(record: TaskRecord) -> None:
            phase.tasks += 1
            phase.bytes_read += record.bytes_read
            phase.bytes_written += record.bytes_written
            if bar is not None:
                if bar.total is not None and bar.n >= bar.total:  # more tasks than planned
                    bar.total += 1
                bar.update(1)

        try:
            yield on_task
        finally:
            if bar is not None:
                bar.close()
            elif self.enabled:
                took = time.perf_counter() - started
                print(f"{label}: {phase.tasks} tasks done in {took:.2f}s", file=self.out)


def _words_phase(s: Session, report: Report, progress: _Progress, text_blobs: list[int]) -> None:
    splits = plan_splits(s.tomus, text_blobs, split_size=1 << 20)
    total = len(splits) + reduce_tasks_needed(len(splits), 4)
    with (
        report.phase("most frequent words") as ph,
        progress.bar("MostFrequentWords", total, ph) as cb,
    ):
        res = most_frequent_words(splits, 10, ratio=4, session=s, on_task=cb)
    report.results["top_words"] = [[w, c] for w, c in res.value]
    report.results["words_job"] = {
        "map_tasks": res.map_tasks,
        "reduce_tasks": res.reduce_tasks,
        "reduce_factor": res.reduce_factor,
    }


def _kmeans_phase(s: Session, report: Report, progress: _Progress, ds: Dataset, k: int) -> None:
    iterations = 10
    per_pass = len(ds.tasks()) + reduce_tasks_needed(len(ds.tasks()), 4)
    with (
        report.phase("kmeans") as ph,
        progress.bar(f"KMeans (up to {iterations} passes)", per_pass * iterations, ph) as cb,
    ):
        res = kmeans(ds, k, iterations, session=s, seed=1, on_task=cb)
    order = np.lexsort(res.centers.T[::-1])
    report.results["kmeans"] = {
        "k": k,
        "iterations": res.iterations,
        "max_iterations": iterations,
        "converged": res.converged,
        "inertia": res.inertia,
        "centers": np.round(res.centers[order], 3).tolist(),
    }
    if progress.enabled:  # the bar announced the most passes KMeans may take: say how it ended
        print(f"KMeans {_kmeans_passes(report.results['kmeans'])}", file=progress.out)


def _abrain_phase(
    s: Session,
    report: Report,
    progress: _Progress,
    data: ABrainData,
    planted: list[tuple[int, int]],
) -> None:
    perms = 49
    tasks = (perms + 1) * len(data.genotypes.chunks)
    total = tasks + reduce_tasks_needed(tasks, 8)
    with report.phase("a-brain") as ph, progress.bar("A-Brain", total, ph) as cb:
        res = abrain(data, perms, alpha=0.05, seed=7, session=s, on_task=cb)
    found = {(a, b) for a, b, _, _ in res.pairs}
    report.results["abrain"] = {
        "subjects": data.subjects,
        "snps": data.snps,
        "voxels": data.voxels,
        "permutations": perms,
        "planted": [list(p) for p in planted],
        "significant": [
            {"snp": a, "voxel": b, "r": round(r, 4), "p_corrected": p} for a, b, r, p in res.pairs
        ],
        "planted_found": sum(1 for p in planted if p in found),
        "false_positives": len(found - set(planted)),
        "critical_r": round(res.critical_r, 4),
        "complete": res.complete,
    }


def _workflow_phase(s: Session, report: Report, progress: _Progress, size: int) -> None:
    """The BLAST-like workflow (tomus.workflow): queries split over one matcher per worker
    slot, 3 shared databases broadcast to them, hits checked against one process's."""
    from tomus.workflow.apps import blast, check
    from tomus.workflow.runner import run as run_workflow

    queries = max(64 << 10, size // 64)
    matchers = 2 * max(1, len(s.dask.scheduler_info()["workers"]))
    wf = blast.workflow(queries, matchers=matchers, dir=f"/demo/blast-{time.time_ns()}")
    with report.phase("workflow (blast)") as ph:
        if progress.enabled:
            print(f"BLAST-like workflow: {len(wf.tasks)} tasks ...", file=progress.out)
        res = run_workflow(wf, s.tomus, dask_client=s.dask, progress=False)
        ph.tasks = len(res.tasks)
        ph.bytes_read = sum(res.bytes_per_module().values())
        ph.bytes_written = sum(n for t in res.tasks.values() for n in t["outputs"].values())
    verdict = check("blast", wf, s.tomus)
    report.results["blast_workflow"] = {
        "queries_bytes": queries,
        "matchers": matchers,
        "tasks": len(res.tasks),
        "makespan": round(res.makespan, 3),
        "bytes_per_module": res.bytes_per_module(),
        "hits": verdict["hits"],
        "planted": verdict["planted"],
        "planted_found": verdict["planted_found"],
        "equals_reference": verdict["equal"],
    }


def run(size: int, providers: int, workers: int, progress: _Progress) -> Report:
    """The whole demo; returns its report."""
    report = Report(size, providers, workers)
    with contextlib.ExitStack() as stack:
        with report.phase("start clusters"):
            s = stack.enter_context(session(None, None, workers=workers, providers=providers))
        client = s.tomus
        with report.phase("generate + load") as ph:
            text = stdlib_text(size)
            blobs = []
            for part in pieces(text, 4):
                blob = client.create_blob(chunk_size=1 << 20)
                blob.write(0, part)
                blobs.append(blob.id)
            n_points, k = max(20_000, size // 64), 8
            points, truth = clustered_points(n_points, 8, k, seed=3, spread=1.5)
            ds = Dataset.write(client, points, objects=4, chunk_bytes=1 << 20)
            snps = max(1024, min(size // 16384, 1 << 16))
            x, y, planted = genotypes_imaging(200, snps, 256, planted=4, effect=0.9, seed=5)
            data = load(client, x, y, snp_block=512, objects=2)
            ph.bytes_written = len(text) + points.nbytes + x.nbytes + y.nbytes
            report.results["inputs"] = {
                "text_bytes": len(text),
                "points": n_points,
                "genotypes": list(x.shape),
                "imaging": list(y.shape),
            }
        _words_phase(s, report, progress, blobs)
        _kmeans_phase(s, report, progress, ds, k)
        found = np.array(report.results["kmeans"]["centers"])
        gaps = np.sqrt(((found[:, None, :] - truth[None, :, :]) ** 2).sum(2))
        report.results["kmeans"]["max_distance_to_true_center"] = round(float(gaps.min(1).max()), 3)
        _abrain_phase(s, report, progress, data, planted)
        _workflow_phase(s, report, progress, size)
    return report


def _kmeans_passes(km: dict[str, Any]) -> str:
    """How the KMeans job ended: ``converged after 3 passes`` (the demo announces the most
    passes it may take, so the report says why it took fewer)."""
    n = km["iterations"]
    passes = f"{n} pass" if n == 1 else f"{n} passes"
    if km["converged"]:
        return f"converged after {passes}"
    return f"stopped after {passes} without converging"


def _print_report(report: Report, out: TextIO) -> None:
    r = report.results
    print(f"\ntomus compute demo: {_human(report.size)} of text, {report.providers} providers, "
          f"{report.workers} Dask workers", file=out)  # fmt: skip
    print("\nMost frequent words:", file=out)
    for w, c in r["top_words"]:
        print(f"  {w:<16} {c:>10,}", file=out)
    km = r["kmeans"]
    print(
        f"\nKMeans: k={km['k']}, {_kmeans_passes(km)}, inertia {km['inertia']:.4g}, "
        f"farthest center {km['max_distance_to_true_center']} from a true one",
        file=out,
    )
    for c in km["centers"]:
        print("  [" + ", ".join(f"{v:7.2f}" for v in c) + "]", file=out)
    ab = r["abrain"]
    print(f"\nA-Brain: {ab['subjects']} subjects x {ab['snps']} SNPs x {ab['voxels']} voxels, "
          f"{ab['permutations']} permutations (|r| > {ab['critical_r']} is significant)",
          file=out)  # fmt: skip
    planted = {tuple(p) for p in ab["planted"]}
    for hit in ab["significant"]:
        mark = "planted" if (hit["snp"], hit["voxel"]) in planted else "NOT planted"
        print(f"  SNP {hit['snp']:>6}  voxel {hit['voxel']:>4}  r={hit['r']:+.3f}  "
              f"p_corrected={hit['p_corrected']:.3f}  ({mark})", file=out)  # fmt: skip
    print(f"  planted associations found: {ab['planted_found']}/{len(planted)}, "
          f"false positives: {ab['false_positives']}", file=out)  # fmt: skip
    bw = r["blast_workflow"]
    moved = ", ".join(f"{_human(n)} by {m}" for m, n in sorted(bw["bytes_per_module"].items()))
    print(f"\nBLAST-like workflow: {bw['tasks']} tasks ({bw['matchers']} matchers), "
          f"{bw['hits']} hits, planted matches found {bw['planted_found']}/{bw['planted']}, "
          f"{'equal to' if bw['equals_reference'] else 'DIFFERENT from'} one process's; "
          f"files passed: {moved}", file=out)  # fmt: skip
    print("\nPhases:", file=out)
    print(f"  {'phase':<20} {'time':>8} {'tasks':>6} {'read':>11} {'written':>11} {'storage':>13}",
          file=out)  # fmt: skip
    for p in report.phases:
        print(f"  {p.name:<20} {p.seconds:7.2f}s {p.tasks:>6} {_human(p.bytes_read):>11} "
              f"{_human(p.bytes_written):>11} {_human(p.throughput) + '/s':>13}",
              file=out)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """The demo's command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="tomus demo",
        description="Run MostFrequentWords, KMeans, A-Brain and a BLAST-like workflow on an "
        "embedded tomus cluster and a Dask LocalCluster, and report what they found and how "
        "long it took.",
    )
    parser.add_argument("--size", type=parse_size, default=parse_size("16MiB"),
                        help="text to process, which also scales the other inputs "
                        "(default 16MiB: well under a minute)")  # fmt: skip
    parser.add_argument("--providers", type=int, default=4, help="storage providers (default 4)")
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes (default 2)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    progress = _Progress(not args.no_progress, sys.stderr)
    try:
        report = run(args.size, args.providers, args.workers, progress)
    except tomus.TomusError as e:
        print(f"tomus demo: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        print()
    else:
        _print_report(report, sys.stdout)
    ab = report.results["abrain"]
    bw = report.results["blast_workflow"]
    blast_ok = bw["planted_found"] == bw["planted"] and bw["equals_reference"]
    abrain_ok = ab["planted_found"] == len(ab["planted"]) and not ab["false_positives"]
    return 0 if abrain_ok and blast_ok else 2


if __name__ == "__main__":  # Dask's worker processes re-import the main module: keep this guard
    sys.exit(main(sys.argv[1:]))
