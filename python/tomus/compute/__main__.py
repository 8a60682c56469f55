"""``python -m tomus.compute APP ...``: the reference applications from the command line.

Text apps (wordcount, mfw, grep) take inputs in the tomus namespace (files or directories,
``data/x.txt`` or ``tomus://data/x.txt``) or blob ids (``blob:12``). Numeric apps (kmeans, pca,
abrain) read datasets written by ``Dataset.write`` (the index blob's id, or a namespace file
holding the index), or generate synthetic data with ``--synthetic``.

pagerank takes an edge list (text lines ``src dst``) like the text apps take their inputs.

``--addr``: the tomus manager (default ``$TOMUS_ADDR``; without either an embedded cluster runs
for the job, which only makes sense with ``--synthetic``). ``--scheduler``: a Dask scheduler to
run on (default: a LocalCluster of ``--workers`` processes made for the job).

``--sites FILE`` (abrain, mfw alias mostfrequentwords): run across several tomus clusters, each
with its own Dask workers; see ``tomus.sites`` and python/README.md "Multi-site processing".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence

import numpy as np

import tomus
from tomus.compute.dataset import Dataset
from tomus.compute.engine import Session, session

__all__ = ["main"]


def _input(text: str) -> int | str:
    """``blob:N`` -> blob id N; anything else is a namespace path."""
    return int(text[5:]) if text.startswith("blob:") else text


def _dataset(s: Session, ref: str) -> Dataset:
    """A dataset by index blob id (``12`` or ``blob:12``) or by a namespace file holding it."""
    text = ref[5:] if ref.startswith("blob:") else ref
    if text.isdigit():
        return Dataset.open(s.tomus, int(text))
    path = text.removeprefix("tomus://").strip("/")
    return Dataset.open(s.tomus, int(s.tomus.namespace().stat(path)["blob"]))


@contextlib.contextmanager
def _session(args: argparse.Namespace) -> Iterator[Session]:
    addr = args.addr or None
    if args.scheduler:
        from distributed import Client

        with Client(args.scheduler, set_as_default=False) as dask, session(dask, addr) as s:
            yield s
    else:
        with session(None, addr, workers=args.workers, processes=not args.threads) as s:
            yield s


def _print_json(obj: object) -> None:
    print(
        json.dumps(obj, indent=1, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    )


# --- the apps -----------------------------------------------------------------------------------


def _wordcount(args: argparse.Namespace, s: Session) -> None:
    from tomus.compute.apps.text import word_count

    res = word_count(
        [_input(i) for i in args.inputs],
        session=s,
        partitions=args.partitions,
        split_size=args.split_size,
        output=args.output,
    )
    counts = sorted(res.value.items(), key=lambda wc: (-wc[1], wc[0]))
    if args.limit is not None:
        counts = counts[: args.limit]
    if args.json:
        _print_json({"counts": dict(counts), "files": res.files, "elapsed": res.elapsed})
        return
    for word, count in counts:
        print(f"{word}\t{count}")
    for f in res.files:
        print(f"# wrote tomus://{f}", file=sys.stderr)


def _mfw(args: argparse.Namespace, s: Session) -> None:
    from tomus.compute.apps.text import most_frequent_words, most_frequent_words_classic

    inputs = [_input(i) for i in args.inputs]
    if args.shape == "classic":
        top = most_frequent_words_classic(
            inputs, args.k, session=s, partitions=args.partitions, split_size=args.split_size
        ).value
    else:
        top = most_frequent_words(
            inputs, args.k, session=s, ratio=args.ratio, split_size=args.split_size
        ).value
    if args.json:
        _print_json({"top": top})
        return
    for word, count in top:
        print(f"{word}\t{count}")


def _grep(args: argparse.Namespace, s: Session) -> None:
    from tomus.compute.apps.text import grep

    res = grep(
        [_input(i) for i in args.inputs],
        args.pattern,
        session=s,
        ratio=args.ratio,
        split_size=args.split_size,
    )
    if args.json:
        _print_json({"matching_lines": res.value})
    else:
        print(res.value)


def _points(args: argparse.Namespace, s: Session) -> Dataset:
    if args.synthetic:
        from tomus.compute.apps.synth import clustered_points

        pts, _ = clustered_points(args.synthetic, args.dims, max(2, args.k_true), seed=args.seed)
        return Dataset.write(s.tomus, pts, objects=args.objects)
    if not args.dataset:
        raise SystemExit("give a DATASET (index blob id or namespace file) or --synthetic N")
    return _dataset(s, args.dataset)


def _kmeans(args: argparse.Namespace, s: Session) -> None:
    from tomus.compute.apps.kmeans import kmeans

    args.k_true = args.k
    ds = _points(args, s)
    res = kmeans(ds, args.k, args.iterations, session=s, seed=args.seed, tol=args.tol)
    if args.json:
        _print_json({"centers": res.centers, "inertia": res.inertia, "iterations": res.iterations})
        return
    print(f"# {ds.records} points, {res.iterations} iterations, inertia {res.inertia:.6g}")
    for i, c in enumerate(np.asarray(res.centers)):
        print(f"{i}\t" + " ".join(f"{v:.6g}" for v in c))


def _pca(args: argparse.Namespace, s: Session) -> None:
    from tomus.compute.apps.pca import pca

    args.k_true = 4
    ds = _points(args, s)
    res = pca(ds, args.components, session=s)
    if args.json:
        _print_json(
            {
                "components": res.components,
                "explained_variance": res.explained_variance,
                "mean": res.mean,
            }
        )
        return
    print(f"# {ds.records} points; mean " + " ".join(f"{v:.6g}" for v in res.mean))
    for i, (v, c) in enumerate(zip(res.explained_variance, res.components, strict=True)):
        print(f"{i}\t{v:.6g}\t" + " ".join(f"{x:.6g}" for x in c))


def _abrain(args: argparse.Namespace, s: Session) -> None:
    from tomus.compute.apps.abrain import ABrainData, abrain, load

    planted: list[tuple[int, int]] = []
    if args.synthetic:
        from tomus.compute.apps.synth import genotypes_imaging

        x, y, planted = genotypes_imaging(
            args.subjects, args.snps, args.voxels, planted=args.planted, seed=args.seed
        )
        data = load(s.tomus, x, y, snp_block=args.snp_block)
    else:
        if not (args.genotypes and args.imaging):
            raise SystemExit("give --genotypes and --imaging datasets, or --synthetic")
        g, im = _dataset(s, args.genotypes), _dataset(s, args.imaging)
        subjects = int(np.prod(g.shape)) if g.shape else 1
        if im.records != subjects:
            raise SystemExit(f"genotypes have {subjects} subjects, imaging {im.records}")
        voxels = int(np.prod(im.shape)) if im.shape else 1
        data = ABrainData(g, im, subjects, g.records, voxels)
    res = abrain(
        data,
        args.permutations,
        session=s,
        alpha=args.alpha,
        keep_p=args.keep_p,
        seed=args.seed,
        ratio=args.ratio,
    )
    if args.json:
        _print_json(
            {
                "pairs": res.pairs,
                "critical_r": res.critical_r,
                "complete": res.complete,
                "planted": planted,
            }
        )
        return
    print(
        f"# {data.subjects} subjects, {data.snps} SNPs, {data.voxels} voxels, "
        f"{args.permutations} permutations; critical |r| {res.critical_r:.4f}"
    )
    if planted:
        print(f"# planted: {planted}")
    print("snp\tvoxel\tr\tp_corrected")
    for snp, voxel, r, p in res.pairs:
        print(f"{snp}\t{voxel}\t{r:.4f}\t{p:.4g}")


def _pagerank(args: argparse.Namespace, s: Session) -> None:
    from tomus.compute.apps.pagerank import pagerank

    res = pagerank(
        [_input(i) for i in args.inputs],
        args.iterations,
        args.damping,
        session=s,
        split_size=args.split_size,
    )
    top = res.top(args.top)
    if args.json:
        print(json.dumps({"iterations": res.iterations, "top": [[n, r] for n, r in top]}))
        return
    print(f"# {len(res.nodes)} nodes, {res.edges} edges, {res.iterations} iterations")
    print("node\trank")
    for node, rank in top:
        print(f"{node}\t{rank:.9g}")


# --- the parser ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--addr",
        default=os.environ.get("TOMUS_ADDR"),
        help="tomus manager (default: $TOMUS_ADDR, else an embedded cluster)",
    )
    common.add_argument("--scheduler", help="Dask scheduler address (default: a LocalCluster)")
    common.add_argument("--workers", type=int, help="LocalCluster workers (default: one per core)")
    common.add_argument(
        "--threads",
        action="store_true",
        help="LocalCluster workers as threads of this process, not worker processes: starts "
        "in a fraction of a second, no pickling between processes; for the numpy apps "
        "(kmeans, pca, abrain, pagerank), not the pure-Python text apps",
    )
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    common.add_argument("--seed", type=int, default=0)

    text = argparse.ArgumentParser(add_help=False)
    text.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="namespace file or directory (tomus://... or a path), or blob:ID",
    )
    text.add_argument("--split-size", type=int, help="bytes per split (rounded to chunks)")

    numeric = argparse.ArgumentParser(add_help=False)
    numeric.add_argument(
        "dataset",
        nargs="?",
        metavar="DATASET",
        help="index blob id or namespace file of a Dataset.write dataset",
    )
    numeric.add_argument("--synthetic", type=int, metavar="N", help="generate N points instead")
    numeric.add_argument("--dims", type=int, default=8, help="dimensions of synthetic points")
    numeric.add_argument("--objects", type=int, default=2, help="data objects of synthetic data")

    p = argparse.ArgumentParser(
        prog="tomus compute",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="app", required=True, metavar="APP")

    a = sub.add_parser("wordcount", parents=[common, text], help="count every word")
    a.add_argument("--partitions", type=int, default=2, help="reducers")
    a.add_argument("--output", help="namespace directory for part-NNNNN files")
    a.add_argument("--limit", type=int, help="print only the N most frequent")
    a.set_defaults(run=_wordcount)

    a = sub.add_parser(
        "mfw",
        aliases=["mostfrequentwords"],
        parents=[common, text],
        help="the k most frequent words (MostFrequentWords)",
    )
    a.add_argument("-k", type=int, default=10)
    a.add_argument("--ratio", type=int, default=5, help="IterativeReduce reduction ratio")
    a.add_argument("--shape", choices=["tree", "classic"], default="tree")
    a.add_argument("--partitions", type=int, default=2, help="reducers of the classic shape")
    a.add_argument(
        "--piece-size", type=int, default=4 << 20, help="with --sites: bytes per scatter unit"
    )
    _sites_arguments(a)
    a.set_defaults(run=_mfw)

    a = sub.add_parser("grep", parents=[common], help="count the lines matching a regex")
    a.add_argument("pattern")
    a.add_argument("inputs", nargs="+", metavar="INPUT")
    a.add_argument("--split-size", type=int)
    a.add_argument("--ratio", type=int, default=4)
    a.set_defaults(run=_grep)

    a = sub.add_parser("kmeans", parents=[common, numeric], help="k-means clustering")
    a.add_argument("-k", type=int, default=4)
    a.add_argument("--iterations", type=int, default=10)
    a.add_argument("--tol", type=float, default=0.0)
    a.set_defaults(run=_kmeans)

    a = sub.add_parser("pca", parents=[common, numeric], help="principal components")
    a.add_argument("--components", type=int, default=2)
    a.set_defaults(run=_pca)

    a = sub.add_parser("abrain", parents=[common], help="A-Brain univariate analysis")
    a.add_argument("--genotypes", help="genotype dataset (records: SNPs, over subjects)")
    a.add_argument("--imaging", help="imaging dataset (records: subjects, over voxels)")
    a.add_argument("--synthetic", action="store_true", help="generate data with planted pairs")
    a.add_argument("--subjects", type=int, default=200)
    a.add_argument("--snps", type=int, default=1000)
    a.add_argument("--voxels", type=int, default=50)
    a.add_argument("--planted", type=int, default=3)
    a.add_argument("--snp-block", type=int, default=256)
    a.add_argument("--permutations", type=int, default=99)
    a.add_argument("--alpha", type=float, default=0.05)
    a.add_argument("--keep-p", type=float, default=1e-3)
    a.add_argument("--ratio", type=int, default=8)
    _sites_arguments(a)
    a.set_defaults(run=_abrain)

    a = sub.add_parser(
        "pagerank", parents=[common], help="PageRank of an edge list (lines 'src dst')"
    )
    a.add_argument("inputs", nargs="+", metavar="EDGES", help="namespace file/dir or blob:ID")
    a.add_argument("--iterations", type=int, default=20, help="fixed number of iterations")
    a.add_argument("--damping", type=float, default=0.85)
    a.add_argument("--top", type=int, default=10, help="print the K highest ranks")
    a.add_argument("--split-size", type=int, help="bytes of edge list per parse task")
    a.set_defaults(run=_pagerank)
    return p


def _sites_arguments(p: argparse.ArgumentParser) -> None:
    from tomus.sites.cli import add_arguments

    add_arguments(p)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "sites", None):
        from tomus.sites.cli import main as sites_main

        return sites_main(args)
    try:
        with _session(args) as s:
            args.run(args, s)
    except tomus.TomusError as e:
        print(f"tomus compute: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
