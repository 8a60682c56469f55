"""The grouped-compression archive (``.tzst``): many files compressed together with zstd.

Compressing many similar result files together finds the redundancy *between* them, which
compressing each alone cannot (DataSteward measured up to 20% better ratios). Two modes:

- ``solid``: the members' bytes, concatenated in order, are cut into frames of ``frame_size``
  uncompressed bytes (16 MiB by default) and each frame is one zstd frame whose window covers
  the whole frame, so a member matches against every member before it in the frame. Reading
  one member decompresses only the frames it overlaps.
- ``dict``: zstd trains a dictionary on the members (it suits many *small* similar files), and
  each member is its own frame compressed with it: exact random access per member.

Layout (little-endian)::

    b"TZST\\x00\\x01\\n\\x00"         magic and format version (8 bytes)
    [dictionary]                   dict mode only: the raw zstd dictionary
    frame, frame, ...              zstd frames (content size and checksum in each)
    index                          zstd-compressed JSON (below)
    u64 index offset, u64 index length, b"TZSTEND\\n"   trailer (24 bytes)

Index: ``{"format": 1, "mode", "level", "dict": [offset, length] | null, "frames": [[offset,
length, uncompressed offset, uncompressed length], ...], "members": [{"path", "size",
"offset" (in the uncompressed stream), "sha256", "version"}], "stats": {...}}``. A reader
checks each member's SHA-256 on the way out, so what it returns is byte-exact or an error.

The archive is written through a ``BlobWriter`` and published by one commit: it appears whole or
not at all, and a service retried after its worker died simply writes it again.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import zstandard as zstd

import tomus

__all__ = [
    "DEFAULT_FRAME_SIZE",
    "DEFAULT_LEVEL",
    "Archive",
    "ArchiveError",
    "ArchiveWriter",
    "Member",
]

MAGIC = b"TZST\x00\x01\n\x00"
_TRAILER = struct.Struct("<QQ8s")
TRAILER_MAGIC = b"TZSTEND\n"
DEFAULT_LEVEL = 9
DEFAULT_FRAME_SIZE = 16 << 20
DEFAULT_DICT_SIZE = 112 << 10  # zstd's own default dictionary size
# Training reads at most this much of the members: zstd suggests ~100x the dictionary size,
# and training time grows with it (26 MiB of samples took ~30 s on a loaded 2-core machine).
_DICT_SAMPLE_BYTES = 12 << 20


class ArchiveError(ValueError):
    """Not a tzst archive, a damaged one, or a member whose bytes do not match its checksum."""


@dataclass(frozen=True)
class Member:
    path: str
    size: int
    offset: int  # in the uncompressed stream
    sha256: str
    version: int | None = None


def _params(level: int, window_log: int | None) -> zstd.ZstdCompressionParameters:
    return zstd.ZstdCompressionParameters.from_level(
        level, window_log=window_log or 0, write_checksum=1, write_content_size=1
    )


def _window_log(frame_size: int) -> int:
    """The smallest window (>= 2^17) covering a whole frame, so matches reach its start."""
    return max(17, min(30, (max(frame_size, 1) - 1).bit_length()))


@dataclass
class ArchiveWriter:
    """Builds an archive into ``sink`` (a callable taking bytes, e.g. ``BlobWriter.write``).

    ``add`` each member's bytes in order, then ``finish``. ``baseline=True`` also compresses
    each member alone with the same level, so ``stats`` compares grouped with per-file.
    In ``dict`` mode the members are kept until ``finish`` (the dictionary is trained on them).
    """

    sink: Callable[[bytes], object]
    mode: str = "solid"
    level: int = DEFAULT_LEVEL
    frame_size: int = DEFAULT_FRAME_SIZE
    dict_size: int = DEFAULT_DICT_SIZE
    baseline: bool = True
    members: list[Member] = field(default_factory=list)
    frames: list[list[int]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    _written: int = 0
    _total: int = 0
    _pending: bytearray = field(default_factory=bytearray)
    _held: list[bytes] = field(default_factory=list)
    _per_file: int = 0
    # Seconds spent compressing (training included), grouped and per file: the writer's
    # caller reads the members in between, which neither figure should count.
    _grouped_seconds: float = 0.0
    _baseline_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in ("solid", "dict"):
            raise ValueError(f"unknown mode {self.mode!r} (solid or dict)")
        if self.frame_size <= 0:
            raise ValueError("frame_size must be positive")
        self._cctx = zstd.ZstdCompressor(
            compression_params=_params(self.level, _window_log(self.frame_size))
        )
        self._alone = zstd.ZstdCompressor(level=self.level, write_checksum=True)
        self._put(MAGIC)

    def _put(self, data: bytes) -> int:
        at = self._written
        self.sink(data)
        self._written += len(data)
        return at

    def _compress(self, cctx: zstd.ZstdCompressor, data: bytes) -> bytes:
        t = time.perf_counter()
        out = cctx.compress(data)
        self._grouped_seconds += time.perf_counter() - t
        return out

    def _frame(self, compressed: bytes, u_off: int, u_len: int) -> None:
        at = self._put(compressed)
        self.frames.append([at, len(compressed), u_off, u_len])

    def add(self, path: str, data: bytes, version: int | None = None) -> None:
        self.members.append(
            Member(path, len(data), self._total, hashlib.sha256(data).hexdigest(), version)
        )
        if self.baseline:
            t = time.perf_counter()
            self._per_file += len(self._alone.compress(data))
            self._baseline_seconds += time.perf_counter() - t
        if self.mode == "dict":
            self._held.append(bytes(data))
        else:
            self._pending += data
            start = self._total - (len(self._pending) - len(data))
            while len(self._pending) >= self.frame_size:
                piece = bytes(self._pending[: self.frame_size])
                del self._pending[: self.frame_size]
                self._frame(self._compress(self._cctx, piece), start, len(piece))
                start += len(piece)
        self._total += len(data)

    def _finish_dict(self) -> list[int] | None:
        samples: list[bytes | bytearray | memoryview] = []
        budget = _DICT_SAMPLE_BYTES
        for held in self._held:
            if budget <= 0:
                break
            samples.append(held[:budget])
            budget -= len(held[:budget])
        dict_range: list[int] | None = None
        cctx = self._alone
        try:
            t = time.perf_counter()
            d = zstd.train_dictionary(self.dict_size, samples, level=self.level)
            self._grouped_seconds += time.perf_counter() - t
        except zstd.ZstdError as e:  # too few or too small samples: no dictionary
            self.stats["dict_error"] = str(e)
        else:
            raw = d.as_bytes()
            dict_range = [self._put(raw), len(raw)]
            cctx = zstd.ZstdCompressor(level=self.level, dict_data=d, write_checksum=True)
        for member, data in zip(self.members, self._held, strict=True):
            self._frame(self._compress(cctx, data), member.offset, member.size)
        self._held.clear()
        return dict_range

    def finish(self) -> dict[str, Any]:
        """Writes the remaining frames, the index and the trailer; returns ``stats``."""
        dict_range = None
        if self.mode == "dict":
            dict_range = self._finish_dict()
        elif self._pending:
            piece = bytes(self._pending)
            self._pending.clear()
            self._frame(self._compress(self._cctx, piece), self._total - len(piece), len(piece))
        grouped = self._written - len(MAGIC)
        self.stats.update(
            members=len(self.members),
            input_bytes=self._total,
            grouped_bytes=grouped,
            grouped_ratio=self._total / grouped if grouped else 0.0,
            grouped_seconds=self._grouped_seconds,
        )
        if self.baseline:
            self.stats.update(
                per_file_bytes=self._per_file,
                per_file_ratio=self._total / self._per_file if self._per_file else 0.0,
                per_file_seconds=self._baseline_seconds,
                # How much smaller grouped is than the sum of per-file compressions.
                gain=1.0 - grouped / self._per_file if self._per_file else 0.0,
            )
        index = {
            "format": 1,
            "mode": self.mode,
            "level": self.level,
            "dict": dict_range,
            "frames": self.frames,
            "members": [vars(m) for m in self.members],
            "stats": self.stats,
        }
        packed = zstd.ZstdCompressor(level=3).compress(json.dumps(index).encode())
        at = self._put(packed)
        self._put(_TRAILER.pack(at, len(packed), TRAILER_MAGIC))
        self.stats["archive_bytes"] = self._written
        return self.stats


class Archive:
    """Reads a tzst archive stored in tomus, member by member (``read_at(offset, size)`` is any
    function returning the archive's bytes at a range: a blob's ``read`` pinned to a version)."""

    def __init__(self, read_at: Callable[[int, int], bytes], size: int) -> None:
        self._read_at = read_at
        if size < len(MAGIC) + _TRAILER.size or read_at(0, len(MAGIC)) != MAGIC:
            raise ArchiveError("not a tzst archive (bad magic)")
        at, length, magic = _TRAILER.unpack(read_at(size - _TRAILER.size, _TRAILER.size))
        if magic != TRAILER_MAGIC or at + length > size - _TRAILER.size:
            raise ArchiveError("damaged tzst archive (bad trailer)")
        try:
            self.index: dict[str, Any] = json.loads(
                zstd.ZstdDecompressor().decompress(read_at(at, length))
            )
        except (zstd.ZstdError, ValueError) as e:
            raise ArchiveError(f"damaged tzst archive index: {e}") from e
        self.members = {m["path"]: Member(**m) for m in self.index["members"]}
        self._frames: list[list[int]] = self.index["frames"]
        self._starts = [f[2] for f in self._frames]
        dict_range = self.index.get("dict")
        self._dctx = zstd.ZstdDecompressor(
            dict_data=zstd.ZstdCompressionDict(read_at(*dict_range)) if dict_range else None
        )
        # The last frame decompressed: members read in order share their solid frames.
        self._cached: tuple[int, bytes] = (-1, b"")

    @classmethod
    def open(cls, client: tomus.Client, path: str, version: int | None = None) -> Archive:
        """The archive at ``path`` in the namespace (its latest version unless ``version``)."""
        _, blob, stat = client.namespace().open_version(path, version)
        v = stat.version
        return cls(lambda off, n: blob.read(off, n, v), stat.size)

    @property
    def stats(self) -> dict[str, Any]:
        return dict(self.index.get("stats", {}))

    def names(self) -> list[str]:
        return list(self.members)

    def _frames_for(self, offset: int, size: int) -> Iterator[list[int]]:
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while i < len(self._frames) and self._frames[i][2] < offset + size:
            yield self._frames[i]
            i += 1

    def _frame(self, c_off: int, c_len: int, u_len: int, path: str) -> bytes:
        if self._cached[0] == c_off:
            return self._cached[1]
        try:
            frame = self._dctx.decompress(self._read_at(c_off, c_len), max_output_size=u_len)
        except zstd.ZstdError as e:
            raise ArchiveError(f"{path}: damaged frame at {c_off}: {e}") from e
        self._cached = (c_off, frame)
        return frame

    def read(self, path: str) -> bytes:
        """The member's bytes, checked against its SHA-256 (NotFound if not a member)."""
        m = self.members.get("/" + path.lstrip("/")) or self.members.get(path)
        if m is None:
            raise tomus.NotFound(f"{path} is not in the archive")
        out = bytearray()
        for c_off, c_len, u_off, u_len in self._frames_for(m.offset, m.size):
            frame = self._frame(c_off, c_len, u_len, m.path)
            lo = max(m.offset, u_off) - u_off
            hi = min(m.offset + m.size, u_off + u_len) - u_off
            out += frame[lo:hi]
        data = bytes(out)
        if len(data) != m.size or hashlib.sha256(data).hexdigest() != m.sha256:
            raise ArchiveError(f"{m.path}: extracted bytes do not match the recorded checksum")
        return data

    def items(self, paths: Iterable[str] | None = None) -> Iterator[tuple[str, bytes]]:
        for p in self.names() if paths is None else paths:
            yield p, self.read(p)
