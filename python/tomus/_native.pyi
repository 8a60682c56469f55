"""Type stubs for tomus._native, the compiled bindings to the Rust client (python/src/*.rs).

scripts/test.sh checks them against the built module with ``mypy.stubtest`` (names, parameters,
defaults); return types are what the Rust methods return, converted by PyO3.
"""

from collections.abc import Callable, Iterator, Sequence
from os import PathLike
from typing import Any, ClassVar, Literal, final

from typing_extensions import Buffer

from tomus.fs import Entry, Retention, TomusFileSystem

__all__ = [
    "BUILD_PROFILE",
    "Blob",
    "BlobInfo",
    "BlobWriter",
    "Client",
    "Namespace",
    "ProviderInfo",
    "VersionInfo",
    "VersionList",
    "cli_main",
    "connect",
    "crc32c_combine",
    "die_with_parent",
    "drop_registered",
    "error_kinds",
    "fetch_registered",
    "read_registered",
    "register_file",
    "registered_file",
    "restore_blob",
    "restore_client",
    "share_partial",
]

# What a pickled Client holds: restore_client's arguments.
_ClientArgs = tuple[str, bytes | None, int, float, float, bool]

@final
class Client:
    """A connection to a tomus cluster (its manager). Thread-safe; share one per process."""

    @property
    def addr(self) -> str: ...
    def create_blob(
        self, chunk_size: int = 4194304, replication: int = 1, storage: str = "disk"
    ) -> Blob: ...
    def open_blob(self, id: int) -> Blob: ...
    def delete_blob(self, id: int) -> None:
        """Deletes a blob made with create_blob (a file's blob is refused: remove the file)."""
    def list_blobs(self) -> list[BlobInfo]: ...
    def providers(self) -> list[ProviderInfo]: ...
    def fs(self) -> TomusFileSystem:
        """The fsspec file system (tomus://) over this cluster."""
    def namespace(self) -> Namespace:
        """The cluster's directories and files (each file a blob)."""
    def __reduce__(
        self,
    ) -> tuple[Callable[[str, bytes | None, int, float, float, bool], Client], _ClientArgs]: ...

@final
class Blob:
    """A handle on one versioned blob. Every call releases the GIL during I/O."""

    @property
    def id(self) -> int: ...
    @property
    def chunk_size(self) -> int: ...
    @property
    def replication(self) -> int: ...
    def write(self, offset: int, data: Buffer) -> int:
        """Writes `data` at `offset`; returns the new (published) version."""
    def append(self, data: Buffer) -> tuple[int, int]:
        """Appends `data`; returns (version, offset it landed at)."""
    def replace(self, data: Buffer) -> int:
        """Makes `data` the whole content (size len(data)); returns the new version."""
    def writer(self) -> BlobWriter:
        """Stores data chunk by chunk; a commit publishes it as one version."""
    def read(self, offset: int = 0, size: int | None = None, version: int | None = None) -> bytes:
        """`size` bytes at `offset` (None: to the end) of `version` (None: latest published)."""
    def read_into(self, buf: Buffer, offset: int = 0, version: int | None = None) -> int:
        """Fills the writable, C-contiguous `buf` in place; returns the version read."""
    def latest(self) -> int: ...
    def size(self, version: int | None = None) -> int: ...
    def stat(self, version: int | None = None) -> VersionInfo: ...
    def versions(self) -> VersionList: ...
    def locations(
        self, offset: int = 0, size: int | None = None, version: int | None = None
    ) -> list[tuple[int, int, list[str]]]:
        """[(offset, size, [provider address, ...]), ...]; no address: a hole (zeros)."""
    def __reduce__(
        self,
    ) -> tuple[Callable[[Client, int, int, int], Blob], tuple[Client, int, int, int]]: ...

@final
class BlobWriter:
    """One version written in parts; nothing is visible before a commit."""

    def write(self, data: Buffer) -> None: ...
    def __len__(self) -> int: ...
    def commit_replace(self, expect_size: int | None = None) -> int:
        """Publishes the data as the whole new content; returns the version. With
        `expect_size`, only if the blob's size is that (else PreconditionFailed)."""
    def commit_append(self) -> tuple[int, int] | None:
        """Publishes one append: (version, offset), or None if nothing was written."""
    def commit_write(self, offset: int) -> int | None:
        """Publishes one write at `offset`: the version, or None if nothing was written."""

@final
class Namespace:
    """Directories and files; entries are dicts in fsspec's info shape (tomus.fs.Entry)."""

    def stat(self, path: str) -> Entry: ...
    def list(self, path: str, recursive: bool = False) -> list[Entry]: ...
    def mkdir(self, path: str, parents: bool = False) -> Entry: ...
    def create(
        self,
        path: str,
        chunk_size: int = 4194304,
        replication: int = 1,
        exclusive: bool = False,
        storage: str = "disk",
    ) -> tuple[Entry, Blob]: ...
    def abandon(self, path: str, blob: int) -> None:
        """Gives up a new file (created, nothing published): it never appears."""
    def open(self, path: str) -> tuple[Entry, Blob]: ...
    def open_version(
        self, path: str, version: int | None = None
    ) -> tuple[Entry, Blob, VersionInfo]: ...
    def rename(self, src: str, dst: str) -> None: ...
    def delete(self, path: str, recursive: bool = False) -> None: ...
    def retention(self, path: str) -> Retention:
        """The policy of a file, or the one a directory gives new files below it."""
    def set_retention(
        self,
        path: str,
        *,
        keep_last: int | None = None,
        keep_newer_than: float | None = None,
        keep_all: bool = False,
        inherit: bool = False,
    ) -> Retention:
        """Sets one of the policies (exactly one keyword); returns the policy in effect."""

@final
class VersionInfo:
    """One version: the range it wrote (offset, length) and the blob size after it (size)."""

    @property
    def blob(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def state(self) -> Literal["published", "pending", "aborted"]: ...
    @property
    def append(self) -> bool: ...
    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def size(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

@final
class VersionList:
    """Published versions (a sequence of VersionInfo) and aborted version ranges [start, end)."""

    @property
    def versions(self) -> list[VersionInfo]: ...
    @property
    def aborted(self) -> list[tuple[int, int]]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> VersionInfo: ...
    def __iter__(self) -> Iterator[VersionInfo]: ...

@final
class BlobInfo:
    @property
    def id(self) -> int: ...
    @property
    def chunk_size(self) -> int: ...
    @property
    def replication(self) -> int: ...
    @property
    def latest(self) -> int: ...
    @property
    def size(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

@final
class ProviderInfo:
    @property
    def id(self) -> int: ...
    @property
    def addr(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def capacity(self) -> int: ...
    @property
    def free(self) -> int: ...
    @property
    def chunks(self) -> int: ...
    @property
    def load(self) -> int: ...
    @property
    def alive(self) -> bool: ...
    @property
    def draining(self) -> bool: ...
    @property
    def fault(self) -> str | None: ...
    @property
    def state(self) -> Literal["up", "draining", "down", "failed"]: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

def connect(
    addr: str,
    *,
    secret: bytes | None = None,
    parallelism: int = 16,
    timeout: float = 30.0,
    connect_timeout: float = 3.0,
    local: bool = False,
) -> Client: ...
def restore_client(
    addr: str,
    secret: bytes | None,
    parallelism: int,
    timeout: float,
    connect_timeout: float,
    local: bool,
) -> Client: ...
def restore_blob(client: Client, id: int, chunk_size: int, replication: int) -> Blob: ...
def cli_main(argv: Sequence[str]) -> int:
    """Runs the tomus command line (program name first); returns the exit code."""

def die_with_parent(parent: int) -> bool: ...
def error_kinds() -> list[str]:
    """The name of every error kind of the wire protocol (the ``kind`` of tomus.errors' classes)."""

BUILD_PROFILE: Literal["debug", "release"]
"""The cargo profile the extension was built with: "debug" or "release"."""

def register_file(
    client: Client,
    local: str | PathLike[str],
    path: str,
    *,
    provider: str | None = None,
    hints: Sequence[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Registers a local file as `path` without copying it; returns its record."""

def registered_file(client: Client, path: str, *, wait_checksum: bool = False) -> dict[str, Any]:
    """The record of a registered file: path, size, checksum, holders, hints, created_ms."""

def fetch_registered(
    client: Client,
    path: str,
    dest: str | PathLike[str],
    *,
    mode: str = "direct",
    holders: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Fetches a registered file into `dest`, verified; {bytes, served, failures}."""

def read_registered(
    client: Client, addr: str, name: str, offset: int, length: int
) -> tuple[bytes, int]:
    """Bytes [offset, offset + length) of copy `name` on provider `addr`, and their CRC32C."""

def share_partial(client: Client, local: str | PathLike[str], provider: str) -> str:
    """Shares a file still being written through `provider`; returns the copy's name."""

def drop_registered(client: Client, addr: str, names: Sequence[str]) -> int:
    """Removes registered copies from provider `addr`; returns their bytes."""

def crc32c_combine(a: int, b: int, b_len: int) -> int:
    """The CRC32C of a + b from those of a and b and the length of b."""
