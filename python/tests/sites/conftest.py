"""Fixtures of the multi-site tests: two real sites, each a tomus cluster (manager and two
providers) with a Dask scheduler and workers, all separate processes. Site ``b`` lives in a
network namespace of its own when the machine permits (root), so what it exchanges with the
rest of the machine crosses one veth whose counters the tests read (see sitenet.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sitenet import Link, RealSite


@pytest.fixture(scope="module")
def link() -> Iterator[Link | None]:
    link = Link.create()
    yield link
    if link is not None:
        link.close()


@pytest.fixture(scope="module")
def site_a() -> Iterator[RealSite]:
    s = RealSite("a", workers=2)
    yield s
    deaths = s.close()
    assert not deaths, "\n".join(deaths)


@pytest.fixture(scope="module")
def site_b(link: Link | None) -> Iterator[RealSite]:
    s = RealSite("b", workers=1, link=link)
    yield s
    deaths = s.close()
    assert not deaths, "\n".join(deaths)
