"""Piece exchange for the swarm module: readers of one file that are still downloading serve
each other the pieces they already have (BitTorrent-like), so a broadcast does not make the
first holder a hot spot.

How: a reader creates its destination file at full size and shares it, still being written,
through its own provider (``share_partial``: a hard link served by range, never
checksummed). It then fetches the pieces with a few parallel reads, at most one per source
(BitTorrent's upload slots, seen from the reader): a piece a peer (another reader still
downloading) has, from that peer; otherwise, from a holder, the piece fewest peers have or
are fetching (rarest first), so readers take different pieces from the holders and then
exchange them. Pieces being fetched and pieces written are announced on the
:class:`PieceBoard` of the file (the tracker), where the other readers look for sources. The
whole file's CRC32C, combined from the pieces' CRCs, must equal the recorded one: a bad
piece from a peer fails the exchange and the caller fetches from the holders. Finally the
reader drops its shared partial copy (it registers the finished file as a holder instead:
:meth:`SwarmModule.serve`).

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
PER_SOURCE = 1
"""Reads of one reader in flight from one source: a reader that could read more from the
first holder takes other pieces from other sources instead, so the readers of a broadcast
spread over the holder and each other (BitTorrent's upload slots, seen from the reader)."""


Peer = tuple[str, set[int], set[int]]
"""A reader on the board: its shared copy's name, the pieces it has, those it is fetching."""


class PieceBoard:
    """Which readers of a file are downloading, their shared copies, the pieces they have and
    those they are fetching (claims: other readers then fetch other pieces first)."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, Peer]] = {}
        self._guard = threading.Lock()

    def join(self, path: str, addr: str, name: str) -> None:
        with self._guard:
            self._files.setdefault(path, {})[addr] = (name, set(), set())

    def claim(self, path: str, addr: str, piece: int) -> None:
        with self._guard:
            peer = self._files.get(path, {}).get(addr)
            if peer is not None:
                peer[2].add(piece)

    def have(self, path: str, addr: str, piece: int) -> None:
        with self._guard:
            peer = self._files.get(path, {}).get(addr)
            if peer is not None:
                peer[1].add(piece)

    def peers(self, path: str) -> dict[str, Peer]:
        with self._guard:
            return {a: (n, set(h), set(c)) for a, (n, h, c) in self._files.get(path, {}).items()}

    def leave(self, path: str, addr: str) -> None:
        with self._guard:
            self._files.get(path, {}).pop(addr, None)


class DaskBoard(PieceBoard):
    """The board kept by the Dask scheduler: readers on every worker share it. Claims and
    pieces are sent at most every :attr:`every` seconds, and the board read at most as often,
    to spare the scheduler."""

    every = 0.05

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[tuple[str, str], tuple[set[int], set[int]]] = {}
        self._sent = 0.0
        self._read: tuple[float, dict[str, Peer]] = (0.0, {})

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
        self._change(path, lambda s: s.__setitem__(addr, (name, [], [])))

    def _announce(self, path: str, addr: str, piece: int, kind: int) -> None:
        with self._guard:
            self._pending.setdefault((path, addr), (set(), set()))[kind].add(piece)
            if time.monotonic() - self._sent < self.every:
                return
            self._sent = time.monotonic()
            pending, self._pending = self._pending, {}
        for (p, a), (have, claimed) in pending.items():

            def add(
                s: dict[str, Any], a: str = a, h: set[int] = have, c: set[int] = claimed
            ) -> None:
                if a in s:
                    name, old_h, old_c = s[a]
                    s[a] = (name, sorted(set(old_h) | h), sorted(set(old_c) | c))

            self._change(p, add)

    def claim(self, path: str, addr: str, piece: int) -> None:
        self._announce(path, addr, piece, 1)

    def have(self, path: str, addr: str, piece: int) -> None:
        self._announce(path, addr, piece, 0)

    def peers(self, path: str) -> dict[str, Peer]:
        from distributed import Variable

        at, state = self._read
        if time.monotonic() - at < self.every:
            return state
        try:
            raw = Variable(f"tomus-pieces:{path}").get(timeout=0)
        except Exception:
            raw = {}
        state = {a: (n, set(h), set(c)) for a, (n, h, c) in raw.items()}
        self._read = (time.monotonic(), state)
        return state

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
    per_source: int = PER_SOURCE,
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
        return _fetch_pieces(
            client, b, path, fd, size, n, expected, holders, provider, reads, per_source
        )
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
    per_source: int,
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
        """A piece to fetch and its sources, the chosen one first (its read counted in
        flight): a piece a peer has, from a peer this reader is not reading from yet; else,
        from a holder this reader is not reading from yet, the piece fewest peers have or
        fetch (rarest first: readers fetch different pieces from the holders, then exchange
        them). Waits while every source is busy; ``None`` when nothing is left."""
        while True:
            peers = {
                a: p
                for a, p in b.peers(path).items()
                if a != me and a not in bad_peers and a not in holders
            }
            with guard:
                if not todo or error:
                    return None
                chosen: tuple[int, str, str, str] | None = None
                free_peers = [a for a in peers if inflight[a] < per_source]
                random.shuffle(free_peers)
                free_peers.sort(key=lambda a: inflight[a])
                for p in order:
                    if p not in todo:
                        continue
                    a = next((a for a in free_peers if p in peers[a][1]), None)
                    if a is not None:
                        chosen = (p, a, peers[a][0], "peer")
                        break
                if chosen is None:
                    free = [a for a in holders if inflight[a] < per_source]
                    if free:
                        random.shuffle(free)
                        free.sort(key=lambda a: inflight[a])
                        spread = Counter(
                            x for _, have, claimed in peers.values() for x in have | claimed
                        )
                        p = min((x for x in order if x in todo), key=lambda x: spread[x])
                        chosen = (p, free[0], holders[free[0]], "holder")
                if chosen is not None:
                    p, addr, name, kind = chosen
                    todo.discard(p)
                    inflight[addr] += 1
                    others = [(a, n[0], "peer") for a, n in peers.items() if p in n[1]]
                    others += [(a, n, "holder") for a, n in holders.items()]
                    rest = [s for s in others if s[0] != addr]
                    return p, [(addr, name, kind), *rest]
            time.sleep(0.02)

    def worker() -> None:
        while True:
            picked = next_piece()
            if picked is None:
                return
            piece, sources = picked
            offset = piece * PIECE
            length = min(PIECE, size - offset)
            b.claim(path, me, piece)
            for k, (addr, name, kind) in enumerate(sources):
                if k > 0:  # the first source's read was counted when it was chosen
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
