"""Transfer modules: how one registered file gets from its holders to a task's directory.

The API (the AFM paper's, section III) is two methods and a name:

- ``score(context) -> float``: how well this module fits this transfer (any scale; the
  selector compares the best score with a threshold);
- ``fetch(file, dest, context) -> dict``: puts the file's bytes at ``dest``, verified, and
  returns what it did (``bytes``, ``served`` per holder, ``failures``);
- ``serve(file, dest, context)``, optional: offers the fetched copy to later readers.

Built in: ``memory`` (small files, answered by the holder's in-memory copy in one request),
``direct`` (one stream from one holder, sendfile on its side, failing over to the next),
``swarm`` (pieces from every holder and from the readers still downloading, which serve
the pieces they have: see :mod:`tomus.workflow.pieces`; the reader then registers its copy,
becoming a holder; without piece exchange, readers that outnumber holders take turns, one per
holder: see :mod:`tomus.workflow.turns`), ``store`` (ordinary striped, replicated files of the blob
store). Users add modules with :func:`register_module` or the ``tomus.workflow.modules``
entry point group.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tomus import _native
from tomus.workflow.pieces import PIECE, ExchangeFailed, exchange

__all__ = [
    "BUILTIN",
    "DirectModule",
    "FileInfo",
    "MemoryModule",
    "StoreModule",
    "SwarmModule",
    "TransferContext",
    "TransferModule",
    "register_module",
    "user_modules",
]

ENTRY_POINT_GROUP = "tomus.workflow.modules"


@dataclass(frozen=True)
class FileInfo:
    """A file to move: its namespace path and what its record says."""

    path: str
    size: int
    registered: bool
    holders: tuple[str, ...] = ()
    """Addresses of the live holders (registered files only)."""


@dataclass
class TransferContext:
    """What a module scores: the file, its readers and the reading node."""

    file: FileInfo
    pending_readers: int = 1
    """Tasks of the workflow that read this file and have not run yet (this one included)."""
    node_load: float = 0.0
    """Load of the reading node (tasks running there per core)."""
    provider: str | None = None
    """The provider of the reading node: where a fetched copy can be registered."""
    client: Any = None
    """The ``tomus.Client`` to use."""
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TransferModule(Protocol):
    """A way to move a file; see the module documentation."""

    name: str

    def score(self, context: TransferContext) -> float: ...

    def fetch(self, file: FileInfo, dest: Path, context: TransferContext) -> dict[str, Any]: ...


class DirectModule:
    """One stream from one holder to the reader (the holder sends with sendfile)."""

    name = "direct"

    def score(self, context: TransferContext) -> float:
        return 0.0

    def fetch(self, file: FileInfo, dest: Path, context: TransferContext) -> dict[str, Any]:
        return dict(_native.fetch_registered(context.client, file.path, dest, mode="direct"))


class MemoryModule(DirectModule):
    """Small files: the holder answers from its in-memory copy (kept from registration on),
    the whole file in one request."""

    name = "memory"

    def fetch(self, file: FileInfo, dest: Path, context: TransferContext) -> dict[str, Any]:
        return dict(_native.fetch_registered(context.client, file.path, dest, mode="memory"))


class SwarmModule:
    """Pieces from every holder and from the other readers still downloading (piece
    exchange); the reader's copy is then registered on its own provider, so the next
    readers have one more holder. With ``exchange=False``: pieces from the holders only,
    readers taking turns on them when they outnumber them."""

    name = "swarm"

    def __init__(self, exchange: bool = True) -> None:
        self.exchange = exchange

    def score(self, context: TransferContext) -> float:
        return 0.0

    max_wait: float = 600.0
    """Longest wait for a holder's turn (seconds) before fetching from all holders at once."""
    poll: float = 0.2

    def fetch(self, file: FileInfo, dest: Path, context: TransferContext) -> dict[str, Any]:
        if self.exchange and context.provider is not None and file.size > PIECE:
            try:
                report = exchange(context.client, file.path, dest, context.provider)
            except ExchangeFailed as e:
                # A bad or missing piece: the whole file from the holders, verified.
                report = dict(
                    _native.fetch_registered(context.client, file.path, dest, mode="swarm")
                )
                report["failures"] = [("exchange", str(e)), *report["failures"]]
            self.serve(file, dest, context)
            return report
        if context.pending_readers > len(file.holders) and context.provider is not None:
            turn = self._by_turns(file, dest, context)
            if turn is not None:
                return turn
        report = dict(_native.fetch_registered(context.client, file.path, dest, mode="swarm"))
        self.serve(file, dest, context)
        return report

    def _by_turns(
        self, file: FileInfo, dest: Path, context: TransferContext
    ) -> dict[str, Any] | None:
        """More readers than holders: one reader per holder at a time, each registering its
        copy before it gives the turn back (see :mod:`tomus.workflow.turns`). None when no
        turn came in ``max_wait`` or the holder failed: the caller then swarms."""
        from tomus.workflow.turns import turns

        t = turns()
        deadline = time.monotonic() + self.max_wait
        waited = 0
        own = context.provider or ""
        while time.monotonic() < deadline:
            rec = _native.registered_file(context.client, file.path)
            holders = [h["addr"] for h in rec["holders"] if h["alive"] and h["addr"]]
            if own in holders:
                # A copy on this node already (made while we waited): read it locally.
                return dict(
                    _native.fetch_registered(
                        context.client, file.path, dest, mode="direct", holders=[own]
                    )
                )
            random.shuffle(holders)
            for h in holders:
                key = f"tomus-swarm:{file.path}:{h}"
                if not t.take(key):
                    continue
                try:
                    report = dict(
                        _native.fetch_registered(
                            context.client, file.path, dest, mode="direct", holders=[h]
                        )
                    )
                    self.serve(file, dest, context)
                except Exception:
                    return None
                finally:
                    t.give(key)
                report["turn_wait_polls"] = waited
                return report
            waited += 1
            time.sleep(self.poll)
        return None

    def serve(self, file: FileInfo, dest: Path, context: TransferContext) -> None:
        """Registers the fetched copy as one more holder (a hard link: no copy). A node
        whose provider cannot link it (other file system) just does not serve."""
        if context.provider is None or context.provider in file.holders:
            return
        try:
            _native.register_file(context.client, dest, file.path, provider=context.provider)
        except Exception:  # serving is an optimisation, never a failure
            return


class StoreModule:
    """Ordinary files of the striped, replicated store (persisted files, or anything not
    registered)."""

    name = "store"

    def score(self, context: TransferContext) -> float:
        return 0.0

    def fetch(self, file: FileInfo, dest: Path, context: TransferContext) -> dict[str, Any]:
        fs = context.client.fs()
        with fs.open(file.path, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 8 << 20)
        return {"bytes": file.size, "served": [("store", file.size)], "failures": []}


BUILTIN: dict[str, TransferModule] = {
    m.name: m for m in (MemoryModule(), DirectModule(), SwarmModule(), StoreModule())
}

_USER: dict[str, TransferModule] = {}
_ENTRY_POINTS_LOADED = False


def register_module(module: TransferModule) -> TransferModule:
    """Adds a user module; it competes by score in every later selection."""
    if not isinstance(module, TransferModule):
        raise TypeError(f"{module!r} has no name, score() and fetch()")
    if module.name in BUILTIN:
        raise ValueError(f"{module.name!r} is a built-in module's name")
    _USER[module.name] = module
    return module


def user_modules() -> list[TransferModule]:
    """Modules registered by call, then those of the entry point group (loaded once per
    process: scanning the installed packages costs tens of milliseconds, per transfer)."""
    global _ENTRY_POINTS_LOADED
    if not _ENTRY_POINTS_LOADED:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name not in _USER:
                obj = ep.load()
                module = obj() if isinstance(obj, type) else obj
                _USER[ep.name] = module
        _ENTRY_POINTS_LOADED = True
    return list(_USER.values())


def unregister_module(name: str) -> None:
    _USER.pop(name, None)
