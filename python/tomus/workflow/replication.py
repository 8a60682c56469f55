"""The replication agent (the AFM paper's section IV): extra holders for files that many
pending tasks will read, made in the background, as long as they pay for themselves.

Cost model, per file of ``size`` MB with ``r`` replicas on a deployment of ``nodes`` nodes::

    cost(r)      = r * size * cost_per_mb          # cost_per_mb = node price / disk capacity
    time_gain(r) = size / throughput * (1 - (nodes - r) / (nodes - 1))

The agent raises ``r`` one replica at a time while ``time_gain(r) / cost(r)`` stays at or
above ``ratio`` and ``cost(r)`` within ``max_cost``, never beyond the number of pending
readers or of nodes, and never onto a node whose link is busy with foreground transfers
(its provider reports more than ``max_load`` requests in flight). A replica is made as a
reader would: fetched from the holders, then registered on the new node's provider (a hard
link of the fetched copy).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import tomus
from tomus import _native
from tomus.workflow.scratch import make_dir_under

__all__ = ["CostModel", "ReplicationAgent"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CostModel:
    node_price: float = 1.0
    """Price of a node (per unit of time, any currency)."""
    disk_mb: float = 100_000.0
    """Local disk capacity of a node, MB."""
    throughput_mb_s: float = 100.0
    """Throughput of one transfer, MB/s."""
    ratio: float = 0.0
    """Least gain/cost for another replica."""
    max_cost: float = float("inf")
    """Most a file's replicas may cost."""

    @property
    def cost_per_mb(self) -> float:
        return self.node_price / self.disk_mb

    def cost(self, replicas: int, size_mb: float) -> float:
        return replicas * size_mb * self.cost_per_mb

    def time_gain(self, replicas: int, size_mb: float, nodes: int) -> float:
        if nodes <= 1:
            return 0.0
        return size_mb / self.throughput_mb_s * (1 - (nodes - replicas) / (nodes - 1))

    def target(self, size_mb: float, nodes: int, readers: int, have: int) -> int:
        """How many replicas the file should have."""
        r = have
        while r < min(nodes, max(readers, have)):
            nxt = r + 1
            cost = self.cost(nxt, size_mb)
            if cost > self.max_cost:
                break
            gain = self.time_gain(nxt, size_mb, nodes)
            if cost > 0 and gain / cost < self.ratio:
                break
            r = nxt
        return r


@dataclass
class ReplicationAgent:
    client: tomus.Client
    model: CostModel = field(default_factory=CostModel)
    max_load: int = 8
    work_dir: str | None = None
    made: list[tuple[str, str]] = field(default_factory=list)
    """(file, provider) of every replica made."""
    errors: list[str] = field(default_factory=list)

    def replicate(self, path: str, pending_readers: int) -> int:
        """Adds the replicas the model calls for; returns how many the file has now."""
        rec = _native.registered_file(self.client, path, wait_checksum=True)
        providers = [p for p in self.client.providers() if p.alive]
        holders = {h["addr"] for h in rec["holders"] if h["alive"]}
        size_mb = rec["size"] / 1e6
        want = self.model.target(size_mb, len(providers), pending_readers, len(holders))
        for p in sorted(providers, key=lambda p: p.load):
            if len(holders) >= want:
                break
            if p.addr in holders or p.load > self.max_load:
                continue
            # Under the work root, which this host may not have yet (the driver may run no
            # task): the registered copy is a hard link of the fetched one.
            staging = make_dir_under(Path(self.work_dir or tempfile.gettempdir()), "replica-")
            try:
                copy = staging / "replica"
                _native.fetch_registered(self.client, path, copy, mode="swarm")
                _native.register_file(self.client, copy, path, provider=p.addr)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            holders.add(p.addr)
            self.made.append((path, p.addr))
        return len(holders)

    def start(self, files: dict[str, int]) -> threading.Thread:
        """Replicates ``files`` (path -> pending readers) in a background thread."""

        def work() -> None:
            for path, readers in files.items():
                try:
                    self.replicate(path, readers)
                except Exception as e:  # a replica is an optimisation: readers have the others
                    log.warning("replicating %s failed: %s", path, e)
                    self.errors.append(f"{path}: {e}")

        t = threading.Thread(target=work, name="tomus-replication", daemon=True)
        t.start()
        return t
