"""Multi-site A-Brain over a slow inter-site link: the MetaReducer vs shipping the data to one
site first (TomusBlobs paper, section 5.2).

Two sites, each a real tomus cluster (a manager and two providers) with a Dask scheduler and
workers, all separate processes (python/tests/sites/sitenet.py). Site ``b`` runs in a network
namespace whose veth to the rest of the machine is shaped with ``tc`` (``--mbit`` each way, plus
``--delay-ms`` one-way delay): the wide-area link. Site ``a`` and the coordinator (the
MetaReducer, or the copy) run in the root namespace. Needs root for ``ip netns`` and ``tc``;
without it the link is loopback and unshaped, which the JSON says (``"shaped": false``).

The genotypes are pre-partitioned: each site holds half of the SNP blocks (and the imaging
matrix), as data collected at two places would be (setting that up is not timed). Then,
alternately, ``--repeat`` times:

- ``metareducer``: each site analyses its blocks with its own workers; the MetaReducer reads
  site b's reduced result across the link and combines it with a's as it arrives.
- ``ship``: site b's genotype blocks are read across the link and stored at site a, then site
  a's workers analyse all the blocks (site b's workers are unused: the data are no longer
  there). Its makespan is the copy plus the analysis; both are reported.

Reported per strategy: median makespan, median bytes on site b's veth (both directions, from
the kernel's counters, so including Dask's control messages and TCP/IP headers) and what the
job itself counted. The answers of the two strategies are checked to be the same.

    python bench/sites.py [--mbit 20] [--delay-ms 0] [--subjects 400] [--snps 32768]
        [--voxels 40] [--permutations 9] [--repeat 3] [--out bench/results/sites.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent / "python" / "tests" / "sites")
)

from sitenet import Link, RealSite
from tomus.compute.apps.abrain import abrain, load
from tomus.compute.apps.synth import genotypes_imaging
from tomus.compute.engine import Placement, Session
from tomus.sites import OpenSites, Sites, open_sites
from tomus.sites.apps import scatter_abrain
from tomus.sites.metareducer import MetaReducer, Part


def _pairs(res: Any) -> list[tuple[int, int, float]]:
    return [(s, v, p) for s, v, _, p in res.pairs]


def metareducer(
    sites: OpenSites, link: Link | None, meta: MetaReducer, parts: list[Part]
) -> dict[str, Any]:
    before = link.bytes() if link else 0
    start = time.perf_counter()
    res = meta.run(sites, parts)
    took = time.perf_counter() - start
    assert res.complete, res.missing
    return {
        "makespan_s": took,
        "veth_bytes": link.bytes() - before if link else None,
        "counted_inter_site_bytes": res.inter_site_bytes,
        "arrivals_s": {r.part: r.arrived for r in res.runs},
        "answer": _pairs(res.value),
    }


def ship(
    sites: OpenSites,
    link: Link | None,
    x: np.ndarray,
    y: np.ndarray,
    b_ids: np.ndarray,
    b_part: Part,
    args: argparse.Namespace,
) -> dict[str, Any]:
    a, b = sites.up["a"], sites.up["b"]
    before = link.bytes() if link else 0
    start = time.perf_counter()
    # Copy b's genotype blocks to site a (read across the link, store at a).
    blocks = sorted(
        (t.block for t in b_part.items if t.perms.start == 0), key=lambda c: c.first
    )
    shipped = np.concatenate(
        [c.read(b.tomus) for c in blocks], axis=0
    )  # SNPs x subjects
    local = np.ones(x.shape[1], dtype=bool)
    local[b_ids] = False
    full = np.empty((x.shape[1], x.shape[0]), dtype=np.int8)
    full[local] = x.T[local]  # a's own blocks (already at a; taken from memory here)
    full[b_ids] = shipped
    data = load(a.tomus, full.T, y, snp_block=args.snp_block)
    copied = time.perf_counter() - start
    s = Session(a.dask, a.site.addr, a.tomus, Placement(a.dask))
    res = abrain(data, args.permutations, session=s, seed=args.seed)
    took = time.perf_counter() - start
    return {
        "makespan_s": took,
        "copy_s": copied,
        "analysis_s": took - copied,
        "veth_bytes": link.bytes() - before if link else None,
        "shipped_bytes": int(shipped.nbytes),
        "answer": _pairs(res),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--mbit", type=float, default=20.0)
    p.add_argument("--delay-ms", type=float, default=0.0, help="needs the netem qdisc")
    p.add_argument("--subjects", type=int, default=400)
    p.add_argument("--snps", type=int, default=32768)
    p.add_argument("--voxels", type=int, default=40)
    p.add_argument("--permutations", type=int, default=9)
    p.add_argument("--snp-block", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("bench/results/sites.json"))
    args = p.parse_args()

    link = Link.create()
    site_a = site_b = None
    runs: dict[str, list[dict[str, Any]]] = {"metareducer": [], "ship": []}
    try:
        if link is not None:
            link.shape(args.mbit, args.delay_ms)
        site_a = RealSite("a", workers=1)
        site_b = RealSite("b", workers=1, link=link)
        x, y, planted = genotypes_imaging(
            args.subjects, args.snps, args.voxels, planted=3, seed=args.seed
        )
        with open_sites(
            Sites.of([site_a.site(), site_b.site()]), require=True
        ) as sites:
            meta, parts = scatter_abrain(
                sites, x, y, args.permutations, snp_block=args.snp_block, seed=args.seed
            )
            b_part = next(p for p in parts if p.site == "b")
            blocks = -(-args.snps // args.snp_block)
            b_blocks = [u for u in range(blocks) if u in set(b_part.units)]
            b_ids = np.concatenate(
                [np.arange(u * args.snp_block, min((u + 1) * args.snp_block, args.snps))
                 for u in b_blocks]
            )  # fmt: skip
            for i in range(args.repeat):
                for name in (
                    ("metareducer", "ship") if i % 2 == 0 else ("ship", "metareducer")
                ):
                    if name == "metareducer":
                        r = metareducer(sites, link, meta, parts)
                    else:
                        r = ship(sites, link, x, y, b_ids, b_part, args)
                    runs[name].append(r)
                    print(
                        name, {k: v for k, v in r.items() if k != "answer"}, flush=True
                    )
    finally:
        for site in (site_a, site_b):
            if site is not None:
                site.close()
        if link is not None:
            link.close()
    answers = {json.dumps(r.pop("answer")) for rs in runs.values() for r in rs}
    assert len(answers) == 1, "the strategies disagree"

    def med(name: str, key: str) -> float | None:
        vals = [r[key] for r in runs[name] if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    summary = {
        name: {
            "median_makespan_s": med(name, "makespan_s"),
            "median_veth_bytes": med(name, "veth_bytes"),
            "runs": rs,
        }
        for name, rs in runs.items()
    }
    mr, sh = summary["metareducer"], summary["ship"]
    doc = {
        "benchmark": "multi-site A-Brain: MetaReducer vs shipping site b's data to site a",
        "shaped": link is not None,
        "link_mbit": args.mbit if link else None,
        "link_delay_ms": args.delay_ms if link else None,
        "subjects": args.subjects,
        "snps": args.snps,
        "voxels": args.voxels,
        "permutations": args.permutations,
        "snp_block": args.snp_block,
        "genotype_bytes": int(x.nbytes),
        "site_b_genotype_bytes": int(len(b_ids) * args.subjects),
        "workers_per_site": 1,
        "planted": planted,
        "same_answer": True,
        "strategies": summary,
        "makespan_ratio_ship_over_metareducer": sh["median_makespan_s"]
        / mr["median_makespan_s"],
        "veth_bytes_ratio_ship_over_metareducer": (
            sh["median_veth_bytes"] / mr["median_veth_bytes"] if link else None
        ),
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "note": "2 cores shared with other jobs during the run: times are noisy",
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "strategies"}, indent=1))
    for name, s in summary.items():
        print(name, s["median_makespan_s"], s["median_veth_bytes"])


if __name__ == "__main__":
    main()
