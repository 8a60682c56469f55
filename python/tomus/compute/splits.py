"""Input splits: blob ranges aligned to chunk boundaries, with the hosts that store them.

A split covers whole chunks, so its bytes live on the providers that hold those chunks and a
task placed on one of those hosts reads them locally. Text is cut without regard to lines, so
reading is line-aware instead: a split owns the lines that *start* inside it. It skips the tail
of a line begun in the previous split and reads past its end to finish its own last line. Every
line is read by exactly one task whatever the split size, and no index of line offsets is needed.

A registered file (a workflow's output kept in place on its holders, ``tomus.workflow``) is an
input too: its splits are ranges read from its holders (the next holder when one fails), placed
on the holders' hosts. Its checksum covers the whole file only, so those ranges are read as the
holders' disks give them, as the task that wrote the file would read it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import tomus
from tomus import _native
from tomus.compute.engine import count_read, host_of

__all__ = [
    "Input",
    "RegisteredInput",
    "Split",
    "hosts_by_range",
    "iter_lines",
    "plan_splits",
    "read_split",
    "read_text",
    "resolve_inputs",
]

DEFAULT_SPLIT = 4 << 20
_PROBE_MAX = 64 << 10
#: The first look for a line's end: most lines are far shorter.
_PROBE_WINDOW = 4 << 10


@dataclass(frozen=True)
class Split:
    """``[start, end)`` of ``blob`` at ``version`` (whose size is ``size``)."""

    blob: int
    version: int
    start: int
    end: int
    size: int
    hosts: tuple[str, ...] = ()  # storage hosts holding most of the split's bytes
    #: A registered file's holders, ``(address, copy name)``: read from them (``blob`` is 0).
    holders: tuple[tuple[str, str], ...] = ()

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RegisteredInput:
    """A registered file as a job input: its size and holders, ``(address, copy name)``."""

    path: str
    size: int
    holders: tuple[tuple[str, str], ...]


def hosts_by_range(
    locations: list[tuple[int, int, list[str]]], start: int, end: int
) -> tuple[str, ...]:
    """The hosts holding the most bytes of ``[start, end)`` (ties kept)."""
    held: dict[str, int] = {}
    for off, size, providers in locations:
        overlap = min(end, off + size) - max(start, off)
        if overlap <= 0:
            continue
        for h in {host_of(p) for p in providers}:
            held[h] = held.get(h, 0) + overlap
    if not held:
        return ()
    top = max(held.values())
    return tuple(sorted(h for h, n in held.items() if n == top))


#: One input of a job: a blob id, a Blob, a Split, or a path in the tomus namespace
#: (``"data/x.txt"``, ``"tomus://data/x.txt"``; a directory means every file below it).
Input = int | tomus.Blob | Split | str | os.PathLike[str]


def _strip(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    if text.startswith("tomus://"):
        text = text[len("tomus://") :]
    return text.strip("/")


def _file_input(
    client: tomus.Client, ns: tomus.Namespace, path: str, registered: bool
) -> tomus.Blob | RegisteredInput:
    """The file ``path`` as an input: its blob, or a registered file's record."""
    if not registered:
        return ns.open(path)[1]
    record = _native.registered_file(client, "/" + path)
    holders = tuple((str(h["addr"]), str(h["name"])) for h in record["holders"] if h["addr"])
    return RegisteredInput(path, int(record["size"]), holders)


def resolve_inputs(
    client: tomus.Client, inputs: Input | Iterable[Input]
) -> list[int | tomus.Blob | Split | RegisteredInput]:
    """``inputs`` with every namespace path replaced by the blobs of its files (a directory by
    the files below it, recursively, in name order; a registered file by its record). One
    input may be given without a list."""
    if isinstance(inputs, (int, str, os.PathLike, tomus.Blob, Split)):
        inputs = [inputs]
    out: list[int | tomus.Blob | Split | RegisteredInput] = []
    ns = client.namespace()
    for item in inputs:
        if not isinstance(item, (str, os.PathLike)):
            out.append(item)
            continue
        path = _strip(item)
        entry = ns.stat(path)
        if entry["type"] == "file":
            out.append(_file_input(client, ns, path, bool(entry.get("registered"))))
            continue
        files = sorted(
            (e for e in ns.list(path, True) if e["type"] == "file"), key=lambda e: e["name"]
        )
        out.extend(_file_input(client, ns, e["name"], bool(e.get("registered"))) for e in files)
    return out


def plan_splits(
    client: tomus.Client,
    inputs: Input | Iterable[Input],
    split_size: int | None = None,
    *,
    locate: bool = True,
) -> list[Split]:
    """Splits of the latest version of each input blob or file (Splits given are kept as they
    are; paths are resolved by ``resolve_inputs``).

    ``split_size`` is rounded up to a multiple of the blob's chunk size (default: 4 MiB, at
    least one chunk). ``locate``: ask where each split's chunks are (one request per blob).

    The splits of several blobs are interleaved (first split of each blob, then the second...):
    Dask starts tasks roughly in submission order, and blobs written at different times often
    sit on different providers, so interleaving keeps every host's workers busy with local
    splits instead of queueing one host's splits first and having idle workers steal them.
    """
    given: list[Split] = []
    per_blob: list[list[Split]] = []
    for item in resolve_inputs(client, inputs):
        if isinstance(item, Split):
            given.append(item)
            continue
        out: list[Split] = []
        per_blob.append(out)
        if isinstance(item, RegisteredInput):
            step = split_size or DEFAULT_SPLIT
            hosts = tuple(sorted({host_of(addr) for addr, _ in item.holders})) if locate else ()
            for start in range(0, item.size, step):
                end = min(item.size, start + step)
                out.append(Split(0, 0, start, end, item.size, hosts, item.holders))
            continue
        blob = item if isinstance(item, tomus.Blob) else client.open_blob(int(item))
        version = blob.latest()
        size = blob.size(version=version) if version else 0
        if size == 0:
            continue
        chunk = blob.chunk_size
        step = max(chunk, -(-(split_size or DEFAULT_SPLIT) // chunk) * chunk)
        locs = blob.locations(0, size, version=version) if locate else []
        for start in range(0, size, step):
            end = min(size, start + step)
            hosts = hosts_by_range(locs, start, end) if locate else ()
            out.append(Split(blob.id, version, start, end, size, hosts))
    interleaved = [
        q[i] for i in range(max(map(len, per_blob), default=0)) for q in per_blob if i < len(q)
    ]
    return given + interleaved


class _Source:
    """Where a split's bytes are read from: its blob at its version, or its holders."""

    def __init__(self, client: tomus.Client, split: Split) -> None:
        self.client = client
        self.split = split
        self.blob = None if split.holders else client.open_blob(split.blob)

    def read(self, offset: int, length: int) -> bytes:
        if self.blob is not None:
            return self.blob.read(offset, length, version=self.split.version)
        failures = []
        for addr, name in self.split.holders:
            try:
                data, _ = _native.read_registered(self.client, addr, name, offset, length)
                return data
            except Exception as e:  # the next holder
                failures.append(f"{addr}: {e}")
        raise tomus.Unavailable(
            f"no holder of a registered input served bytes {offset}..{offset + length}: "
            + "; ".join(failures)
        )


def read_split(client: tomus.Client, split: Split) -> bytes:
    """The raw bytes of the split."""
    data = _Source(client, split).read(split.start, split.length)
    count_read(len(data))
    return data


def read_text(client: tomus.Client, split: Split) -> bytes:
    """The lines that start inside the split, each with its newline (the last line of the blob
    may have none).

    Where the split's first line starts and where its last line ends are found first, by small
    reads around its two ends; the lines are then read in one piece, straight into the bytes
    returned, copied once. (Reading the whole split and then cutting and joining it copied every
    byte twice more.)"""
    source = _Source(client, split)
    begin = split.start
    if split.start > 0:
        # A line starts at the split's first byte only if the byte before it ends a line.
        nl = _find_newline(source, split.start - 1, split.end)
        if nl is None or nl + 1 >= split.end:
            return b""  # one line runs through the whole split; it belongs to an earlier one
        begin = nl + 1
    cut = split.end
    if cut < split.size:
        # The split's last line ends at the first newline from its last byte on.
        nl = _find_newline(source, split.end - 1, split.size)
        cut = split.size if nl is None else nl + 1
    count_read(cut - begin)
    return source.read(begin, cut - begin)


def _find_newline(source: _Source, pos: int, limit: int) -> int | None:
    """Where the first newline in bytes ``[pos, limit)`` of ``source`` is, if there is one."""
    window = _PROBE_WINDOW
    while pos < limit:
        piece = source.read(pos, min(window, limit - pos))
        count_read(len(piece))
        nl = piece.find(b"\n")
        if nl >= 0:
            return pos + nl
        pos += len(piece)
        window = min(window * 4, _PROBE_MAX)  # a long line: look further at once
    return None


def iter_lines(text: bytes) -> Iterator[bytes]:
    """The lines of ``text`` without their newlines."""
    if not text:
        return
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    yield from lines
