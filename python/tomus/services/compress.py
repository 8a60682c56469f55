"""Grouped compression: many result files compressed together on a storage node.

``submit_compress`` resolves the input (glob patterns of the namespace) when it is submitted, so
a retried or resumed service compresses exactly the same files; the service (``run``, on a
storage worker) reads each file's latest version, writes one ``.tzst`` archive (``archive``),
and records the ratio against compressing each file alone. With ``remove=True`` it then checks
the archive reads back byte-exact and removes the originals.

Reading back: ``Archive.open(client, "/results.tzst").read("/results/a.dat")``, ``extract``
(to a local directory or back into the namespace), or ``read(client, path)``, which reads a
file where it is or, once its original was removed, from the archive that holds it. Archives
with removed originals are listed in the catalogue ``/.tomus/archives/`` (one small JSON per
archive: its path, version and members), which ``read`` consults.

Crash safety: the archive appears by one commit; the log's ``archived`` event (written after
the commit) lets a retried attempt skip straight to the removals, which ignore files already
gone.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomus
from tomus.services.archive import DEFAULT_FRAME_SIZE, DEFAULT_LEVEL, Archive, ArchiveWriter
from tomus.services.records import ServiceLog

if TYPE_CHECKING:
    from distributed import Client as DaskClient

    from tomus.services.runner import Service, ServiceContext

__all__ = ["CATALOGUE_DIR", "extract", "read", "resolve", "run", "submit_compress"]

CATALOGUE_DIR = "/.tomus/archives"
_ARCHIVE_CHUNK = 4 << 20


def _abs(path: str) -> str:
    return "/" + path.strip("/")


def resolve(client: tomus.Client, patterns: list[str], exclude: str | None = None) -> list[str]:
    """The files matching ``patterns`` (fsspec globs, or plain paths), sorted, deduplicated."""
    fs = client.fs()
    found: set[str] = set()
    for pat in patterns:
        if any(c in pat for c in "*?["):
            # One listing per directory, with the entries' types: no stat per match.
            matches = fs.glob(pat.strip("/"), detail=True)
            found.update(_abs(n) for n, e in matches.items() if e["type"] == "file")
        elif fs.info(pat.strip("/"))["type"] == "file":
            found.add(_abs(pat))
    if exclude is not None:
        found.discard(_abs(exclude))
    return sorted(found)


def submit_compress(
    client: tomus.Client,
    dask: DaskClient,
    paths: list[str],
    into: str,
    *,
    mode: str = "solid",
    level: int = DEFAULT_LEVEL,
    frame_size: int = DEFAULT_FRAME_SIZE,
    baseline: bool = True,
    remove: bool = False,
    replication: int = 1,
    retries: int = 0,
) -> Service:
    """Compresses the files matching ``paths`` together into ``into`` (see the module doc)."""
    from tomus.services.runner import ServiceError, submit

    members = resolve(client, paths, exclude=into)
    if not members:
        raise ServiceError(f"no file matches {paths}")
    if mode not in ("solid", "dict"):
        raise ServiceError(f"unknown compression mode {mode!r} (solid or dict)")
    params = {
        "paths": members,
        "into": _abs(into),
        "mode": mode,
        "level": level,
        "frame_size": frame_size,
        "baseline": baseline,
        "remove": remove,
        "replication": replication,
    }
    return submit(
        client,
        dask,
        "compress",
        params,
        paths=members,
        name=f"compress {len(members)} files into {_abs(into)}",
        retries=retries,
    )


def _write_archive(ctx: ServiceContext) -> tuple[int, dict[str, Any]]:
    p = ctx.params
    ns = ctx.client.namespace()
    members: list[str] = p["paths"]
    entry, blob = ns.create(p["into"], _ARCHIVE_CHUNK, int(p.get("replication", 1)), False)
    writer = blob.writer()
    aw = ArchiveWriter(
        writer.write,
        mode=p.get("mode", "solid"),
        level=int(p.get("level", DEFAULT_LEVEL)),
        frame_size=int(p.get("frame_size", DEFAULT_FRAME_SIZE)),
        baseline=bool(p.get("baseline", True)),
    )
    try:
        for i, path in enumerate(members):
            _, b, stat = ns.open_version(path)
            aw.add(path, b.read(0, stat.size, stat.version), stat.version)
            ctx.progress(i + 1, len(members), f"read {path}")
        stats = aw.finish()
        version = writer.commit_replace()
    except BaseException:
        if entry.get("version") == 0:  # a new file that never got content: leave nothing
            with contextlib.suppress(tomus.TomusError):
                ns.abandon(p["into"], blob.id)
        raise
    return version, stats


def run(ctx: ServiceContext) -> dict[str, Any]:
    """The compress service, on a storage worker."""
    p = ctx.params
    done = [e for e in ctx.log.events() if e.get("event") == "archived"]
    if done:  # an earlier attempt committed the archive and died after
        version, stats = int(done[-1]["version"]), dict(done[-1]["stats"])
    else:
        version, stats = _write_archive(ctx)
        ctx.log.append(ServiceLog.event("archived", version=version, stats=stats))
    removed = 0
    if p.get("remove"):
        arch = Archive.open(ctx.client, p["into"], version)
        for path in p["paths"]:
            arch.read(path)  # raises unless byte-exact
        _catalogue(ctx.client, p["into"], version, p["paths"])
        ns = ctx.client.namespace()
        for i, path in enumerate(p["paths"]):
            with contextlib.suppress(tomus.NotFound):
                ns.delete(path)
                removed += 1
            ctx.progress(i + 1, len(p["paths"]), f"removed {path}")
    return {"archive": p["into"], "version": version, "removed": removed, **stats}


def _catalogue(client: tomus.Client, archive: str, version: int, members: list[str]) -> None:
    name = archive.strip("/").replace("/", "%2F") + ".json"
    rec = {"archive": archive, "version": version, "members": members}
    fs = client.fs()
    fs.makedirs(CATALOGUE_DIR.strip("/"), exist_ok=True)
    fs.pipe_file(f"{CATALOGUE_DIR.strip('/')}/{name}", json.dumps(rec).encode())


def read(client: tomus.Client, path: str) -> bytes:
    """The file at ``path``: from the namespace, or from the archive its bytes moved into."""
    try:
        return bytes(client.fs().cat_file(path.strip("/")))
    except FileNotFoundError:
        pass
    fs = client.fs()
    want = _abs(path)
    try:
        entries = [e["name"] for e in client.namespace().list(CATALOGUE_DIR)]
    except (tomus.NotFound, tomus.NotADirectory):
        entries = []
    for e in sorted(entries, reverse=True):  # any archive holding it: the newest name first
        rec = json.loads(fs.cat_file(e))
        if want in rec.get("members", []):
            return Archive.open(client, rec["archive"], rec.get("version")).read(want)
    raise tomus.NotFound(f"{want}: no such file, and no archive holds it")


def extract(
    client: tomus.Client,
    archive: str,
    members: list[str] | None = None,
    *,
    to: str | os.PathLike[str] | None = None,
    restore: bool = False,
    version: int | None = None,
) -> list[str]:
    """Extracts members (default: all) to the local directory ``to`` (as ``to/<path>``) and/or,
    with ``restore``, back to their original paths in the namespace; returns their paths."""
    arch = Archive.open(client, archive, version)
    out = []
    fs = client.fs() if restore else None
    for path, data in arch.items([_abs(m) for m in members] if members else None):
        if to is not None:
            dest = Path(to) / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        if fs is not None:
            parent = os.path.dirname(path.strip("/"))
            if parent:
                fs.makedirs(parent, exist_ok=True)
            fs.pipe_file(path.strip("/"), data)
        out.append(path)
    return out
