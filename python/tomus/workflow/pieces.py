"""Piece exchange for the swarm module: readers of one file that are still downloading serve
each other the pieces they already have (BitTorrent-like), so a broadcast does not make the
first holder a hot spot.

How: a reader creates its destination file at full size and shares it, still being written,
through its own provider (``share_partial``: a hard link served by range, never
checksummed). It then fetches the pieces with a few parallel reads, at most one per source
(BitTorrent's upload slots, seen from the reader): from a free holder, a piece no other
reader has or is fetching, while one is left; otherwise a piece a peer (another reader still
downloading) has, from that peer. The holders thus serve each piece about once, as early as
their links allow, and the readers pass it on
(BitTorrent's "super-seeding"): a broadcast's makespan is bound by the holder's link carrying
one copy, not one per reader. A reader that made no progress for ``stall`` seconds (a peer
that claimed a piece died, say) takes from the holders any piece, rarest first. Pieces being
fetched and pieces written are announced on the :class:`PieceBoard` of the file (the
tracker), where the other readers look for sources; taking a piece from a holder is one
atomic change of the board, so two readers rarely take the same one. The
whole file's CRC32C, combined from the pieces' CRCs, must equal the recorded one: a bad
piece from a peer fails the exchange and the caller fetches from the holders. Finally the
reader drops its shared partial copy (it registers the finished file as a holder instead:
:meth:`SwarmModule.serve`).

The board lives in this process for threads reading one file (the tests), and on Dask's
scheduler inside Dask tasks (each operation one function run there), so readers on every
worker see each other.
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
from tomus.errors import NotFound

__all__ = ["PIECE", "DaskBoard", "PieceBoard", "board", "exchange", "piece_size"]

PIECE = 8 << 20
"""The native fetch's piece: files over one piece are exchanged."""
PIECES = 32
"""Pieces of an exchanged file, within :data:`MIN_PIECE` and :data:`PIECE` each: enough for
a holder's first pieces to reach the readers, and be passed on, early in the broadcast."""
MIN_PIECE = 1 << 20
STALL = 4.0
"""Seconds without a piece before a reader takes from the holders pieces others claimed."""
READS = 4
"""Parallel piece reads of one reader."""
PER_SOURCE = 1
"""Reads of one reader in flight from one source: each source's uplink is shared among the
readers, not taken by the first (BitTorrent's upload slots, seen from the reader)."""


Peer = tuple[str, set[int], set[int]]
"""A reader on the board: its shared copy's name, the pieces it has, those it is fetching."""


def _make_board_op() -> Any:
    """The board's one operation, as a function with no reference to this package, so that
    Dask pickles it by value: the scheduler runs it without importing tomus."""

    def op(files: dict[str, Any], path: str, addr: str, action: str, arg: Any) -> Any:
        """``files``: path -> reader address -> (copy name, pieces had, pieces claimed)."""
        entries = files.get(path, {})
        if action == "join":
            files.setdefault(path, {})[addr] = (arg, set(), set())
        elif action == "leave":
            entries.pop(addr, None)
            if not entries:
                files.pop(path, None)
        elif action == "announce":
            if addr in entries:
                entries[addr][1].update(arg[0])
                entries[addr][2].update(arg[1])
        elif action == "peers":
            return {a: (n, sorted(h), sorted(c)) for a, (n, h, c) in entries.items()}
        elif action == "take":
            # The first candidate no other reader (outside `ignore`) has or fetches, or with
            # `rarest` the one fewest do; claimed for `addr`.
            candidates, ignore, rarest = arg
            spread: dict[int, int] = {}
            for a, (_, have, claimed) in entries.items():
                if a != addr and a not in ignore:
                    for x in have | claimed:
                        spread[x] = spread.get(x, 0) + 1
            if rarest:
                choice = min(candidates, key=lambda x: spread.get(x, 0), default=None)
            else:
                choice = next((x for x in candidates if x not in spread), None)
            if choice is not None and addr in entries:
                entries[addr][2].add(choice)
            return choice
        else:
            raise ValueError(f"no board action {action!r}")
        return None

    def on_scheduler(
        path: str, addr: str, action: str, arg: Any, dask_scheduler: Any = None
    ) -> Any:
        # The scheduler runs one function at a time on its event loop: each call is atomic.
        files = dask_scheduler.__dict__.setdefault("_tomus_piece_boards", {})
        return op(files, path, addr, action, arg)

    return op, on_scheduler


_board_op, _on_scheduler = _make_board_op()


class PieceBoard:
    """Which readers of a file are downloading, their shared copies, the pieces they have and
    those they are fetching (claims: other readers then fetch other pieces first). This one
    lives in this process: for threads reading one file (the tests)."""

    def __init__(self) -> None:
        self._files: dict[str, Any] = {}
        self._guard = threading.Lock()

    def _call(self, path: str, addr: str, action: str, arg: Any = None) -> Any:
        with self._guard:
            return _board_op(self._files, path, addr, action, arg)

    def join(self, path: str, addr: str, name: str) -> None:
        self._call(path, addr, "join", name)

    def claim(self, path: str, addr: str, piece: int) -> None:
        self._call(path, addr, "announce", ((), (piece,)))

    def have(self, path: str, addr: str, piece: int) -> None:
        self._call(path, addr, "announce", ((piece,), ()))

    def peers(self, path: str) -> dict[str, Peer]:
        raw = self._call(path, "", "peers")
        return {a: (n, set(h), set(c)) for a, (n, h, c) in raw.items()}

    def take(
        self, path: str, addr: str, candidates: list[int], ignore: set[str], rarest: bool
    ) -> int | None:
        """Claims for ``addr`` the first of ``candidates`` no other reader (outside
        ``ignore``) has or fetches, and returns it; with ``rarest``, the one fewest have or
        fetch. ``None``: every candidate is on its way to someone else."""
        return self._call(path, addr, "take", (candidates, ignore, rarest))  # type: ignore[no-any-return]

    def leave(self, path: str, addr: str) -> None:
        self._call(path, addr, "leave")


class DaskBoard(PieceBoard):
    """The board kept by the Dask scheduler, so readers on every worker share it: each
    operation is one call run on the scheduler (atomic there, no lock). Claims and pieces
    are sent at most every :attr:`every` seconds, by a timer that takes along what was
    announced meanwhile, and the board is read at most as often, to spare the scheduler."""

    every = 0.05

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[tuple[str, str], tuple[set[int], set[int]]] = {}
        self._sent = 0.0
        self._timer: threading.Timer | None = None
        self._read: tuple[float, dict[str, Peer]] = (0.0, {})

    def _call(self, path: str, addr: str, action: str, arg: Any = None) -> Any:
        from distributed import get_client

        return get_client().run_on_scheduler(_on_scheduler, path, addr, action, arg)

    def _announce(self, path: str, addr: str, piece: int, kind: int) -> None:
        with self._guard:
            self._pending.setdefault((path, addr), (set(), set()))[kind].add(piece)
            if self._timer is not None:
                return  # a send is due: it takes this one along
            wait = max(0.0, self.every - (time.monotonic() - self._sent))
            self._timer = threading.Timer(wait, self._send)
            self._timer.daemon = True
            self._timer.start()

    def _send(self) -> None:
        with self._guard:
            self._timer = None
            self._sent = time.monotonic()
            pending, self._pending = self._pending, {}
        for (p, a), (have, claimed) in pending.items():
            # Announcements are hints: a reader that misses one reads from a holder.
            with contextlib.suppress(Exception):
                self._call(p, a, "announce", (sorted(have), sorted(claimed)))

    def claim(self, path: str, addr: str, piece: int) -> None:
        self._announce(path, addr, piece, 1)

    def have(self, path: str, addr: str, piece: int) -> None:
        self._announce(path, addr, piece, 0)

    def take(
        self, path: str, addr: str, candidates: list[int], ignore: set[str], rarest: bool
    ) -> int | None:
        choice = super().take(path, addr, candidates, ignore, rarest)
        self._read = (0.0, {})  # the next look at the board sees this claim
        return choice

    def peers(self, path: str) -> dict[str, Peer]:
        at, state = self._read
        if time.monotonic() - at < self.every:
            return state
        try:
            state = super().peers(path)
        except Exception:  # the board is a hint: without it, the holders serve
            state = {}
        self._read = (time.monotonic(), state)
        return state


def piece_size(size: int) -> int:
    """Bytes per piece when exchanging a file of ``size`` bytes (whole MiB)."""
    per = -(-size // PIECES)
    return min(PIECE, max(MIN_PIECE, -(-per // MIN_PIECE) * MIN_PIECE))


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
    stall: float = STALL,
) -> dict[str, Any]:
    """Fetches the registered file ``path`` into ``dest`` by pieces from its holders and from
    the readers still downloading it, sharing ours through ``provider`` meanwhile; after
    ``stall`` seconds without a piece it also takes from the holders pieces others claimed.
    Returns ``{bytes, piece (bytes per piece), served: [(addr, bytes)], failures,
    peers_left: [(addr, piece)], pieces: [(piece, addr, "holder"|"peer")], peer_bytes,
    timeline: [(piece, "holder"|"peer", start s, end s)]}``; raises :class:`ExchangeFailed`
    when the copy does not check out. ``peers_left`` lists the peers that had finished, and
    dropped their partial copy, by the time we asked them for a piece they had announced:
    churn, not a failure (the next source serves the piece)."""
    b = the_board or board()
    rec = _native.registered_file(client, path, wait_checksum=True)
    size = int(rec["size"])
    expected = int(rec["checksum"])
    holders = {h["addr"]: h["name"] for h in rec["holders"] if h["alive"] and h["addr"]}
    if not holders:
        raise ExchangeFailed(f"{path}: no live holder")
    piece = piece_size(size)
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
            client, b, path, fd, size, piece, expected, holders, provider, reads, per_source, stall
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
    piece_bytes: int,
    expected: int,
    holders: dict[str, str],
    me: str,
    reads: int,
    per_source: int,
    stall: float,
) -> dict[str, Any]:
    n = max(1, -(-size // piece_bytes))
    order = list(range(n))
    random.shuffle(order)  # readers start on different pieces: they have some to exchange
    todo = set(order)
    crcs = [0] * n
    log: list[tuple[int, str, str]] = []
    began = time.monotonic()
    timeline: list[tuple[int, str, float, float]] = []
    served: Counter[str] = Counter()
    failures: list[tuple[str, str]] = []
    peers_left: list[tuple[str, int]] = []
    inflight: Counter[str] = Counter()
    bad_peers: set[str] = set()
    guard = threading.Lock()
    taking = threading.Lock()  # one of our threads at a time takes a piece from a holder
    progress = [time.monotonic()]
    error: list[BaseException] = []

    def from_peer(peers: dict[str, Peer]) -> tuple[int, str, str] | None:
        """Under ``guard``: a piece to fetch from a peer this reader is not reading from yet
        (the read counted in flight), if one has a piece still to do."""
        free_peers = [a for a in peers if inflight[a] < per_source]
        random.shuffle(free_peers)
        free_peers.sort(key=lambda a: inflight[a])
        for p in order:
            if p in todo:
                a = next((a for a in free_peers if p in peers[a][1]), None)
                if a is not None:
                    todo.discard(p)
                    inflight[a] += 1
                    return p, a, peers[a][0]
        return None

    def from_holder(peers: dict[str, Peer]) -> tuple[int, str, str] | None:
        """A piece to fetch from a holder this reader is not reading from yet (the read
        counted in flight): one no other reader has or fetches, or after ``stall`` seconds
        without progress the rarest. ``peers`` (the board as last read) spares the board a
        change when every piece left is already on its way to someone."""
        with taking:
            with guard:
                free = [a for a in holders if inflight[a] < per_source]
                if not free or not todo:
                    return None
                candidates = [x for x in order if x in todo]
                rarest = time.monotonic() - progress[0] > stall
                # The board's own choice on our copy of it (``me`` is not in ``peers``:
                # nothing is claimed).
                if _board_op({path: peers}, path, me, "take", (candidates, (), rarest)) is None:
                    return None
                random.shuffle(free)
                free.sort(key=lambda a: inflight[a])
                addr = free[0]
                inflight[addr] += 1
            p = b.take(path, me, candidates, bad_peers | set(holders), rarest)
            with guard:
                if p is None or p not in todo:
                    inflight[addr] -= 1
                    return None
                todo.discard(p)
                return p, addr, holders[addr]

    def next_piece() -> tuple[int, list[tuple[str, str, str]]] | None:
        """A piece to fetch and its sources, the chosen one first: from a holder if one is
        free and a piece no reader has is left (see :func:`from_holder`), else from a peer
        that has a piece still to do. Waits while no source is free; ``None`` when nothing
        is left."""
        while True:
            peers = {
                a: p
                for a, p in b.peers(path).items()
                if a != me and a not in bad_peers and a not in holders
            }
            with guard:
                if not todo or error:
                    return None
            # The holders first: a piece no reader has yet is what the swarm lacks most,
            # and a holder kept busy puts the file into the swarm the soonest.
            chosen, kind = from_holder(peers), "holder"
            if chosen is None:
                with guard:
                    chosen, kind = from_peer(peers), "peer"
            if chosen is not None:
                p, addr, name = chosen
                others = [(a, x[0], "peer") for a, x in peers.items() if p in x[1]]
                others += [(a, x, "holder") for a, x in holders.items()]
                rest = [s for s in others if s[0] != addr]
                return p, [(addr, name, kind), *rest]
            time.sleep(0.02)

    def worker() -> None:
        while True:
            picked = next_piece()
            if picked is None:
                return
            piece, sources = picked
            offset = piece * piece_bytes
            length = min(piece_bytes, size - offset)
            b.claim(path, me, piece)
            for k, (addr, name, kind) in enumerate(sources):
                if k > 0:  # the first source's read was counted when it was chosen
                    with guard:
                        inflight[addr] += 1
                t0 = time.monotonic()
                try:
                    data, crc = _native.read_registered(client, addr, name, offset, length)
                except Exception as e:
                    with guard:
                        if kind == "peer" and isinstance(e, NotFound):
                            # It finished and left the board after we read it.
                            peers_left.append((addr, piece))
                        else:
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
                    progress[0] = time.monotonic()
                    timeline.append((piece, kind, t0 - began, progress[0] - began))
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
        whole = _native.crc32c_combine(whole, crc, min(piece_bytes, size - i * piece_bytes))
    if whole != expected:
        raise ExchangeFailed(f"{path}: checksum {whole:08x}, expected {expected:08x}")
    peer_bytes = sum(
        min(piece_bytes, size - p * piece_bytes) for p, _, kind in log if kind == "peer"
    )
    return {
        "bytes": size,
        "piece": piece_bytes,
        "served": sorted(served.items()),
        "failures": failures,
        "peers_left": peers_left,
        "pieces": sorted(log),
        "peer_bytes": peer_bytes,
        "timeline": timeline,
    }
