"""A site killed mid-job: rerun at the other site when its cluster still answers (only its
Dask processes died), else reported as the missing part of the answer."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sitejobs import SlowCount
from sitenet import Link, RealSite
from test_sites_multisite import text

from tomus.compute.apps.text import _merge_counts, _TopK, reference_top_words, top_k, words
from tomus.sites import MetaReducer, MultiSiteResult, Part, Sites, cut_pieces, open_sites
from tomus.sites.apps import scatter_text

PIECE = 16 << 10


@pytest.fixture
def doomed(link: Link | None) -> Iterator[RealSite]:
    """A site b of the test's own, to be killed. The processes the test kills are not
    checked at teardown; any other that ended on its own fails the test, as in conftest.py."""
    s = RealSite("b", workers=1, link=link)
    yield s
    deaths = s.close()
    assert not deaths, "\n".join(deaths)


def _kill_when_running(site: RealSite, marks: Path, what: str) -> threading.Thread:
    """SIGKILLs ``what`` of ``site`` once one of its maps has started (see SlowCount)."""
    port = site.addr.rsplit(":", 1)[1]

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(p.name.startswith(f"{port}-") for p in marks.iterdir()):
                getattr(site, what)()
                return
            time.sleep(0.01)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _run(
    site_a: RealSite, doomed: RealSite, tmp_path: Path, kill: list[str]
) -> tuple[bytes, dict[str, Part], MultiSiteResult]:
    data = text(12_000, seed=5)
    marks = tmp_path / "marks"
    marks.mkdir()
    with open_sites(Sites.of([site_a.site(), doomed.site()]), require=True) as sites:
        parts = scatter_text(sites, [("corpus.txt", data)], piece_size=PIECE, split_size=PIECE)
        meta = MetaReducer(SlowCount(str(marks), 0.3), _merge_counts, 4, finalize=_TopK(15))
        killers = [_kill_when_running(doomed, marks, k) for k in kill]
        res = meta.run(sites, parts)
        for k in killers:
            k.join()
    return data, {p.site: p for p in parts}, res


def test_site_whose_workers_die_is_rerun_elsewhere(
    site_a: RealSite, doomed: RealSite, tmp_path: Path
) -> None:
    data, parts, res = _run(site_a, doomed, tmp_path, ["kill_dask"])
    assert res.complete and not res.missing
    assert res.value == reference_top_words(data, 15)
    b_runs = [r for r in res.runs if r.part == "b"]
    assert [r.ran_on for r in b_runs] == ["b", "a"]
    assert b_runs[0].arrived is None and b_runs[0].error
    assert b_runs[1].arrived is not None and b_runs[1].remote
    # The rerun read b's pieces (and its own intermediate results) from b's cluster, across
    # the link, and that is counted.
    b_input = sum(len(cut_pieces([("c", data)], PIECE)[u].data) for u in parts["b"].units)
    assert b_runs[1].bytes_read >= b_input
    assert res.inter_site_bytes >= b_runs[1].bytes_read + b_runs[1].result_bytes


def test_site_that_dies_is_reported_as_the_missing_part(
    site_a: RealSite, doomed: RealSite, tmp_path: Path
) -> None:
    data, parts, res = _run(site_a, doomed, tmp_path, ["kill_tomus", "kill_dask"])
    assert not res.complete
    (missing,) = res.missing
    assert missing.site == "b" and missing.units == parts["b"].units
    assert res.missing_units == list(parts["b"].units)
    pieces = cut_pieces([("corpus.txt", data)], PIECE)
    assert missing.inputs == tuple(str(pieces[u]) for u in parts["b"].units)
    assert "does not answer" in missing.error
    # The answer covers exactly the pieces that site a processed.
    present = Counter(w for u in parts["a"].units for w in words(pieces[u].data))
    assert res.value == top_k(present, 15)
    assert res.value != reference_top_words(data, 15)
