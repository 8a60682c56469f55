"""A-Brain and MostFrequentWords across two real sites give exactly the single-site answer,
and what crosses between the sites is the sites' reduced results (counted on the veth of site
b's network namespace when the machine permits one, and by the MetaReducer always)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sitejobs import SlowCount
from sitenet import Link, RealSite

from tomus.compute.apps.abrain import abrain, load, reference_abrain
from tomus.compute.apps.synth import genotypes_imaging
from tomus.compute.apps.text import (
    _count_split,
    _merge_counts,
    _TopK,
    most_frequent_words,
    reference_top_words,
)
from tomus.compute.engine import Placement, Session
from tomus.sites import (
    MetaReducer,
    OpenSites,
    PartRun,
    Site,
    Sites,
    abrain_sites,
    most_frequent_words_sites,
    open_sites,
)
from tomus.sites.apps import scatter_abrain, scatter_text


@pytest.fixture(scope="module")
def sites(site_a: RealSite, site_b: RealSite) -> Iterator[OpenSites]:
    with open_sites(Sites.of([site_a.site(), site_b.site()]), require=True) as opened:
        yield opened


def _single_site(sites: OpenSites, name: str) -> Session:
    rt = sites.up[name]
    return Session(rt.dask, rt.site.addr, rt.tomus, Placement(rt.dask))


def text(lines: int, seed: int) -> bytes:
    """Zipf-distributed words over a 2000-word vocabulary (ties and a long tail)."""
    rng = np.random.default_rng(seed)
    ids = np.minimum(rng.zipf(1.3, size=lines * 10), 2000)
    words = [b"w%d" % i for i in ids]
    return b"\n".join(b" ".join(words[i : i + 10]) for i in range(0, len(words), 10)) + b"\n"


def test_mfw_across_sites_is_the_single_site_answer_and_only_results_cross(
    sites: OpenSites, link: Link | None
) -> None:
    data = text(60_000, seed=3)  # ~0.6 MB
    parts = scatter_text(sites, [("corpus.txt", data)], piece_size=32 << 10)
    # Default plan: proportional to the sites' workers (2 and 1), contiguous.
    units = {p.site: p.units for p in parts}
    total = len(units["a"]) + len(units["b"])
    assert abs(len(units["a"]) - 2 * total / 3) <= 1
    assert units["a"] == tuple(range(len(units["a"])))
    before = link.bytes() if link else 0
    res = most_frequent_words_sites(sites, parts, k=25)
    crossed = link.bytes() - before if link else None

    assert res.complete and not res.missing
    assert res.value == reference_top_words(data, 25)
    blob = sites.up["a"].tomus.create_blob()
    blob.write(0, data)
    single = most_frequent_words([blob.id], 25, session=_single_site(sites, "a"))
    assert res.value == single.value

    runs = {r.part: r for r in res.runs}
    assert set(runs) == {"a", "b"} and not any(r.remote for r in res.runs)
    assert sorted(res.arrivals) == ["a", "b"]
    b_input = sum(len(p.data) for p in _pieces(data, units["b"]))
    assert runs["b"].bytes_read >= b_input  # b's maps read b's data, at b
    # What the MetaReducer moved between sites: b's reduced result, nothing else.
    assert res.inter_site_bytes == runs["b"].result_bytes > 0
    if crossed is not None:
        # Everything on b's wire (the result, the job description, Dask's control messages,
        # TCP/IP headers) stays a small fraction of the data b processed.
        print(f"veth bytes {crossed}, b's result {runs['b'].result_bytes}, b's input {b_input}")
        assert runs["b"].result_bytes <= crossed < b_input / 4


def _pieces(data: bytes, units: tuple[int, ...]) -> list[object]:
    from tomus.sites import cut_pieces

    pieces = cut_pieces([("corpus.txt", data)], 32 << 10)
    return [pieces[u] for u in units]


def test_abrain_across_sites_is_the_single_site_answer(sites: OpenSites, link: Link | None) -> None:
    x, y, planted = genotypes_imaging(150, 320, 60, planted=3, effect=0.8, seed=11)
    perms = 39
    ref = reference_abrain(x, y, perms, alpha=0.05, seed=4)
    single = abrain(
        load(sites.up["a"].tomus, x, y, snp_block=64), perms, alpha=0.05, seed=4,
        session=_single_site(sites, "a"),
    )  # fmt: skip
    meta, parts = scatter_abrain(sites, x, y, perms, snp_block=64, alpha=0.05, seed=4)
    before = link.bytes() if link else 0
    res = meta.run(sites, parts)
    crossed = link.bytes() - before if link else None
    # An explicit assignment interleaving the blocks gives the same answer too.
    inter = abrain_sites(
        sites, x, y, perms, snp_block=64, alpha=0.05, seed=4,
        assignment={"a": [1, 3], "b": [0, 2, 4]},
    )  # fmt: skip
    for r in (res, inter):
        assert r.complete
        got = r.value
        assert sorted((s, v) for s, v, _, _ in got.pairs) == planted
        for want in (ref, single):
            assert [(s, v, p) for s, v, _, p in got.pairs] == [
                (s, v, p) for s, v, _, p in want.pairs
            ]
            rs, want_rs = [t[2] for t in got.pairs], [t[2] for t in want.pairs]
            np.testing.assert_allclose(rs, want_rs, rtol=1e-9)
            np.testing.assert_allclose(got.null_max, want.null_max, rtol=1e-9)
        assert got.critical_r == pytest.approx(ref.critical_r, rel=1e-9)
    runs = {r.part: r for r in inter.runs}
    assert runs["b"].map_tasks >= 3  # b's three blocks, each with its permutations
    if crossed is not None:
        b_bytes = sum(r.bytes_read for r in res.runs if r.part == "b")
        print(f"veth bytes {crossed}; b's maps read {b_bytes}; results {res.inter_site_bytes}")
        # The genotype blocks b analysed (and re-read per permutation range) stay at b.
        assert crossed < b_bytes


def test_results_are_combined_as_they_arrive(sites: OpenSites, tmp_path: Path) -> None:
    """No barrier across sites: a fast site's result joins the total while a slow site's maps
    still run."""
    data = text(6000, seed=9)
    parts = scatter_text(sites, [("t.txt", data)], piece_size=8 << 10, split_size=8 << 10)
    # Site b's maps take 0.4 s each, site a's none.
    marks = str(tmp_path)
    parts = [replace(p, mapper=SlowCount(marks, 0.4 if p.site == "b" else 0.0)) for p in parts]
    seen: list[tuple[str, int]] = []

    def arrived(run: PartRun) -> None:
        # How many of b's maps had started when this part was combined.
        started_b = sum(1 for m in tmp_path.iterdir() if m.name.startswith(b_port + "-"))
        seen.append((run.part, started_b))

    b_port = sites.up["b"].site.addr.rsplit(":", 1)[1]
    meta = MetaReducer(_count_split, _merge_counts, 4, finalize=_TopK(10))
    res = meta.run(sites, parts, on_arrival=arrived)
    assert res.complete and res.value == reference_top_words(data, 10)
    assert res.arrivals == ["a", "b"]
    runs = {r.part: r for r in res.runs}
    assert runs["a"].arrived is not None and runs["b"].arrived is not None
    assert runs["b"].arrived - runs["a"].arrived > 0.8  # b's two or more rounds of 0.4 s maps
    b_maps = len(parts[1].items) if parts[1].site == "b" else len(parts[0].items)
    assert seen[0][0] == "a" and seen[0][1] < b_maps  # a joined before b's last map began


def test_a_site_without_a_scheduler_gets_a_local_cluster_that_knows_its_secret(
    site_a: RealSite, site_b: RealSite
) -> None:
    """Site a's workers here are a LocalCluster started for the job, whose processes have no
    secret in their environment: the secrets plugin gives them a's."""
    local_a = Site("a", site_a.addr, site_a.secret, scheduler=None, workers=1)
    data = text(3000, seed=4)
    with open_sites(Sites.of([local_a, site_b.site()]), require=True) as opened:
        assert opened.up["a"].dask.cluster is not None  # ours, not site a's scheduler
        parts = scatter_text(opened, [("t.txt", data)], piece_size=8 << 10)
        res = most_frequent_words_sites(opened, parts, k=10)
    assert res.complete and res.value == reference_top_words(data, 10)
