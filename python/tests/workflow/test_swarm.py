"""Swarm: a file broadcast to 8 readers from one initial holder. Readers that finished
register their copies (on their own providers) and serve the later ones, so the initial
holder serves well under the total (asserted from the per-holder bytes of each fetch)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workflow_support import write

import tomus
from tomus import workflow
from tomus.workflow.modules import FileInfo, SwarmModule, TransferContext
from tomus.workflow.runner import file_info

SIZE = (64 << 20) + 12345


def test_swarm_broadcast_spreads_the_load(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    data = write(tmp_path / "src", SIZE)
    path = "/t/swarm/broadcast.bin"
    workflow.register(client, tmp_path / "src", path, provider=providers[0])
    swarm = SwarmModule()
    served: Counter[str] = Counter()
    # Readers run in threads: `served[addr] += n` is a read-modify-write that a thread switch
    # can cut, losing a count, so each reader's counts are added under a lock.
    count = threading.Lock()

    def read(i: int) -> None:
        info = file_info(client, path)
        assert isinstance(info, FileInfo)
        ctx = TransferContext(
            file=info, pending_readers=8 - i, provider=providers[i % len(providers)], client=client
        )
        dest = tmp_path / f"reader{i}"
        report = swarm.fetch(info, dest, ctx)
        assert dest.read_bytes() == data, f"reader {i} got other bytes"
        with count:
            for addr, n in report["served"]:
                served[addr] += n

    # Waves of 1, 2 and 5 readers: each wave sees the holders the earlier ones left.
    read(1)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(read, [2, 3]))
    with ThreadPoolExecutor(5) as pool:
        list(pool.map(read, [4, 5, 6, 7, 8]))
    total = sum(served.values())
    assert total == 8 * SIZE
    holders = {h["addr"] for h in workflow.registered(client, path)["holders"]}
    assert holders == set(providers), "finished readers did not become holders"
    assert len([a for a, n in served.items() if n > 0]) >= 3, served
    # Without the swarm it would serve all of it; the pieces go to whichever holder is free,
    # so a loaded machine shifts the split a little.
    assert served[providers[0]] < 0.6 * total, served


def test_simultaneous_readers_take_turns_on_holders(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    """Without piece exchange: 8 readers start together on 1 holder (a broadcast as the
    runner submits it): without turns all 8 would share that holder and it would serve 8
    copies; with turns each holder serves one reader at a time and finished readers serve
    the rest."""
    size = (16 << 20) + 777
    data = write(tmp_path / "src", size, seed=3)
    path = "/t/swarm/together.bin"
    workflow.register(client, tmp_path / "src", path, provider=providers[0])
    info = file_info(client, path)
    assert isinstance(info, FileInfo) and len(info.holders) == 1
    swarm = SwarmModule(exchange=False)

    def read(i: int) -> dict[str, object]:
        ctx = TransferContext(
            file=info, pending_readers=8, provider=providers[i % len(providers)], client=client
        )
        dest = tmp_path / f"together{i}"
        report = swarm.fetch(info, dest, ctx)
        assert dest.read_bytes() == data, f"reader {i} got other bytes"
        return report

    with ThreadPoolExecutor(8) as pool:
        reports = list(pool.map(read, range(8)))
    served: Counter[str] = Counter()
    for r in reports:
        for addr, n in r["served"]:  # type: ignore[attr-defined]
            served[addr] += n
    assert sum(served.values()) == 8 * size
    assert any(r.get("turn_wait_polls", 0) for r in reports), "no reader waited for a turn"
    holders = {h["addr"] for h in workflow.registered(client, path)["holders"]}
    assert holders == set(providers), "finished readers did not become holders"
    # One reader per holder at a time: the first holder serves a few copies, not all 8, and
    # readers that finished served the others. How many of them did depends on how soon each
    # registration lands against the next turns (a CI run under a load of ~9 saw two servers
    # where a quiet machine sees three or four), so only "more than the first" is asserted.
    assert served[providers[0]] <= 5 * size, served
    assert len([a for a, n in served.items() if n > 0]) >= 2, served


def test_readers_still_downloading_serve_each_other_pieces(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    """Piece exchange: 3 readers on 3 other providers start together on 1 holder; each
    shares its copy while it downloads, so pieces come from readers still in progress (the
    report lists the source of every piece), and the holder serves each piece about once
    (super-seeding), not the 3 copies it would alone."""
    from tomus.workflow import pieces

    size = (96 << 20) + 4321
    data = write(tmp_path / "src", size, seed=5)
    path = "/t/swarm/exchange.bin"
    workflow.register(client, tmp_path / "src", path, provider=providers[0])
    info = file_info(client, path)
    assert isinstance(info, FileInfo) and len(info.holders) == 1
    start = threading.Barrier(3)
    readers = providers[1:4]

    def read(i: int) -> dict[str, object]:
        ctx = TransferContext(file=info, pending_readers=3, provider=readers[i], client=client)
        dest = tmp_path / f"exchange{i}"
        start.wait()
        report = SwarmModule().fetch(info, dest, ctx)
        assert dest.read_bytes() == data, f"reader {i} got other bytes"
        return report

    with ThreadPoolExecutor(3) as pool:
        reports = list(pool.map(read, range(3)))
    piece = pieces.piece_size(size)
    count = -(-size // piece)
    from_peers: Counter[str] = Counter()
    for i, r in enumerate(reports):
        assert r["failures"] == [], r["failures"]
        log = r["pieces"]  # type: ignore[index]
        assert r["piece"] == piece
        assert sorted(p for p, _, _ in log) == list(range(count)), f"reader {i}: {log}"
        for _, addr, kind in log:
            assert (kind == "holder") == (addr == providers[0]), log
            assert addr != readers[i], "a reader fetched from itself"
            if kind == "peer":
                from_peers[addr] += 1
    assert sum(from_peers.values()) > 0, "no piece came from a reader still downloading"
    served: Counter[str] = Counter()
    for r in reports:
        for addr, n in r["served"]:  # type: ignore[attr-defined]
            served[addr] += n
    assert sum(served.values()) == 3 * size
    print(f"pieces from peers: {dict(from_peers)}; bytes served: {dict(served)}")
    # Two readers rarely take the same piece from the holder at once; a reader that waits
    # for a piece a peer fetches takes it from the holder only after seconds (`STALL`).
    assert served[providers[0]] < 1.5 * size, served
    # Every reader is a holder now; no partial copy stays registered.
    holders = {h["addr"] for h in workflow.registered(client, path)["holders"]}
    assert holders == set(providers)


def test_a_peer_serving_wrong_pieces_is_caught_and_the_holders_serve(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    """A reader on the piece board claims every piece of the file but its copy holds other
    bytes: the whole-file checksum catches it and the file comes from the holders."""
    from tomus.workflow import pieces

    size = (24 << 20) + 99
    data = write(tmp_path / "src", size, seed=7)
    write(tmp_path / "liar", size, seed=11)
    path = "/t/swarm/liar.bin"
    workflow.register(client, tmp_path / "src", path, provider=providers[0])
    lie = workflow.register(client, tmp_path / "liar", "/t/swarm/liar-copy.bin",
                            provider=providers[2])  # fmt: skip
    liar_name = lie["holders"][0]["name"]
    board = pieces.board()
    board.join(path, providers[2], liar_name)
    for p in range(-(-size // pieces.piece_size(size))):
        board.have(path, providers[2], p)
    try:
        info = file_info(client, path)
        assert isinstance(info, FileInfo)
        ctx = TransferContext(file=info, pending_readers=2, provider=providers[1], client=client)
        report = SwarmModule().fetch(info, tmp_path / "got", ctx)
    finally:
        board.leave(path, providers[2])
    assert (tmp_path / "got").read_bytes() == data
    assert report["failures"][0][0] == "exchange", report["failures"]
    assert "checksum" in report["failures"][0][1]
    assert dict(report["served"]).get(providers[0]) == size, report["served"]


def registered_with_a_peer(
    client: tomus.Client, providers: list[str], tmp_path: Path, path: str, size: int, seed: int
) -> tuple[bytes, Any]:
    """A file of ``size`` bytes registered at ``path`` with ``providers[0]`` as its holder,
    and a piece board on which a reader on ``providers[2]`` joined, sharing a copy its
    provider does not hold (a name of the form providers give their copies)."""
    from tomus.workflow import pieces

    data = write(tmp_path / "src", size, seed=seed)
    workflow.register(client, tmp_path / "src", path, provider=providers[0])
    board = pieces.PieceBoard()
    board.join(path, providers[2], "1a21add5298-61c5-7")
    return data, board


def test_a_piece_claimed_by_a_reader_that_died_comes_from_the_holder_after_a_stall(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    """A reader that died stays on the board with its claims: a holder serves each piece to
    one reader only (super-seeding), so the live reader waits for the dead one's pieces,
    then after ``stall`` seconds without progress takes them from the holder."""
    from tomus.workflow import pieces

    size = (16 << 20) + 5
    path = "/t/swarm/stalled.bin"
    data, board = registered_with_a_peer(client, providers, tmp_path, path, size, seed=13)
    claimed = list(range(0, -(-size // pieces.piece_size(size)), 2))
    for p in claimed:
        board.claim(path, providers[2], p)
    start = time.monotonic()
    report = pieces.exchange(
        client, path, tmp_path / "got", providers[1], the_board=board, stall=1.0
    )
    assert time.monotonic() - start >= 1.0, "the claimed pieces were taken without waiting"
    assert (tmp_path / "got").read_bytes() == data
    assert report["failures"] == [], report["failures"]
    assert dict(report["served"]) == {providers[0]: size}, report["served"]
    assert sorted(p for p, _, _ in report["pieces"] if p in claimed) == claimed


def test_a_peer_that_left_after_announcing_its_pieces_is_churn_not_a_failure(
    client: tomus.Client, providers: list[str], tmp_path: Path
) -> None:
    """A reader that finished drops its partial copy right after leaving the board, so a
    reader that looked at the board just before can ask it for a piece it no longer shares.
    That piece then comes from the next source; the report lists the peer under
    ``peers_left``, not under ``failures``."""
    from tomus.workflow import pieces

    size = (8 << 20) + 77
    path = "/t/swarm/left.bin"
    data, board = registered_with_a_peer(client, providers, tmp_path, path, size, seed=17)
    # The peer has every piece on the board, and no copy on its provider any more.
    count = -(-size // pieces.piece_size(size))
    for p in range(count):
        board.have(path, providers[2], p)
    report = pieces.exchange(client, path, tmp_path / "got", providers[1], the_board=board)
    assert (tmp_path / "got").read_bytes() == data
    assert report["failures"] == [], report["failures"]
    assert report["peers_left"] and {a for a, _ in report["peers_left"]} == {providers[2]}
    assert dict(report["served"]) == {providers[0]: size}, report["served"]
