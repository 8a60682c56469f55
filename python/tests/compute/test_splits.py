"""Splits and frames against a real tomus cluster (no Dask)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tomus
from tomus.compute import frames
from tomus.compute.splits import iter_lines, plan_splits, read_text

line = st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"."))


@settings(max_examples=25, deadline=None)
@given(
    lines=st.lists(line, max_size=60),
    trailing_newline=st.booleans(),
    split_chunks=st.integers(1, 3),
)
def test_every_line_is_owned_by_exactly_one_split(
    tc: tomus.Client, lines: list[bytes], trailing_newline: bool, split_chunks: int
) -> None:
    text = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    if not text:
        return
    blob = tc.create_blob(chunk_size=4096)
    blob.write(0, text)
    splits = plan_splits(tc, [blob.id], split_size=split_chunks * 4096)
    assert [s.start for s in splits] == list(range(0, len(text), split_chunks * 4096))
    assert all(s.start % 4096 == 0 for s in splits)  # aligned to chunk boundaries
    owned = [read_text(tc, s) for s in splits]
    assert b"".join(owned) == text
    assert [ln for o in owned for ln in iter_lines(o)] == list(iter_lines(text))


def test_long_lines_are_owned_by_the_split_they_start_in(tc: tomus.Client) -> None:
    # Lines longer than a split and than the reads that look for a line's end (4-64 KiB),
    # starting right at split boundaries, ending just before and just after them.
    lengths = [0, 4095, 4094, 1, 70_000, 200_000, 8191, 3, 0, 12_288, 65_536, 5]
    text = b"\n".join(bytes([97 + i % 26]) * n for i, n in enumerate(lengths))
    blob = tc.create_blob(chunk_size=4096)
    blob.write(0, text)
    for split_chunks in (1, 2, 5):
        splits = plan_splits(tc, [blob.id], split_size=split_chunks * 4096)
        owned = [read_text(tc, s) for s in splits]
        assert b"".join(owned) == text
        assert [ln for o in owned for ln in iter_lines(o)] == list(iter_lines(text))
        # Each split's text starts at a line start inside it.
        begin = 0
        for s, o in zip(splits, owned, strict=True):
            if o:
                assert s.start <= begin < s.end
                assert begin == 0 or text[begin - 1] == ord("\n")
            begin += len(o)
    # No newline at all: the first split reads the blob whole, the others nothing.
    flat = b"x" * 50_000
    blob = tc.create_blob(chunk_size=4096)
    blob.write(0, flat)
    splits = plan_splits(tc, [blob.id], split_size=4096)
    assert [read_text(tc, s) for s in splits] == [flat] + [b""] * (len(splits) - 1)


def test_split_size_rounds_up_to_chunks_and_splits_know_their_hosts(
    tc: tomus.Client,
) -> None:
    blob = tc.create_blob(chunk_size=4096)
    blob.write(0, b"x\n" * 10000)
    splits = plan_splits(tc, [blob.id], split_size=5000)
    assert {s.length for s in splits[:-1]} == {8192}
    providers = {p.addr.rsplit(":", 1)[0] for p in tc.providers()}
    assert all(s.hosts and set(s.hosts) <= providers for s in splits)


def test_frames_round_trip_skip_holes_and_detect_damage() -> None:
    a = frames.encode(b"first", tag=1, attempt=7)
    b = frames.encode(b"", tag=2, attempt=8)
    c = frames.encode(b"third" * 100, tag=3, attempt=9)
    buf = a + bytes(37) + b + c + bytes(5)  # zero holes: aborted appends
    got = [(f.tag, f.attempt, bytes(f.payload)) for f in frames.iter_frames(buf)]
    assert got == [(1, 7, b"first"), (2, 8, b""), (3, 9, b"third" * 100)]
    damaged = bytearray(a + c)
    damaged[len(a) + frames.HEADER_SIZE + 3] ^= 0xFF
    with pytest.raises(frames.FrameError, match="checksum"):
        list(frames.iter_frames(damaged))
    with pytest.raises(frames.FrameError, match="claims"):
        list(frames.iter_frames(a[:-2]))
