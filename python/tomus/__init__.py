"""tomus: a versioned, distributed BLOB store, from Python.

>>> import tomus
>>> with tomus.local_cluster(providers=4) as cluster:
...     c = tomus.connect(cluster.addr)
...     b = c.create_blob(chunk_size=4 << 20)
...     v = b.write(0, b"hello")
...     b.read() == b"hello"
True

The client calls the Rust client in-process and releases the GIL during I/O; ``write`` and
``append`` take any bytes-like object and ``read_into`` fills numpy arrays in place.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version

from tomus import _native
from tomus._native import (
    Blob,
    BlobInfo,
    BlobWriter,
    Client,
    Namespace,
    ProviderInfo,
    VersionInfo,
    VersionList,
)
from tomus.cluster import LocalCluster, local_cluster
from tomus.errors import (
    AlreadyExists,
    AuthFailed,
    ClusterStartError,
    Corrupt,
    InternalError,
    InvalidArgument,
    IsADirectory,
    NoSpace,
    NotADirectory,
    NotEmpty,
    NotFound,
    OutOfRange,
    PreconditionFailed,
    ProtocolError,
    Retry,
    TomusError,
    Unavailable,
    VersionAborted,
    VersionNotPublished,
    WriteExpired,
)

try:
    __version__ = version("tomus")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "AlreadyExists",
    "AuthFailed",
    "Blob",
    "BlobInfo",
    "BlobWriter",
    "Client",
    "ClusterStartError",
    "Corrupt",
    "InternalError",
    "InvalidArgument",
    "IsADirectory",
    "LocalCluster",
    "Namespace",
    "NoSpace",
    "NotADirectory",
    "NotEmpty",
    "NotFound",
    "OutOfRange",
    "PreconditionFailed",
    "ProtocolError",
    "ProviderInfo",
    "Retry",
    "TomusError",
    "Unavailable",
    "VersionAborted",
    "VersionInfo",
    "VersionList",
    "VersionNotPublished",
    "WriteExpired",
    "connect",
    "local_cluster",
]


def connect(
    addr: str | None = None,
    *,
    secret: str | bytes | None = None,
    parallelism: int = 16,
    timeout: float = 30.0,
    connect_timeout: float = 3.0,
    local: bool = False,
) -> Client:
    """Connects to the manager at ``addr`` (``host:port``; default: ``$TOMUS_ADDR``).

    ``secret``: the cluster secret (default: ``$TOMUS_CLUSTER_SECRET``, none if unset).
    ``parallelism``: chunk transfers in flight per call. ``timeout``: seconds per request.
    ``local``: place the first replica of written chunks on this machine's provider if any.
    Raises ``Unavailable`` if the manager does not answer.
    """
    if addr is None:
        addr = os.environ.get("TOMUS_ADDR") or None
        if addr is None:
            raise InvalidArgument(
                "no cluster address: pass tomus.connect('host:port') or set TOMUS_ADDR "
                "(tomus.local_cluster() starts one on this machine)"
            )
    if isinstance(secret, str):
        secret = secret.encode()
    return _native.connect(
        addr,
        secret=secret,
        parallelism=parallelism,
        timeout=timeout,
        connect_timeout=connect_timeout,
        local=local,
    )
