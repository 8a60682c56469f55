"""Piece exchange for the swarm module: readers of one file that are still downloading serve
each other the pieces they already have (BitTorrent-like), so a broadcast does not make the
first holder a hot spot.

How: a reader creates its destination file at full size and shares it, still being written,
through its own provider (``share_partial``: a hard link served by range, never
checksummed). It then fetches the pieces in random order with a few parallel reads; each piece
comes from a source that has it, peers (other readers still downloading) before holders, the
source with the fewest of this reader's reads in flight first. Every piece written is
announced on the :class:`PieceBoard` of the file (the tracker), where the other readers look
for sources. The whole file's CRC32C, combined from the pieces' CRCs, must equal the recorded
one: a bad piece from a peer fails the exchange and the caller fetches from the holders.
Finally the reader drops its shared partial copy (it registers the finished file as a
holder instead: :meth:`SwarmModule.serve`).

The board lives in this process for threads reading one file (the tests), and with Dask's
scheduler (a ``distributed.Variable`` per file, changed under a ``distributed.Lock``) inside
Dask tasks, so readers on every worker see each other.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tomus import _native

__all__ = ["PIECE", "DaskBoard", "PieceBoard", "board", "exchange"]

PIECE = 8 << 20
"""Bytes per piece (the native fetch's piece)."""
READS = 4
"""Parallel piece reads of one reader."""


class PieceBoard:
    """Which readers of a file are downloading, their shared copies and their pieces."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, tuple[str, set[int]]]] = {}
        self._guard = threading.Lock()

    def join(self, path: str, addr: str, name: str) -> None:
        with self._guard:
            self._files.setdefault(path, {})[addr] = (name, set())

    def have(self, path: str, addr: str, piece: int) -> None:
        with self._guard:
            peer = self._files.get(path, {}).get(addr)
            if peer is not None:
                peer[1].add(piece)

    def peers(self, path: str) -> dict[str, tuple[str, set[int]]]:
        with self._guard:
            return {a: (n, set(p)) for a, (n, p) in self._files.get(path, {}).items()}

    def leave(self, path: str, addr: str) -> None:
        with self._guard:
            self._files.get(path, {}).pop(addr, None)


class DaskBoard(PieceBoard):
    """The board kept by the Dask scheduler: readers on every worker share it. Announcements
    are batched (at most one per :attr:`every` seconds) to spare the scheduler."""

    every = 0.05

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[tuple[str, str], set[int]] = {}
        self._sent = 0.0

    def _change(self, path: str, change: Any) -> None:
        from distributed import Lock, Variable

        var = Variable(f"tomus-pieces:{path}")
        with Lock(f"tomus-pieces-lock:{path}"):
            try:
                state = dict(var.get(timeout=0))
            except Exception:  # not set yet
                state = {}
            change(state)
            var.set(state)

    def join(self, path: str, addr: str, name: str) -> None:
        self._change(path, lambda s: s.__setitem__(addr, (name, [])))

    def have(self, path: str, addr: str, piece: int) -> None:
        with self._guard:
            self._pending.setdefault((path, addr), set()).add(piece)
            if time.monotonic() - self._sent < self.every:
                return
            self._sent = time.monotonic()
            pending, self._pending = self._pending, {}
        for (p, a), pieces in pending.items():

            def add(s: dict[str, Any], a: str = a, pieces: set[int] = pieces) -> None:
                if a in s:
                    name, have = s[a]
                    s[a] = (name, sorted(set(have) | pieces))

            self._change(p, add)

    def peers(self, path: str) -> dict[str, tuple[str, set[int]]]:
        from distributed import Variable

        try:
            state = Variable(f"tomus-pieces:{path}").get(timeout=0)
        except Exception:
            return {}
        return {a: (n, set(p)) for a, (n, p) in state.items()}

    def leave(self, path: str, addr: str) -> None:
        self._change(path, lambda s: s.pop(addr, None))


_LOCAL = PieceBoard()


def board() -> PieceBoard:
    """Dask's board inside a Dask task, this process's otherwise."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return _LOCAL
    return DaskBoard()


class ExchangeFailed(Exception):
    """The exchange could not complete: the caller fetches from the holders instead."""


def exchange(
    client: Any,
    path: str,
    dest: Path,
    provider: str,
    *,
    the_board: PieceBoard | None = None,
    reads: int = READS,
) -> dict[str, Any]:
    """Fetches the registered file ``path`` into ``dest`` by pieces from its holders and from
    the readers still downloading it, sharing ours through ``provider`` meanwhile. Returns
    ``{bytes, served: [(addr, bytes)], failures, pieces: [(piece, addr, "holder"|"peer")],
    peer_bytes}``; raises :class:`ExchangeFailed` when the copy does not check out."""
    b = the_board or board()
    rec = _native.registered_file(client, path, wait_checksum=True)
    size = int(rec["size"])
    expected = int(rec["checksum"])
    holders = {h["addr"]: h["name"] for h in rec["holders"] if h["alive"] and h["addr"]}
    if not holders:
        raise ExchangeFailed(f"{path}: no live holder")
    n = max(1, -(-size // PIECE))
    fd = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    shared: str | None = None
    try:
        os.ftruncate(fd, size)
        try:
            shared = _native.share_partial(client, dest, provider)
        except Exception:  # sharing is an optimisation: fetch alone
            shared = None
        if shared is not None:
            b.join(path, provider, shared)
        return _fetch_pieces(client, b, path, fd, size, n, expected, holders, provider, reads)
    finally:
        os.close(fd)
        if shared is not None:
            b.leave(path, provider)
            # A copy left behind costs disk space only: never a failed fetch.
            with contextlib.suppress(Exception):
                _native.drop_registered(client, provider, [shared])


def _fetch_pieces(
    client: Any,
    b: PieceBoard,
    path: str,
    fd: int,
    size: int,
    n: int,
    expected: int,
    holders: dict[str, str],
    me: str,
    reads: int,
) -> dict[str, Any]:
    order = list(range(n))
    random.shuffle(order)  # readers start on different pieces: they have some to exchange
    todo = set(order)
    crcs = [0] * n
    log: list[tuple[int, str, str]] = []
    served: Counter[str] = Counter()
    failures: list[tuple[str, str]] = []
    inflight: Counter[str] = Counter()
    bad_peers: set[str] = set()
    guard = threading.Lock()
    error: list[BaseException] = []

    def next_piece() -> tuple[int, list[tuple[str, str, str]]] | None:
        """A piece to fetch and its sources, best first: peers that have it (fewest reads
        in flight first), then holders. Pieces some peer has go first."""
        peers = {
            a: (name, have)
            for a, (name, have) in b.peers(path).items()
            if a != me and a not in bad_peers and a not in holders
        }
        with guard:
            if not todo or error:
                return None
            choice = next(
                (p for p in order if p in todo and any(p in h for _, h in peers.values())), None
            )
            if choice is None:
                choice = next(p for p in order if p in todo)
            todo.discard(choice)
            from_peers = [(a, name, "peer") for a, (name, have) in peers.items() if choice in have]
            from_holders = [(a, name, "holder") for a, name in holders.items()]
            random.shuffle(from_peers)
            random.shuffle(from_holders)
            from_peers.sort(key=lambda s: inflight[s[0]])
            from_holders.sort(key=lambda s: inflight[s[0]])
            return choice, from_peers + from_holders

    def worker() -> None:
        while True:
            picked = next_piece()
            if picked is None:
                return
            piece, sources = picked
            offset = piece * PIECE
            length = min(PIECE, size - offset)
            for addr, name, kind in sources:
                with guard:
                    inflight[addr] += 1
                try:
                    data, crc = _native.read_registered(client, addr, name, offset, length)
                except Exception as e:
                    with guard:
                        failures.append((addr, f"piece {piece}: {e}"))
                        if kind == "peer":
                            bad_peers.add(addr)
                    continue
                finally:
                    with guard:
                        inflight[addr] -= 1
                os.pwrite(fd, data, offset)
                with guard:
                    crcs[piece] = crc
                    served[addr] += length
                    log.append((piece, addr, kind))
                b.have(path, me, piece)
                break
            else:
                with guard:
                    error.append(ExchangeFailed(f"{path}: no source served piece {piece}"))
                return

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(reads, n))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if error:
        raise error[0]
    whole = 0
    for i, crc in enumerate(crcs):
        whole = _native.crc32c_combine(whole, crc, min(PIECE, size - i * PIECE))
    if whole != expected:
        raise ExchangeFailed(f"{path}: checksum {whole:08x}, expected {expected:08x}")
    peer_bytes = sum(min(PIECE, size - p * PIECE) for p, _, kind in log if kind == "peer")
    return {
        "bytes": size,
        "served": sorted(served.items()),
        "failures": failures,
        "pieces": sorted(log),
        "peer_bytes": peer_bytes,
    }
