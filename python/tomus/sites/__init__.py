"""tomus.sites: compute jobs across several tomus clusters ("sites"), each with its own Dask
workers (TomusBlobs paper, section 5.2).

The initial data are scattered across the sites (``scatter``), every site runs its own
MapIterativeReduce on its share, and a MetaReducer combines the sites' reduced results as they
arrive, so only reduced results cross between sites. A site that fails is rerun elsewhere when
its cluster still answers, or reported with the part of the answer that is missing.

>>> from tomus.sites import load_sites, open_sites, most_frequent_words_sites, scatter_text
>>> with open_sites(load_sites("sites.toml")) as sites:                  # doctest: +SKIP
...     parts = scatter_text(sites, [("a.txt", b"to be or not to be\\n")])
...     res = most_frequent_words_sites(sites, parts, k=2)
>>> res.value, res.complete, res.inter_site_bytes                         # doctest: +SKIP
([('be', 2), ('to', 2)], True, 412)

Modules: ``config`` (sites, the sites file, connecting to the sites), ``scatter`` (which site
gets which units of the data), ``metareducer`` (per-site jobs, streamed final reduce, failed
sites), ``apps`` (A-Brain and MostFrequentWords across sites), ``cli`` (``tomus compute APP
--sites FILE``).
"""

from __future__ import annotations

from tomus.sites.apps import (
    abrain_sites,
    cut_pieces,
    most_frequent_words_sites,
    resident_text_parts,
    scatter_text,
)
from tomus.sites.config import OpenSites, Site, Sites, SitesError, load_sites, open_sites
from tomus.sites.metareducer import MetaReducer, MissingPart, MultiSiteResult, Part, PartRun
from tomus.sites.scatter import plan

__all__ = [
    "MetaReducer",
    "MissingPart",
    "MultiSiteResult",
    "OpenSites",
    "Part",
    "PartRun",
    "Site",
    "Sites",
    "SitesError",
    "abrain_sites",
    "cut_pieces",
    "load_sites",
    "most_frequent_words_sites",
    "open_sites",
    "plan",
    "resident_text_parts",
    "scatter_text",
]
