"""The .tzst archive format on its own: round trips in both modes, members spanning solid
frames, grouped beating per-file on similar files, and damaged archives refused."""

from __future__ import annotations

import os

import pytest
from similar import similar_files

from tomus.services.archive import Archive, ArchiveError, ArchiveWriter


def build(members: dict[str, bytes], **kw: object) -> tuple[bytes, dict[str, object]]:
    out = bytearray()
    w = ArchiveWriter(out.extend, **kw)  # type: ignore[arg-type]
    for p, d in members.items():
        w.add(p, d)
    stats = w.finish()
    return bytes(out), stats


def reader(data: bytes) -> Archive:
    return Archive(lambda off, n: data[off : off + n], len(data))


@pytest.mark.parametrize("mode", ["solid", "dict"])
def test_round_trip_is_byte_exact_and_beats_per_file(mode: str) -> None:
    files = similar_files(60, 8 << 10)
    members = {f"/r/run-{i:03}.csv": d for i, d in enumerate(files)}
    members["/r/empty"] = b""
    data, stats = build(members, mode=mode)
    arch = reader(data)
    assert arch.names() == list(members)
    for p, d in members.items():
        assert arch.read(p) == d
    assert stats["input_bytes"] == sum(len(d) for d in files)
    assert stats["grouped_bytes"] < stats["per_file_bytes"]
    assert stats["gain"] > 0.2, stats  # similar files: much better together
    assert arch.stats["members"] == len(members)


def test_members_spanning_solid_frames() -> None:
    members = {"/a": os.urandom(10_000), "/b": b"x" * 25_000, "/c": os.urandom(3), "/d": b""}
    data, stats = build(members, frame_size=4096, baseline=False)
    arch = reader(data)
    assert len(arch.index["frames"]) == 9  # 35003 bytes in 4 KiB frames
    assert "per_file_bytes" not in stats
    for p, d in members.items():
        assert arch.read(p) == d
    with pytest.raises(Exception, match="not in the archive"):
        arch.read("/nope")


def test_damaged_archives_are_refused() -> None:
    data, _ = build({"/a": b"hello " * 1000})
    with pytest.raises(ArchiveError, match="bad magic"):
        reader(b"nope" + data[4:])
    with pytest.raises(ArchiveError, match="trailer"):
        reader(data[:-3] + b"XYZ")
    # Flip one byte inside the first frame: zstd's checksum (or ours) catches it.
    bad = bytearray(data)
    bad[20] ^= 0xFF
    with pytest.raises(ArchiveError):
        reader(bytes(bad)).read("/a")
