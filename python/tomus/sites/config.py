"""Sites: the tomus clusters and Dask workers a multi-site job runs on, and the sites file.

A site is one tomus cluster (its manager's address, and the cluster secret if it has one) with
Dask workers of its own: a running scheduler (``scheduler``), or a ``distributed.LocalCluster``
of ``workers`` processes that ``open_sites`` starts on this machine for the job, pointed at that
site's cluster.

The sites file (TOML) has one table per site, in the order the sites are used::

    # sites.toml
    [sites.paris]
    addr = "10.0.1.10:7000"          # the site's tomus manager (required)
    scheduler = "tcp://10.0.1.10:8786"  # its Dask scheduler (default: a LocalCluster here)
    secret_file = "paris.secret"     # or secret = "..."; a relative path is from this file
    share = 2                        # its weight when the data are scattered (default: workers)

    [sites.lyon]
    addr = "10.0.2.10:7000"
    workers = 2                      # LocalCluster processes (default 1); with a scheduler:
                                     #   workers to wait for before starting

Optional top-level key: ``home = "paris"``, the site whose machine runs the MetaReducer (it
only decides which results count as crossing between sites; default: the first site).

Secrets reach the sites' workers through a Dask worker plugin (``_Secrets``), which Dask also
installs on workers that join later. Every site's workers get the secrets of every site in the
file, since a failed site's part may be rerun elsewhere against its cluster. They travel in the
Dask protocol: give Dask TLS when the links between this machine and the sites are not trusted.

``tomus.sites`` needs the compute extra (Dask distributed), which it imports at once.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distributed import WorkerPlugin

import tomus
from tomus.compute.engine import set_secret

if TYPE_CHECKING:
    from distributed import Client as DaskClient
    from distributed import Worker

__all__ = ["Site", "SiteRuntime", "Sites", "SitesError", "load_sites", "open_sites"]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli (a dependency there)
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]


class SitesError(ValueError):
    """A sites file or site list that cannot be used (the message says where)."""


@dataclass(frozen=True)
class Site:
    """One site: a tomus cluster and where its Dask workers come from."""

    name: str
    addr: str
    secret: bytes | None = field(default=None, repr=False)
    scheduler: str | None = None
    # LocalCluster worker processes when no scheduler is given; with one, the workers to wait
    # for before the job starts (scatter weights count the workers present then).
    workers: int = 1
    share: float | None = None  # scatter weight (default: the site's worker count)


@dataclass(frozen=True)
class Sites:
    """The sites of a job, in order, and the one the MetaReducer runs at."""

    sites: tuple[Site, ...]
    home: str

    def __post_init__(self) -> None:
        if not self.sites:
            raise SitesError("no sites given")
        names = [s.name for s in self.sites]
        if len(set(names)) != len(names):
            raise SitesError(f"site names repeat: {names}")
        if self.home not in names:
            raise SitesError(f"home site {self.home!r} is not one of {names}")

    def __iter__(self) -> Iterator[Site]:
        return iter(self.sites)

    def __getitem__(self, name: str) -> Site:
        for s in self.sites:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sites]

    @classmethod
    def of(cls, sites: list[Site], home: str | None = None) -> Sites:
        return cls(tuple(sites), home or (sites[0].name if sites else ""))


_SITE_KEYS = {"addr", "secret", "secret_file", "scheduler", "workers", "share"}


def _site(name: str, table: Mapping[str, Any], base: Path, where: str) -> Site:
    unknown = set(table) - _SITE_KEYS
    if unknown:
        raise SitesError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_SITE_KEYS)})")
    addr = table.get("addr")
    if not isinstance(addr, str) or not addr:
        raise SitesError(f"{where}: 'addr' (the site's tomus manager, host:port) is required")
    secret: bytes | None = None
    if "secret" in table and "secret_file" in table:
        raise SitesError(f"{where}: give 'secret' or 'secret_file', not both")
    if "secret" in table:
        secret = str(table["secret"]).encode()
    elif "secret_file" in table:
        path = base / str(table["secret_file"])
        try:
            secret = path.read_bytes().strip()
        except OSError as e:
            raise SitesError(f"{where}: cannot read secret_file {path}: {e}") from e
    workers = table.get("workers", 1)
    if not isinstance(workers, int) or workers < 1:
        raise SitesError(f"{where}: 'workers' must be a positive integer, got {workers!r}")
    share = table.get("share")
    if share is not None and (not isinstance(share, (int, float)) or share < 0):
        raise SitesError(f"{where}: 'share' must be a non-negative number, got {share!r}")
    scheduler = table.get("scheduler")
    if scheduler is not None and not isinstance(scheduler, str):
        raise SitesError(f"{where}: 'scheduler' must be an address string")
    return Site(name, addr, secret, scheduler, workers, None if share is None else float(share))


def load_sites(path: str | os.PathLike[str]) -> Sites:
    """Reads a sites file (format in this module's doc)."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except OSError as e:
        raise SitesError(f"cannot read sites file {p}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise SitesError(f"{p}: not valid TOML: {e}") from e
    unknown = set(doc) - {"sites", "home"}
    if unknown:
        raise SitesError(f"{p}: unknown top-level keys {sorted(unknown)} (known: home, sites)")
    tables = doc.get("sites")
    if not isinstance(tables, dict) or not tables:
        raise SitesError(f"{p}: no [sites.NAME] tables")
    sites = [
        _site(name, t, p.parent, f"{p}: [sites.{name}]")
        if isinstance(t, dict)
        else _bad(f"{p}: sites.{name} must be a table")
        for name, t in tables.items()
    ]
    home = doc.get("home")
    if home is not None and not isinstance(home, str):
        raise SitesError(f"{p}: 'home' must be a site name")
    return Sites.of(sites, home)


def _bad(msg: str) -> Site:
    raise SitesError(msg)


# --- connecting to the sites ------------------------------------------------------------------


class _Secrets(WorkerPlugin):
    """Dask worker plugin: gives each worker the secrets of the clusters its tasks may use."""

    def __init__(self, secrets: dict[str, bytes]) -> None:
        self.secrets = secrets

    def setup(self, worker: Worker) -> None:
        for addr, secret in self.secrets.items():
            set_secret(addr, secret)


def share_secrets(dask: DaskClient, sites: list[Site]) -> None:
    """Lets the workers behind ``dask`` reach the clusters of ``sites`` (those with a secret)."""
    secrets = {s.addr: s.secret for s in sites if s.secret is not None}
    if secrets:
        dask.register_plugin(_Secrets(secrets), name="tomus-secrets")


@dataclass
class SiteRuntime:
    """A site during a job: its Dask client and a tomus client of its cluster (from here)."""

    site: Site
    dask: DaskClient
    tomus: tomus.Client
    workers: int

    @property
    def name(self) -> str:
        return self.site.name


@dataclass
class OpenSites:
    """The sites reachable when the job started, and why the others were not."""

    sites: Sites
    up: dict[str, SiteRuntime]
    down: dict[str, str]  # site -> error

    def weights(self) -> dict[str, float]:
        """Scatter weights of the sites that are up: ``share``, else worker count."""
        return {
            n: (rt.site.share if rt.site.share is not None else float(rt.workers))
            for n, rt in self.up.items()
        }


@contextlib.contextmanager
def _dask_for(site: Site) -> Iterator[DaskClient]:
    from distributed import Client, LocalCluster

    if site.scheduler:
        with Client(site.scheduler, set_as_default=False, timeout=10) as c:
            yield c
        return
    cluster = LocalCluster(
        n_workers=site.workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": ":0"},
        silence_logs=50,  # a site going away is reported by the job, not logged per worker
    )
    try:
        with Client(cluster, set_as_default=False) as c:
            yield c
    finally:
        cluster.close()


@contextlib.contextmanager
def open_sites(sites: Sites, *, require: bool = False) -> Iterator[OpenSites]:
    """Connects to every site (starting LocalClusters where no scheduler is given). A site that
    cannot be reached is listed in ``down`` (``require=True``: raises instead), so a job can
    still run on the others and report that site's part as missing or rerun it."""
    with contextlib.ExitStack() as stack:
        up: dict[str, SiteRuntime] = {}
        down: dict[str, str] = {}
        for site in sites:
            try:
                client = tomus.connect(site.addr, secret=site.secret, connect_timeout=5)
                dask = stack.enter_context(_dask_for(site))
                # Weights count the workers: wait for those the site is said to have.
                dask.wait_for_workers(site.workers, timeout=60)
                share_secrets(dask, list(sites))
                n = len(dask.scheduler_info(n_workers=-1)["workers"])
            except Exception as e:  # any failure to reach a site is that site being down
                if require:
                    raise
                down[site.name] = f"{type(e).__name__}: {e}"
                continue
            up[site.name] = SiteRuntime(site, dask, client, n)
        yield OpenSites(sites, up, down)
