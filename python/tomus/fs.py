"""fsspec file system ``tomus://``: the cluster's namespace of directories and files.

Files are blobs: closing a file opened for writing publishes one version of its blob (the
file's whole new content), a file opened with ``"ab"`` publishes one append (many processes may
append to one file at once; each close lands contiguously), and any earlier content stays
readable with ``version=N`` (``fs.open(path, version=N)`` or ``tomus://path?version=N``).

Reads are buffered with read-ahead of one chunk and writes with write-behind of one chunk
(BSFS's prefetching and delayed commit): the file object's block size defaults to the blob's
chunk size. ``cat_ranges`` fetches many ranges in parallel (the GIL is released during I/O),
and ``locations(path)`` tells schedulers which providers hold which bytes.

A new file appears only when its first version is published (create-on-commit): a write that
fails, is discarded or leaves its ``with`` block with an exception leaves nothing visible.

Registered files (workflow outputs kept in place on their holders) read like the others:
``cat``, ``open``, ``head``, ``cat_ranges`` and ``get`` fetch one whole from its holders,
checksum verified, and serve ranges from that copy.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, Literal, TypedDict, cast
from urllib.parse import parse_qs

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from tomus import _native
from tomus._native import Blob, BlobWriter, Client, VersionInfo
from tomus.errors import InvalidArgument, NotFound, PreconditionFailed

# A URL scheme (RFC 3986) followed by `:/`: a path of another file system, not a tomus path.
_OTHER_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/")

__all__ = ["Entry", "Retention", "TomusFile", "TomusFileSystem"]


class _EntryFields(TypedDict):  # what every entry has; Entry adds what only files have
    name: str
    type: Literal["file", "directory"]
    size: int
    created: float
    mtime: float


class Entry(_EntryFields, total=False):
    """A file or directory in fsspec's ``info`` shape, as ``info``, ``ls`` and the native
    ``Namespace`` give it: ``name`` (no leading ``/``), ``type``, ``size``, ``created`` and
    ``mtime`` (Unix seconds), and for files tomus's own ``version``, ``blob``, ``chunk_size``
    and ``replication``."""

    version: int
    blob: int
    chunk_size: int
    replication: int
    registered: bool


# A retention policy (``Namespace.retention``, ``TomusFileSystem.retention``): one of
# ``keep_all``, ``keep_last`` (versions) and ``keep_newer_than`` (seconds) is set; ``from`` is
# where it comes from (the file, the directory that set it, or None for the default). The
# functional form because ``from`` is a keyword.
Retention = TypedDict(
    "Retention",
    {
        "path": str,
        "type": Literal["file", "directory"],
        "keep_all": bool,
        "keep_last": "int | None",
        "keep_newer_than": "float | None",
        "from": "str | None",
    },
)

DEFAULT_CHUNK_SIZE = 4 << 20
#: Ranges fetched at once by ``cat_ranges``.
RANGE_THREADS = 16


def _split_version(path: str) -> tuple[str, int | None]:
    """``a/b?version=3`` -> (``a/b``, 3)."""
    path, sep, query = path.partition("?")
    if not sep:
        return path, None
    values = parse_qs(query).get("version")
    if not values:
        raise InvalidArgument(f"unknown query {query!r} in {path!r}: only ?version=N is known")
    try:
        return path, int(values[-1])
    except ValueError:
        raise InvalidArgument(f"version must be an integer, not {values[-1]!r}") from None


class TomusFileSystem(AbstractFileSystem):
    """The namespace of a tomus cluster as an fsspec file system.

    ``TomusFileSystem(addr=None, client=None, chunk_size=4 MiB, replication=1,
    storage="disk")``: the cluster at ``addr`` (default ``$TOMUS_ADDR``), or an existing
    ``tomus.Client``. New files get ``chunk_size``, ``replication`` and the storage class
    ``storage``: ``"disk"``, or ``"memory"`` (chunks kept in the RAM of ``replication``
    providers; ``open(..., storage="memory")`` chooses it per file). An existing file keeps
    its class.
    """

    protocol = ("tomus",)
    root_marker = ""
    # One client per (addr, options): fsspec caches instances by their arguments.
    cachable = True

    def __init__(
        self,
        addr: str | None = None,
        client: Client | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        replication: int = 1,
        storage: str = "disk",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if client is None:
            from tomus import connect

            client = connect(addr)
        self.client = client
        self.ns = client.namespace()
        self.chunk_size = chunk_size
        self.replication = replication
        self.storage = storage

    @classmethod
    def _strip_protocol(cls, path: str | os.PathLike[str]) -> str:
        text = os.fspath(path)
        if text[: len("tomus://")].lower() == "tomus://":
            text = text[len("tomus://") :]
        elif other := _OTHER_SCHEME.match(text):
            # As `tomus fs` does: `s3://b/k` would otherwise become a directory named `s3:`.
            raise InvalidArgument(
                f"path {text!r} is a {other.group(1)}: URL; tomus paths are dir/file or "
                "tomus://dir/file"
            )
        base, sep, query = text.partition("?")
        return base.strip("/") + sep + query

    @staticmethod
    def _get_kwargs_from_urls(urlpath: str) -> dict[str, object]:
        return {}

    def unstrip_protocol(self, name: str) -> str:
        return "tomus://" + name.lstrip("/")

    # ---- metadata

    def info(self, path: str, version: int | None = None, **kwargs: Any) -> Entry:
        path, query_version = _split_version(self._strip_protocol(path))
        version = version if version is not None else query_version
        entry = self._sized(self.ns.stat(path))
        if version is not None and entry["type"] == "file" and not entry.get("registered"):
            stat = self.ns.open(path)[1].stat(version)
            entry["size"] = stat.size
            entry["version"] = stat.version
        return entry

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Entry] | list[str]:
        path = self._strip_protocol(path)
        entry = self.ns.stat(path)
        entries = [entry] if entry["type"] == "file" else self.ns.list(path, False)
        entries = [self._sized(e) for e in entries]
        return entries if detail else [e["name"] for e in entries]

    def _sized(self, entry: Entry) -> Entry:
        """A registered file's entry with its size, from its record."""
        if entry.get("registered"):
            entry["size"] = int(_native.registered_file(self.client, "/" + entry["name"])["size"])
        return entry

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> list[str] | dict[str, Entry]:
        # One recursive listing from the manager instead of a walk of ls calls.
        if maxdepth is not None:
            walked = super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail)
            return cast("list[str] | dict[str, Entry]", walked)  # fsspec is untyped
        path = self._strip_protocol(path)
        try:
            top = self.ns.stat(path)
        except NotFound:
            return {} if detail else []
        if top["type"] == "file":
            found = [top]
        else:
            found = self.ns.list(path, True)
            if withdirs and path:
                found.insert(0, top)
        found = [e for e in found if withdirs or e["type"] == "file"]
        if detail:
            return {e["name"]: e for e in found}
        return [e["name"] for e in found]

    def exists(self, path: str, **kwargs: Any) -> bool:
        try:
            self.ns.stat(_split_version(self._strip_protocol(path))[0])
            return True
        except NotFound:
            return False

    def created(self, path: str) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.info(path)["created"], datetime.timezone.utc)

    def modified(self, path: str) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], datetime.timezone.utc)

    def locations(
        self, path: str, offset: int = 0, size: int | None = None, version: int | None = None
    ) -> list[tuple[int, int, list[str]]]:
        """Which providers hold each range of the file: ``[(offset, size, [addr, ...])]``."""
        path, query_version = _split_version(self._strip_protocol(path))
        blob = self._blob(path)
        return blob.locations(offset, size, version if version is not None else query_version)

    def versions(self, path: str) -> list[int]:
        """The published versions of a file, oldest first."""
        blob = self._blob(self._strip_protocol(path))
        return [v.version for v in blob.versions().versions]

    # ---- namespace changes

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.ns.mkdir(self._strip_protocol(path), create_parents)
        self.invalidate_cache()

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        if not exist_ok and self.exists(path):
            raise FileExistsError(path)
        self.ns.mkdir(path, True)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self.ns.stat(path)["type"] != "directory":
            raise NotADirectoryError(path)
        self.ns.delete(path, False)

    def _rm(self, path: str) -> None:
        self.ns.delete(self._strip_protocol(path), False)

    def rm(
        self, path: str | Iterable[str], recursive: bool = False, maxdepth: int | None = None
    ) -> None:
        paths = [path] if isinstance(path, str) else list(path)
        for p in paths:
            if maxdepth is None and not any(c in p for c in "*?["):
                # The manager removes a whole tree in one transaction.
                self.ns.delete(self._strip_protocol(p), recursive)
            else:
                super().rm(p, recursive=recursive, maxdepth=maxdepth)

    def retention(self, path: str) -> Retention:
        """The versions a file keeps, or those a directory gives the files created below it
        (new files keep the last 3 unless a directory above says otherwise)."""
        return self.ns.retention(self._strip_protocol(path))

    def set_retention(
        self,
        path: str,
        *,
        keep_last: int | None = None,
        keep_newer_than: float | None = None,
        keep_all: bool = False,
        inherit: bool = False,
    ) -> Retention:
        """Sets what a file keeps (at once), or what a directory gives the files created
        below it from now on (files already there keep theirs); exactly one keyword."""
        return self.ns.set_retention(
            self._strip_protocol(path),
            keep_last=keep_last,
            keep_newer_than=keep_newer_than,
            keep_all=keep_all,
            inherit=inherit,
        )

    def mv(self, path1: str, path2: str, recursive: bool = False, **kwargs: Any) -> None:
        """Renames in the namespace: no data moves, versions stay with the file."""
        if isinstance(path1, str) and not any(c in path1 for c in "*?["):
            self.ns.rename(self._strip_protocol(path1), self._strip_protocol(path2))
            self.invalidate_cache()
        else:
            super().mv(path1, path2, recursive=recursive, **kwargs)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Copies one version of ``path1`` (the latest, or ``?version=N``): a writer to the
        source meanwhile changes neither what is copied nor its size."""
        bare, version = _split_version(self._strip_protocol(path1))
        _, src, stat = self.ns.open_version(bare, version)
        with self.open(path2, "wb", chunk_size=src.chunk_size) as out:
            window = max(src.chunk_size, 16 << 20)
            for start in range(0, stat.size, window):
                out.write(src.read(start, min(window, stat.size - start), stat.version))

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        entry, blob = self.ns.create(path, self.chunk_size, self.replication, False, self.storage)
        if truncate:
            self._publish(path, entry, blob, lambda: blob.replace(b""))
        elif entry.get("version") == 0:
            # A new file appears only with a version: an empty one, unless a concurrent
            # writer gave it content meanwhile.
            self._publish(path, entry, blob, lambda: _replace_if_empty(blob.writer()))

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        exclusive = mode == "create"
        entry, blob = self.ns.create(
            path, self.chunk_size, self.replication, exclusive, self.storage
        )
        self._publish(path, entry, blob, lambda: blob.replace(value))

    def _publish(self, path: str, entry: Entry, blob: Blob, publish: Callable[[], object]) -> None:
        """Runs ``publish``; should it fail, a new file (nothing published yet) is given up so
        it never appears."""
        try:
            publish()
        except BaseException:
            if entry.get("version") == 0:
                self.ns.abandon(path, blob.id)
            raise

    # ---- data

    def _blob(self, path: str) -> Blob:
        return self.ns.open(path)[1]

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path, version = _split_version(self._strip_protocol(path))
        version = kwargs.get("version", version)
        # One manager round trip for the path and the version's record; the read itself
        # goes to the metadata DHT and the providers only.
        try:
            _, blob, stat = self.ns.open_version(path, version)
        except InvalidArgument:
            if not self._registered(path, version):
                raise
            return self._cat_registered(path, start, end)
        lo, hi = _clamp(start, end, stat.size)
        return blob.read(lo, hi - lo, stat.version)

    def _registered(self, path: str, version: int | None) -> bool:
        """Whether ``path``, which did not open as a blob, is a registered file to read whole
        from its holders (it has no versions to ask for)."""
        return version is None and bool(self.ns.stat(path).get("registered"))

    def _open_registered(self, path: str) -> BinaryIO:
        """A registered file opened for reading: fetched whole from its holders (checksum
        verified, as ``cat`` does) into an unnamed temporary file, which reads (seeks, ranges)
        then come from and which goes when it is closed. Its checksum covers the whole file
        only, so a range read straight from a holder could not be checked."""
        fd, tmp = tempfile.mkstemp(prefix="tomus-registered-")
        try:
            os.close(fd)
            _native.fetch_registered(self.client, "/" + path, tmp)
            return open(tmp, "rb")
        finally:
            os.unlink(tmp)

    def _cat_registered(self, path: str, start: int | None, end: int | None) -> bytes:
        """A registered file, fetched from its holders (checksum verified) through a
        temporary file."""
        with tempfile.TemporaryDirectory() as tmp:
            dest = os.path.join(tmp, "f")
            _native.fetch_registered(self.client, "/" + path, dest)
            with open(dest, "rb") as f:
                data = f.read()
        lo, hi = _clamp(start, end, len(data))
        return data[lo:hi]

    def cat_ranges(
        self,
        paths: Sequence[str],
        starts: Sequence[int | None] | int | None,
        ends: Sequence[int | None] | int | None,
        max_gap: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[bytes | Exception]:
        """Fetches every range in parallel (each file's version pinned once)."""
        n = len(paths)
        starts_l = list(starts) if isinstance(starts, Iterable) else [starts] * n
        ends_l = list(ends) if isinstance(ends, Iterable) else [ends] * n
        if len(starts_l) != n or len(ends_l) != n:
            raise ValueError("paths, starts and ends must have the same length")
        # Each file's blob and version record (a registered file's whole bytes), or why it
        # could not be opened.
        pinned: dict[str, tuple[Blob, VersionInfo] | bytes | Exception] = {}
        for p in set(paths):
            try:
                bare, version = _split_version(self._strip_protocol(p))
                try:
                    _, blob, stat = self.ns.open_version(bare, version)
                    pinned[p] = (blob, stat)
                except InvalidArgument:
                    if not self._registered(bare, version):
                        raise
                    pinned[p] = self._cat_registered(bare, None, None)
            except Exception as e:
                if on_error != "return":
                    raise
                pinned[p] = e

        def one(i: int) -> bytes | Exception:
            opened = pinned[paths[i]]
            if isinstance(opened, Exception):
                return opened
            if isinstance(opened, bytes):
                lo, hi = _clamp(starts_l[i], ends_l[i], len(opened))
                return opened[lo:hi]
            blob, stat = opened
            try:
                lo, hi = _clamp(starts_l[i], ends_l[i], stat.size)
                return blob.read(lo, hi - lo, stat.version)
            except Exception as e:
                if on_error == "return":
                    return e
                raise

        with ThreadPoolExecutor(max_workers=min(RANGE_THREADS, max(n, 1))) as pool:
            return list(pool.map(one, range(n)))

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        version: int | None = None,
        chunk_size: int | None = None,
        replication: int | None = None,
        storage: str | None = None,
        **kwargs: Any,
    ) -> TomusFile | BinaryIO:
        path, query_version = _split_version(self._strip_protocol(path))
        version = version if version is not None else query_version
        new = False
        if "r" in mode:
            # The version's record comes with the path: the file's reads, pinned to it,
            # never ask the manager.
            try:
                _, blob, stat = self.ns.open_version(path, version)
            except InvalidArgument:
                if not self._registered(path, version):
                    raise
                return self._open_registered(path)
            version = stat.version
        else:
            if version is not None:
                raise InvalidArgument("version= applies to reading; writes make new versions")
            entry, blob = self.ns.create(
                path,
                chunk_size or self.chunk_size,
                replication or self.replication,
                mode == "xb",
                storage or self.storage,
            )
            new = entry.get("version") == 0
        return TomusFile(
            self,
            path,
            blob,
            new=new,
            mode=mode,
            block_size=block_size,
            autocommit=autocommit,
            cache_options=cache_options,
            version=version,
            **kwargs,
        )


def _replace_if_empty(writer: BlobWriter) -> None:
    """Publishes an empty version of a new file unless it has content by now."""
    with contextlib.suppress(PreconditionFailed):
        writer.commit_replace(expect_size=0)


def _clamp(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """Python-slice semantics for ``[start, end)`` over ``size`` bytes."""
    lo = 0 if start is None else (start + size if start < 0 else start)
    hi = size if end is None else (end + size if end < 0 else end)
    lo = min(max(lo, 0), size)
    hi = min(max(hi, lo), size)
    return lo, hi


class TomusFile(AbstractBufferedFile):
    """A file of the namespace: reads one pinned version with read-ahead; writes go to the
    blob chunk by chunk and publish one version when the file is closed. A ``with`` block
    left by an exception publishes nothing (the old content stays; a new file never
    appears), nor does ``discard()``."""

    mode: str  # set by fsspec's AbstractBufferedFile

    def __init__(
        self,
        fs: TomusFileSystem,
        path: str,
        blob: Blob,
        mode: str = "rb",
        block_size: int | None = None,
        version: int | None = None,
        new: bool = False,
        **kwargs: Any,
    ) -> None:
        self.blob = blob
        # Created by this open, with nothing published yet: it appears with its first version.
        self.new = new
        self.writer: BlobWriter | None = None
        self.version: int | None = None
        size = None
        if mode == "rb":
            # One snapshot for the whole life of the file object.
            stat = blob.stat(version)
            self.version = stat.version
            size = stat.size
        elif mode not in ("wb", "ab", "xb"):
            raise ValueError(f"mode {mode!r} is not supported (rb, wb, ab, xb)")
        super().__init__(
            fs,
            path,
            mode=mode,
            block_size=block_size or blob.chunk_size,
            size=size,
            **kwargs,
        )

    def _fetch_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if start >= end:
            return b""
        return self.blob.read(start, end - start, self.version)

    def _initiate_upload(self) -> None:
        self.writer = self.blob.writer()

    def _upload_chunk(self, final: bool = False) -> bool:
        if self.writer is None:
            self._initiate_upload()
        assert self.writer is not None
        data = self.buffer.getbuffer()
        if len(data):
            self.writer.write(data)
        del data
        if final and self.autocommit:
            self.commit()
        return True

    def commit(self) -> None:
        """Publishes what was written as one version (on close)."""
        if self.writer is None:
            self._initiate_upload()
        assert self.writer is not None
        writer, self.writer = self.writer, None
        try:
            if self.mode == "ab" and self.new and len(writer) == 0:
                _replace_if_empty(writer)
                self.version = self.blob.latest()
            elif self.mode == "ab":
                landed = writer.commit_append()
                self.version = landed[0] if landed is not None else None
            else:
                self.version = writer.commit_replace()
        except BaseException:
            self._abandon()
            raise
        self.new = False

    def discard(self) -> None:
        """Drops what was written: nothing is published (and closing publishes nothing)."""
        self.writer = None
        self._abandon()
        self.closed = True

    def _abandon(self) -> None:
        if self.new:
            self.new = False
            self.fs.ns.abandon(self.path, self.blob.id)

    def __exit__(self, exc_type: type[BaseException] | None, *args: object) -> None:
        if exc_type is not None and self.writable():
            # Leaving the block with an exception publishes nothing.
            self.discard()
            return
        self.close()

    def seekable(self) -> bool:
        return self.mode == "rb"

    def __repr__(self) -> str:
        return f"<TomusFile tomus://{self.path} mode={self.mode} version={self.version}>"
