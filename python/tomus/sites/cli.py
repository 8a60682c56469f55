"""``tomus compute abrain|mostfrequentwords --sites FILE ...``: the multi-site runs of the CLI.

``tomus.compute.__main__`` parses the command line and hands the run here when ``--sites`` is
given. MostFrequentWords takes local files or directories, cut into pieces and scattered across
the sites (``--piece-size``), or inputs already stored at a site, written ``SITE:PATH`` (a
namespace path of that site's cluster) or ``SITE:blob:ID``. A-Brain takes ``--synthetic`` data
or local ``.npy`` files (``--genotypes``: subjects x SNPs, ``--imaging``: subjects x voxels),
scattered by SNP blocks. ``--share SITE=WEIGHT`` overrides a site's scatter weight.

Exit status: 0 with a complete answer, 3 when sites failed and part of the answer is missing
(it is printed anyway, with the missing inputs), 1 on errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported when a run starts: the parser (every `tomus compute --help`) must not pay for
    # importing Dask.
    from tomus.sites.config import OpenSites
    from tomus.sites.metareducer import MultiSiteResult

__all__ = ["PARTIAL", "add_arguments", "main"]

PARTIAL = 3  # exit status of a run whose answer misses a failed site's part


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The multi-site options of an app's parser."""
    g = p.add_argument_group("multi-site (see python/README.md, 'Multi-site processing')")
    g.add_argument("--sites", metavar="FILE", help="run across the sites of this TOML file")
    g.add_argument(
        "--share",
        action="append",
        default=[],
        metavar="SITE=WEIGHT",
        help="scatter weight of a site (default: its share, else its worker count)",
    )
    g.add_argument(
        "--no-rerun", action="store_true", help="report a failed site's part, never rerun it"
    )


def _weights(opened: OpenSites, specs: list[str]) -> dict[str, float] | None:
    from tomus.sites.config import SitesError
    from tomus.sites.scatter import parse_shares

    if not specs:
        return None
    shares = parse_shares(specs)
    unknown = set(shares) - set(opened.sites.names)
    if unknown:
        raise SitesError(f"--share names unknown sites {sorted(unknown)}")
    return {n: shares.get(n, w) for n, w in opened.weights().items()}


def _mfw(args: argparse.Namespace, opened: OpenSites) -> MultiSiteResult:
    from tomus.sites.apps import (
        most_frequent_words_sites,
        read_local,
        resident_text_parts,
        scatter_text,
    )
    from tomus.sites.config import SitesError

    names = set(opened.sites.names)
    resident = [i for i in args.inputs if i.split(":", 1)[0] in names and ":" in i]
    if resident and len(resident) != len(args.inputs):
        raise SitesError("give either local inputs (scattered) or SITE:PATH inputs, not both")
    if resident:
        by_site: dict[str, list[int | str]] = {}
        for spec in resident:
            site, path = spec.split(":", 1)
            by_site.setdefault(site, []).append(int(path[5:]) if path.startswith("blob:") else path)
        parts = resident_text_parts(opened, by_site, args.split_size)
    else:
        parts = scatter_text(
            opened, read_local(args.inputs), piece_size=args.piece_size,
            split_size=args.split_size, weights=_weights(opened, args.share),
        )  # fmt: skip
    rerun = not args.no_rerun
    return most_frequent_words_sites(opened, parts, args.k, ratio=args.ratio, rerun=rerun)


def _abrain(args: argparse.Namespace, opened: OpenSites) -> tuple[MultiSiteResult, list[Any]]:
    import numpy as np

    from tomus.sites.apps import abrain_sites
    from tomus.sites.config import SitesError

    planted: list[Any] = []
    if args.synthetic:
        from tomus.compute.apps.synth import genotypes_imaging

        x, y, planted = genotypes_imaging(
            args.subjects, args.snps, args.voxels, planted=args.planted, seed=args.seed
        )
    elif args.genotypes and args.imaging:
        x, y = np.load(args.genotypes), np.load(args.imaging)
    else:
        raise SitesError("with --sites give --synthetic, or --genotypes X.npy --imaging Y.npy")
    res = abrain_sites(
        opened, x, y, args.permutations,
        snp_block=args.snp_block, weights=_weights(opened, args.share), alpha=args.alpha,
        keep_p=args.keep_p, seed=args.seed, ratio=args.ratio, rerun=not args.no_rerun,
    )  # fmt: skip
    return res, planted


def _report(res: MultiSiteResult) -> dict[str, Any]:
    return {
        "complete": res.complete,
        "elapsed": res.elapsed,
        "inter_site_bytes": res.inter_site_bytes,
        "arrivals": res.arrivals,
        "runs": [dataclasses.asdict(r) for r in res.runs],
        "missing": [
            {"site": m.site, "units": list(m.units), "inputs": list(m.inputs), "error": m.error}
            for m in res.missing
        ],
    }


def _print_status(res: MultiSiteResult) -> None:
    for r in res.runs:
        where = r.part if r.ran_on == r.part else f"{r.part} (rerun on {r.ran_on})"
        if r.arrived is not None:
            print(
                f"# site {where}: {r.map_tasks} maps, {r.reduce_tasks} reduces, result "
                f"{r.result_bytes} bytes at {r.arrived:.2f}s",
                file=sys.stderr,
            )
        else:
            print(f"# site {where} failed: {r.error}", file=sys.stderr)
    for m in res.missing:
        print(f"# MISSING from the answer: site {m.site}'s part ({m.error})", file=sys.stderr)
        for line in m.inputs:
            print(f"#   {line}", file=sys.stderr)
    print(f"# bytes between sites: {res.inter_site_bytes}", file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    """Runs the parsed ``tomus compute APP --sites FILE ...`` command."""
    import tomus
    from tomus.sites.config import SitesError, load_sites, open_sites

    try:
        sites = load_sites(args.sites)
        with open_sites(sites) as opened:
            for name, why in opened.down.items():
                print(f"# site {name} is down: {why}", file=sys.stderr)
            if args.app in ("mfw", "mostfrequentwords"):
                res = _mfw(args, opened)
                answer: dict[str, Any] = {"top": res.value or []}
            else:
                res, planted = _abrain(args, opened)
                v = res.value
                answer = {
                    "pairs": v.pairs if v else [],
                    "critical_r": v.critical_r if v else None,
                    "planted": planted,
                }
    except (SitesError, ValueError, tomus.TomusError) as e:
        print(f"tomus compute: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**answer, **_report(res)}, indent=1, default=str))
    else:
        _print_status(res)
        if "top" in answer:
            for word, count in answer["top"]:
                print(f"{word}\t{count}")
        else:
            print("snp\tvoxel\tr\tp_corrected")
            for snp, voxel, r, p in answer["pairs"]:
                print(f"{snp}\t{voxel}\t{r:.4f}\t{p:.4g}")
    return 0 if res.complete else PARTIAL
