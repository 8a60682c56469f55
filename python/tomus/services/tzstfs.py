"""fsspec file system ``tzst://``: the members of a grouped-compression archive, read-only.

Chained onto the archive's own URL as fsspec does for zip and tar, so anything that opens
files through fsspec reads compressed results in place, byte-exact (each member's checksum is
checked)::

    pandas.read_csv("tzst://results/run-07.csv::tomus://results.tzst")
    fsspec.filesystem("tzst", fo="tomus://results.tzst").ls("results")

Members keep the namespace paths they had when compressed (without the leading ``/``).
Registered under the ``fsspec.specs`` entry point ``tzst``.
"""

from __future__ import annotations

import io
import os
from typing import Any

import fsspec
from fsspec.archive import AbstractArchiveFileSystem

from tomus.services.archive import Archive

__all__ = ["TzstFileSystem"]


class TzstFileSystem(AbstractArchiveFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """``TzstFileSystem(fo, target_protocol=None, target_options=None)``: the archive ``fo``
    (a URL or path opened with fsspec, or an open binary file)."""

    protocol = "tzst"
    root_marker = ""
    cachable = False

    def __init__(
        self,
        fo: Any = "",
        target_protocol: str | None = None,
        target_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(fo, (str, os.PathLike)):
            fo = fsspec.open(fo, mode="rb", protocol=target_protocol, **(target_options or {}))
        self.of = fo
        self.fo = fo.__enter__() if hasattr(fo, "__enter__") else fo
        self.fo.seek(0, os.SEEK_END)
        size = self.fo.tell()
        self.archive = Archive(self._read_at, size)
        self.dir_cache: dict[str, dict[str, Any]] | None = None

    def _read_at(self, offset: int, size: int) -> bytes:
        self.fo.seek(offset)
        return bytes(self.fo.read(size))

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        # Drop "tzst://" and anything after a "::" chain; members have no leading "/".
        return str(super()._strip_protocol(path)).lstrip("/")

    def _get_dirs(self) -> None:
        if self.dir_cache is not None:
            return
        files = {
            p.lstrip("/"): {"name": p.lstrip("/"), "size": m.size, "type": "file"}
            for p, m in self.archive.members.items()
        }
        dirs = {
            d + "/": {"name": d, "size": 0, "type": "directory"}
            for d in self._all_dirnames(list(files))
        }
        self.dir_cache = {**dirs, **files}

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> io.BytesIO:
        if "r" not in mode or "+" in mode:
            raise NotImplementedError("tzst archives are read-only")
        path = self._strip_protocol(path)
        return io.BytesIO(self.archive.read("/" + path))
