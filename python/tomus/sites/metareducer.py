"""The MetaReducer (TomusBlobs paper, section 5.2): one MapIterativeReduce per site, and a
final reduce of the sites' results as they arrive.

A job is split into *parts*, one per site, each a list of inputs stored in that site's tomus
cluster. Each part runs as one ``IterativeReduce`` *at its site*: its driver is itself a Dask
task on the site's scheduler (``_site_driver``, which secedes from the worker's thread pool
while it waits), so the map and reduce tasks, their job log and their intermediate results
never leave the site. What crosses between sites is, per part, the job description going out
and one reference coming back; the MetaReducer then reads the part's single reduced result
from the site's tomus and folds it into the running total at once (``reducer([total, part])``),
whatever the other sites are doing: there is no barrier across sites.

Failures. A part whose driver fails (its site's scheduler or workers are gone, or its cluster
stops answering) is, when ``rerun`` is on, run again at another site that is still up, against
the failed part's own cluster if that cluster still answers (the inputs are then read across
the link, and counted as such). The rerun reuses the part's job log, so map results the failed
site already stored are not recomputed. A part that cannot be rerun is reported in
``MultiSiteResult.missing``: which site, which inputs, and why; the value then combines only
the parts that arrived, and ``complete`` is False.

Bytes crossing between sites (``MultiSiteResult.inter_site_bytes``) are counted as they are
moved: the reduced results read by the MetaReducer from sites other than its home site, and
the bytes rerun tasks read from and write to a cluster of another site. Not counted: Dask's own
messages (the job going out, the reference coming back, heartbeats), the job log a part's
driver keeps in the part's cluster (across the link only in a rerun: a few hundred bytes per
task), and the job log's creation; bench/sites.py measures everything on the wire.
"""

from __future__ import annotations

import asyncio
import pickle
import queue
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import tomus
from tomus.compute.engine import Placement, Session, worker_client
from tomus.compute.iterative import IterativeReduce
from tomus.compute.joblog import create_job
from tomus.compute.storage import Ref, get_bytes
from tomus.sites.config import OpenSites, SiteRuntime

if TYPE_CHECKING:
    from distributed import Future

__all__ = ["MetaReducer", "MissingPart", "MultiSiteResult", "Part", "PartRun"]


@dataclass(frozen=True)
class Part:
    """The inputs one site processes: ``items`` (IterativeReduce inputs, stored in ``site``'s
    cluster), the global indexes of the units they hold and a description of each unit."""

    site: str
    items: tuple[Any, ...]
    units: tuple[int, ...]
    describe: tuple[str, ...] = ()  # one line per unit, for reports of missing parts
    mapper: Callable[[Any], Any] | None = None  # the part's own (default: the job's)


@dataclass(frozen=True)
class SiteOutcome:
    """What a site driver sends back: where the part's reduced result is, and totals."""

    ref: Ref
    map_tasks: int
    reduce_tasks: int
    resumed: int
    elapsed: float
    bytes_read: int
    bytes_written: int


@dataclass
class PartRun:
    """One attempt at a part: where it ran, when its result arrived, what it moved."""

    part: str  # the site the part belongs to (whose cluster holds its inputs)
    ran_on: str
    started: float
    arrived: float | None = None  # seconds since the job started
    result_bytes: int = 0
    map_tasks: int = 0
    reduce_tasks: int = 0
    resumed: int = 0
    bytes_read: int = 0  # by the part's tasks, from the part's cluster
    bytes_written: int = 0
    error: str | None = None

    @property
    def remote(self) -> bool:
        """Ran on another site's workers against the part's cluster (a rerun)."""
        return self.ran_on != self.part


@dataclass(frozen=True)
class MissingPart:
    """A part of the answer that no site could compute."""

    site: str
    units: tuple[int, ...]
    inputs: tuple[str, ...]
    error: str


@dataclass
class MultiSiteResult:
    """The combined answer, what ran where, and what is missing from it."""

    value: Any  # finalize(combination of the parts that arrived); None if none did
    complete: bool
    missing: list[MissingPart]
    runs: list[PartRun]
    home: str
    elapsed: float = 0.0
    arrivals: list[str] = field(default_factory=list)  # parts in the order they were combined

    @property
    def missing_units(self) -> list[int]:
        return sorted(u for m in self.missing for u in m.units)

    @property
    def inter_site_bytes(self) -> int:
        """Bytes moved between sites: reduced results read from other sites by the
        MetaReducer, and what rerun tasks read from and wrote to another site's cluster."""
        total = 0
        for r in self.runs:
            if r.arrived is not None and r.part != self.home:
                total += r.result_bytes
            if r.remote:
                total += r.bytes_read + r.bytes_written
        return total


# --- the site driver (a Dask task at the site) -------------------------------------------------


def _site_driver(
    addr: str,
    mapper: Callable[[Any], Any],
    reducer: Callable[[list[Any]], Any],
    ratio: int,
    items: Sequence[Any],
    job_id: int,
) -> SiteOutcome:
    """Runs one part's IterativeReduce from a worker of the site (seceded while it waits)."""
    from distributed import worker_client as dask_worker_client

    with dask_worker_client() as dask:
        s = Session(dask, addr, worker_client(addr), Placement(dask))
        res = IterativeReduce(mapper, reducer, ratio).run_in(s, list(items), job_id=job_id)
    if res.final is None:  # run_in always ends with a final result; typed as optional
        raise RuntimeError(f"job {job_id} ended without a result")
    return SiteOutcome(
        res.final.ref,
        res.map_tasks,
        res.reduce_tasks,
        res.resumed,
        res.elapsed,
        res.bytes_read,
        res.bytes_written,
    )


# --- the MetaReducer -----------------------------------------------------------------------------


class MetaReducer:
    """Runs ``IterativeReduce(mapper, reducer, ratio)`` on each part at its site and reduces
    the parts' results with ``reducer`` as they arrive; ``finalize`` runs on the total.

    ``rerun``: run a failed part again at a site still up, if its cluster answers.
    ``site_timeout``: seconds a site's scheduler may stay unreachable before its part counts
    as failed."""

    def __init__(
        self,
        mapper: Callable[[Any], Any],
        reducer: Callable[[list[Any]], Any],
        ratio: int = 4,
        *,
        finalize: Callable[[Any], Any] | None = None,
        rerun: bool = True,
        site_timeout: float = 10.0,
    ) -> None:
        if ratio < 2:
            raise ValueError(f"ratio must be at least 2, got {ratio}")
        self.mapper, self.reducer, self.ratio = mapper, reducer, ratio
        self.finalize, self.rerun, self.site_timeout = finalize, rerun, site_timeout

    def run(
        self,
        sites: OpenSites,
        parts: Sequence[Part],
        *,
        on_arrival: Callable[[PartRun], None] | None = None,
    ) -> MultiSiteResult:
        """Runs ``parts`` (at most one per site) and combines them; see the module doc.
        ``on_arrival``: called with each part's run as its result is combined."""
        return _Run(self, sites, list(parts), on_arrival).run()


class _Run:
    def __init__(
        self,
        job: MetaReducer,
        sites: OpenSites,
        parts: list[Part],
        on_arrival: Callable[[PartRun], None] | None,
    ) -> None:
        names = [p.site for p in parts]
        if len(set(names)) != len(names):
            raise ValueError(f"more than one part for a site: {names}")
        self.job, self.sites, self.on_arrival = job, sites, on_arrival
        self.parts = {p.site: p for p in parts}
        self.token = secrets.token_hex(4)
        self.events: queue.Queue[tuple[Part, PartRun, SiteOutcome | BaseException]] = queue.Queue()
        self.failed: set[str] = set(sites.down)  # sites not to run anything on
        self.busy: dict[str, int] = {}
        self.job_ids: dict[str, int] = {}
        self.runs: list[PartRun] = []
        self.missing: list[MissingPart] = []
        self.total: Any = None
        self.have_total = False
        self.arrivals: list[str] = []
        self.started = time.time()

    # The clients of a part's cluster: the site's own, or a new one for a site that was down
    # when the job started (its cluster may still answer).
    def _storage(self, site: str) -> tomus.Client:
        rt = self.sites.up.get(site)
        if rt is not None:
            return rt.tomus
        s = self.sites.sites[site]
        return tomus.connect(s.addr, secret=s.secret, connect_timeout=3, timeout=10)

    def run(self) -> MultiSiteResult:
        in_flight = 0
        for part in self.parts.values():
            if not part.items:
                why = self.sites.down.get(part.site, "no inputs")
                self.missing.append(
                    MissingPart(part.site, part.units, part.describe, f"inputs not listed: {why}")
                )
                continue
            if part.site in self.sites.up and self._start(part, part.site):
                in_flight += 1
                continue
            why = self.sites.down.get(part.site) or self.runs[-1].error or "site is down"
            if self._retry(part, f"site {part.site}: {why}"):
                in_flight += 1
        while in_flight:
            part, run, outcome = self.events.get()
            in_flight -= 1
            self.busy[run.ran_on] -= 1
            if isinstance(outcome, BaseException):
                run.error = f"{type(outcome).__name__}: {outcome}"
                self.failed.add(run.ran_on)
                if self._retry(part, run.error):
                    in_flight += 1
                continue
            try:
                self._combine(part, run, outcome)
            except Exception as e:  # the result could not be read back: the part failed
                run.error = f"reading the result: {type(e).__name__}: {e}"
                if self._retry(part, run.error):
                    in_flight += 1
        value = self.total
        if self.have_total and self.job.finalize is not None:
            value = self.job.finalize(value)
        return MultiSiteResult(
            value if self.have_total else None,
            not self.missing,
            self.missing,
            self.runs,
            self.sites.sites.home,
            time.time() - self.started,
            self.arrivals,
        )

    def _start(self, part: Part, on: str) -> bool:
        """Submits ``part``'s site driver to site ``on``'s scheduler; False if that fails."""
        rt: SiteRuntime = self.sites.up[on]
        storage = self.sites.sites[part.site]
        run = PartRun(part.site, on, time.time() - self.started)
        self.runs.append(run)
        try:
            if part.site not in self.job_ids:  # one log per part, reused by a rerun
                self.job_ids[part.site] = create_job(self._storage(part.site))
            fut = rt.dask.submit(
                _site_driver, storage.addr, part.mapper or self.job.mapper, self.job.reducer,
                self.job.ratio,
                part.items, self.job_ids[part.site],
                key=f"tomus-site-{self.token}-{part.site}-on-{on}", pure=False,
            )  # fmt: skip
        except Exception as e:
            run.error = f"{type(e).__name__}: {e}"
            self.failed.add(on)
            return False
        self.busy[on] = self.busy.get(on, 0) + 1
        threading.Thread(
            target=self._wait, args=(rt, fut, part, run), daemon=True, name=f"site-{on}"
        ).start()
        return True

    def _wait(self, rt: SiteRuntime, fut: Future[SiteOutcome], part: Part, run: PartRun) -> None:
        """Waits for a site driver, watching that the site's scheduler stays reachable."""
        lost_since: float | None = None
        while True:
            try:
                out = fut.result(timeout=0.5)
            except (TimeoutError, asyncio.TimeoutError):  # distinct classes before 3.11
                if rt.dask.status == "running":
                    lost_since = None
                    continue
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since < self.job.site_timeout:
                    continue
                err: BaseException = ConnectionError(
                    f"the scheduler of site {rt.name} is unreachable ({rt.dask.status})"
                )
                self.events.put((part, run, err))
                return
            except BaseException as e:  # the driver failed, or the scheduler went away
                self.events.put((part, run, e))
                return
            self.events.put((part, run, out))
            return

    def _retry(self, part: Part, why: str) -> bool:
        """Reruns ``part`` on another site if allowed and possible; else records it missing."""
        if self.job.rerun:
            candidates = [n for n in self.sites.up if n not in self.failed]
            if candidates:
                try:
                    # The part's inputs and job log are in its cluster: it must still answer.
                    self._storage(part.site).open_blob(
                        self.job_ids.get(part.site) or _first_blob(part)
                    )
                except Exception as e:
                    why = f"{why}; its cluster does not answer ({type(e).__name__}: {e})"
                else:
                    # The least busy site, the earlier one in the sites file on a tie.
                    target = min(candidates, key=lambda n: self.busy.get(n, 0))
                    if self._start(part, target):
                        return True
                    return self._retry(part, why)
        self.missing.append(MissingPart(part.site, part.units, part.describe, why))
        return False

    def _combine(self, part: Part, run: PartRun, out: SiteOutcome) -> None:
        data = get_bytes(self._storage(part.site), out.ref)
        value = pickle.loads(data)
        run.result_bytes = len(data)
        run.map_tasks, run.reduce_tasks, run.resumed = out.map_tasks, out.reduce_tasks, out.resumed
        run.bytes_read, run.bytes_written = out.bytes_read, out.bytes_written
        # Streamed: each part joins the total as soon as it is here.
        self.total = self.job.reducer([self.total, value]) if self.have_total else value
        self.have_total = True
        run.arrived = time.time() - self.started
        self.arrivals.append(part.site)
        if self.on_arrival is not None:
            self.on_arrival(run)


def _first_blob(part: Part) -> int:
    """A blob of the part's inputs, to ask its cluster about (when no job log exists yet)."""
    for item in part.items:
        for attr in ("blob", "id"):
            v = getattr(item, attr, None)
            if isinstance(v, int):
                return v
        block = getattr(item, "block", None)
        if block is not None and isinstance(getattr(block, "blob", None), int):
            return int(block.blob)
    return 0
