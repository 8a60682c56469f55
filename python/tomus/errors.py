"""Exceptions raised by tomus: one class per error kind, all subclasses of TomusError.

Each also derives from the closest built-in exception where one has the same meaning, so
``except FileNotFoundError`` or ``except ValueError`` work as they would for local files. Kinds
that no built-in means (``Corrupt``, ``Retry``, ...) derive from ``TomusError`` alone: a loose
fit would let handlers written for something else catch them.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExists",
    "AuthFailed",
    "ClusterStartError",
    "Corrupt",
    "InternalError",
    "InvalidArgument",
    "IsADirectory",
    "NoSpace",
    "NotADirectory",
    "NotEmpty",
    "NotFound",
    "OutOfRange",
    "PreconditionFailed",
    "ProtocolError",
    "Retry",
    "TomusError",
    "Unavailable",
    "VersionAborted",
    "VersionNotPublished",
    "WriteExpired",
]


class TomusError(Exception):
    """Base class of every tomus error. ``kind`` names the error kind of the wire protocol."""

    kind: str = "Internal"


class NotFound(TomusError, FileNotFoundError):
    """Unknown blob, version, chunk or path."""

    kind = "NotFound"


class VersionNotPublished(TomusError):
    """The version exists but is not published yet."""

    kind = "VersionNotPublished"


class VersionAborted(TomusError):
    """The version was given up (its writer vanished, or the manager restarted)."""

    kind = "VersionAborted"


class OutOfRange(TomusError, ValueError):
    """A read or write outside what the version holds."""

    kind = "OutOfRange"


class InvalidArgument(TomusError, ValueError):
    """A bad argument: chunk size, empty write, malformed request."""

    kind = "InvalidArgument"


class Corrupt(TomusError):
    """Stored data failed its checksum."""

    kind = "Corrupt"


class Unavailable(TomusError, ConnectionError):
    """A server could not be reached or did not answer in time."""

    kind = "Unavailable"


class NoSpace(TomusError, OSError):
    """No space left on the providers, or no provider to place data on."""

    kind = "NoSpace"


class AuthFailed(TomusError, PermissionError):
    """The cluster-secret handshake failed."""

    kind = "AuthFailed"


class ProtocolError(TomusError):
    """The peer spoke something other than the tomus protocol."""

    kind = "Protocol"


class InternalError(TomusError, RuntimeError):
    """A bug, or an unexpected failure of a server's own state (e.g. an I/O error on its disk)."""

    kind = "Internal"


class Retry(TomusError):
    """Given up through no fault of the caller (the writer of a version before this one died
    while it was in flight): doing the same operation again succeeds. The client already
    commits again a few times before raising it."""

    kind = "Retry"


class AlreadyExists(TomusError, FileExistsError):
    """The path already exists."""

    kind = "AlreadyExists"


class NotEmpty(TomusError, OSError):
    """The directory is not empty."""

    kind = "NotEmpty"


class IsADirectory(TomusError, IsADirectoryError):
    """A file operation on a directory."""

    kind = "IsADirectory"


class NotADirectory(TomusError, NotADirectoryError):
    """A directory operation on a file."""

    kind = "NotADirectory"


class PreconditionFailed(TomusError):
    """A condition the request set on the current state did not hold (e.g. the size an append
    at a known offset expected)."""

    kind = "PreconditionFailed"


class WriteExpired(TomusError, TimeoutError):
    """A write took longer from storing its data to committing it than the cluster's garbage
    collection grace, or a provider it may have stored data on was drained and removed before
    it committed: the data may be gone, so nothing was published. Write it again (or raise
    the manager's ``--gc-grace-ms``)."""

    kind = "WriteExpired"


class ClusterStartError(TomusError, RuntimeError):
    """A local cluster did not come up."""

    kind = "Internal"


_BY_KIND: dict[str, type[TomusError]] = {
    cls.kind: cls
    for cls in (
        NotFound,
        VersionNotPublished,
        VersionAborted,
        OutOfRange,
        InvalidArgument,
        Corrupt,
        Unavailable,
        NoSpace,
        AuthFailed,
        ProtocolError,
        InternalError,
        Retry,
        AlreadyExists,
        NotEmpty,
        IsADirectory,
        NotADirectory,
        PreconditionFailed,
        WriteExpired,
    )
}


def _from_native(kind: str, message: str) -> TomusError:
    """The exception for an error of the Rust client (called by tomus._native)."""
    cls = _BY_KIND.get(kind, TomusError)
    exc = cls(message)
    exc.kind = kind
    return exc
