"""Self-delimiting frames: the unit that compute tasks append to shared blobs.

Many map tasks append to one blob per partition at once, so a reader sees their outputs
interleaved in whatever order the manager assigned versions. Each frame therefore carries its
own length, the task that wrote it (``tag``) and the attempt of that task (``attempt``): a
reader can walk the blob without an external index and drop frames of attempts that did not
win (a task retried after its worker died may have appended part of its output already).

An append whose writer died is later turned into a hole that reads as zeros (the manager's
aborted versions), so the walker skips runs of zero bytes between frames; a frame never starts
with a zero byte because of its magic.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["HEADER_SIZE", "MAGIC", "Frame", "FrameError", "encode", "iter_frames"]

MAGIC = b"TMF1"
_HEADER = struct.Struct("<4sIQQI")  # magic, tag, attempt, payload length, crc32 of payload
HEADER_SIZE = _HEADER.size


class FrameError(ValueError):
    """The bytes are not a sequence of intact frames (bad magic, short frame, bad checksum)."""


@dataclass(frozen=True)
class Frame:
    tag: int
    attempt: int
    offset: int  # of the header, in the buffer walked
    payload: memoryview


def encode(payload: bytes | bytearray | memoryview, tag: int = 0, attempt: int = 0) -> bytes:
    """One frame: header then payload (a single buffer, so one append writes it whole)."""
    header = _HEADER.pack(MAGIC, tag, attempt, len(payload), zlib.crc32(payload))
    return b"".join((header, payload))


def iter_frames(buf: bytes | bytearray | memoryview) -> Iterator[Frame]:
    """Yields the frames of ``buf`` in order, skipping zero-filled holes between them."""
    view = memoryview(buf).cast("B")
    raw = buf if isinstance(buf, bytes) else None  # a copy is made only if there are holes
    pos, end = 0, len(view)
    while pos < end:
        if view[pos] == 0:
            if raw is None:
                raw = bytes(view)
            nxt = _next_nonzero(raw, pos)
            if nxt >= end:
                return
            pos = nxt
        if end - pos < HEADER_SIZE:
            raise FrameError(f"truncated frame header at offset {pos}")
        magic, tag, attempt, length, crc = _HEADER.unpack_from(view, pos)
        if magic != MAGIC:
            raise FrameError(f"no frame at offset {pos} (found {bytes(magic)!r})")
        start = pos + HEADER_SIZE
        if start + length > end:
            raise FrameError(f"frame at offset {pos} claims {length} bytes, {end - start} left")
        payload = view[start : start + length]
        if zlib.crc32(payload) != crc:
            raise FrameError(f"checksum mismatch in the frame at offset {pos}")
        yield Frame(tag, attempt, pos, payload)
        pos = start + length


def _next_nonzero(raw: bytes, pos: int) -> int:
    rest = raw[pos:]
    return pos + len(rest) - len(rest.lstrip(b"\0"))
