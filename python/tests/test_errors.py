"""Every bad input is a typed exception (never a panic, a hang or wrong data)."""

from __future__ import annotations

import os
import socket
import threading
import time
import tracemalloc

import pytest
from blob_support import CHUNK

import tomus


def test_unknown_blob_is_not_found(client: tomus.Client) -> None:
    with pytest.raises(tomus.NotFound, match="does not exist") as e:
        client.open_blob(10**12)
    assert isinstance(e.value, FileNotFoundError) and e.value.kind == "NotFound"


def test_read_past_end_is_out_of_range(blob: tomus.Blob) -> None:
    blob.write(0, b"0123456789")
    for offset, size in [(0, 11), (10, 1), (5, 6), (2**62, 1)]:
        with pytest.raises(tomus.OutOfRange):
            blob.read(offset, size)
    with pytest.raises(tomus.OutOfRange):
        blob.read(11)
    with pytest.raises(ValueError):  # OutOfRange is a ValueError too
        blob.locations(0, 100)


def test_read_checks_the_range_before_allocating(blob: tomus.Blob) -> None:
    """A size past the end is refused from the version's size, before a buffer of that size is
    allocated: ``OutOfRange`` naming the range, blob, version and size, not ``MemoryError`` (nor
    gigabytes zeroed only to be dropped)."""
    v = blob.write(0, os.urandom(100_000))
    tracemalloc.start()
    try:
        for offset, size in [(0, 2**40), (0, 1 << 30), (99_999, 2**63 - 1), (2**63 - 1, 2**63 - 1)]:
            tracemalloc.reset_peak()
            with pytest.raises(tomus.errors.OutOfRange) as e:
                blob.read(offset, size)
            assert tracemalloc.get_traced_memory()[1] < 1 << 20
            assert str(e.value) == (
                f"range {offset}..{offset + size} is past the end of blob {blob.id} "
                f"at version {v} (size 100000)"
            )
    finally:
        tracemalloc.stop()
    with pytest.raises(ValueError, match="size must be >= 0"):
        blob.read(0, -1)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        blob.read(-1, 10)
    assert len(blob.read(0, 100_000, version=v)) == 100_000


@pytest.mark.parametrize("chunk_size", [0, 1000, 2048, 4096 + 1, 512 << 20])
def test_bad_chunk_size_is_invalid_argument(client: tomus.Client, chunk_size: int) -> None:
    with pytest.raises(tomus.InvalidArgument) as e:
        client.create_blob(chunk_size=chunk_size)
    assert isinstance(e.value, ValueError)


def test_bad_arguments(client: tomus.Client, blob: tomus.Blob) -> None:
    with pytest.raises(tomus.InvalidArgument):
        blob.write(0, b"")  # an empty write creates no version
    with pytest.raises(tomus.InvalidArgument):
        blob.append(bytearray())
    with pytest.raises(ValueError, match="offset"):
        blob.write(-1, b"x")
    with pytest.raises(ValueError, match="chunk_size"):
        client.create_blob(chunk_size=-4096)
    with pytest.raises(TypeError):
        blob.write(0, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        blob.append(12)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="parallelism"):
        tomus.connect(client.addr, parallelism=0)
    with pytest.raises(ValueError, match="timeout"):
        tomus.connect(client.addr, timeout=-1)
    with pytest.raises(tomus.InvalidArgument, match="16 bytes"):
        tomus.connect(client.addr, secret="short")


def test_future_version_is_not_found(blob: tomus.Blob) -> None:
    blob.write(0, b"x")
    with pytest.raises(tomus.NotFound):
        blob.read(0, 1, version=99)
    with pytest.raises(tomus.NotFound):
        blob.stat(99)


def test_unpublished_version_is_version_not_published(client: tomus.Client) -> None:
    """Polls the next version while a large many-chunk write is between getting its version
    and being published (most of that write's duration with 4 KiB chunks)."""
    blob = client.create_blob(chunk_size=4096)
    blob.write(0, b"x")
    for _ in range(10):
        target = blob.latest() + 1
        done = threading.Event()

        def write(done: threading.Event = done) -> None:
            try:
                blob.write(0, os.urandom(4 << 20))
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()
        caught = None
        while not done.is_set() and caught is None:
            try:
                blob.read(0, 1, version=target)
            except tomus.VersionNotPublished as e:
                caught = e
            except tomus.NotFound:
                pass  # not assigned yet
        writer.join()
        if caught is not None:
            assert "not published" in str(caught)
            assert blob.read(0, 1, version=target)  # published by now
            return
    pytest.fail("never observed an unpublished version in 10 writes")


def test_dead_address_is_unavailable_fast() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(tomus.Unavailable) as e:
        tomus.connect(f"127.0.0.1:{port}")
    assert isinstance(e.value, ConnectionError)
    assert time.monotonic() - start < 3


def test_silent_server_is_unavailable_after_the_connect_timeout() -> None:
    with socket.socket() as s:  # accepts TCP connections (backlog) but never speaks
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        start = time.monotonic()
        with pytest.raises(tomus.Unavailable, match="timed out"):
            tomus.connect(f"127.0.0.1:{s.getsockname()[1]}", connect_timeout=1.0)
        assert 0.9 < time.monotonic() - start < 5


def test_bad_address_is_unavailable() -> None:
    with pytest.raises(tomus.Unavailable):
        tomus.connect("not an address")


def test_error_hierarchy() -> None:
    for cls, base in [
        (tomus.NotFound, FileNotFoundError),
        (tomus.OutOfRange, ValueError),
        (tomus.InvalidArgument, ValueError),
        (tomus.Unavailable, ConnectionError),
        (tomus.NoSpace, OSError),
        (tomus.AuthFailed, PermissionError),
        (tomus.AlreadyExists, FileExistsError),
        (tomus.NotEmpty, OSError),
        (tomus.IsADirectory, IsADirectoryError),
        (tomus.NotADirectory, NotADirectoryError),
        (tomus.InternalError, RuntimeError),
        (tomus.WriteExpired, TimeoutError),
    ]:
        assert issubclass(cls, tomus.TomusError) and issubclass(cls, base)
    for cls in [
        tomus.VersionNotPublished,
        tomus.VersionAborted,
        tomus.Corrupt,
        tomus.ProtocolError,
        tomus.Retry,
        tomus.PreconditionFailed,
    ]:
        assert cls.__mro__[1:] == (tomus.TomusError, Exception, BaseException, object)
    from tomus.errors import _from_native

    assert type(_from_native("SomeFutureKind", "m")) is tomus.TomusError
    assert type(_from_native("IsADirectory", "m")) is tomus.IsADirectory


def test_every_error_kind_has_a_class_of_its_own() -> None:
    """The error kinds of the wire protocol (the Rust enum, listed by the extension) and the
    exception classes of ``tomus.errors`` are the same set, and the extension's errors of each
    kind become that kind's own class."""
    import inspect

    from tomus import _native, errors

    rust = _native.error_kinds()
    assert len(set(rust)) == len(rust)
    classes = [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, tomus.TomusError) and cls is not tomus.TomusError
    ]
    python = {cls.kind for cls in classes}
    assert sorted(set(rust) - python) == [], "kinds without an exception class"
    assert sorted(python - set(rust)) == [], "exception classes of no kind"
    made = {}
    for kind in rust:
        exc = errors._from_native(kind, "what went wrong")
        assert type(exc) is not tomus.TomusError, f"{kind} has no class of its own"
        assert type(exc).kind == exc.kind == kind and str(exc) == "what went wrong"
        assert getattr(tomus, type(exc).__name__) is type(exc), "exported by tomus"
        made[kind] = type(exc)
    assert len(set(made.values())) == len(rust), "two kinds share a class"


def test_errors_from_other_kinds_keep_working(blob: tomus.Blob) -> None:
    """After many failures the client still serves (no poisoned state)."""
    for _ in range(50):
        with pytest.raises(tomus.OutOfRange):
            blob.read(0, CHUNK)
    blob.write(0, b"ok")
    assert blob.read() == b"ok"
