"""An embedded tomus cluster (a manager and N providers on loopback) run by ``tomus up``."""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, TypedDict

from tomus import _native
from tomus.errors import ClusterStartError

if TYPE_CHECKING:  # typing has Unpack only from 3.11; annotations are not evaluated at run time
    from typing_extensions import Unpack

__all__ = ["ConnectOptions", "LocalCluster", "local_cluster"]

_READY_LINE = b"tomus cluster listening on "


class ConnectOptions(TypedDict, total=False):
    """The options of ``tomus.connect`` (all keyword arguments)."""

    secret: str | bytes | None
    parallelism: int
    timeout: float
    connect_timeout: float
    local: bool


class LocalCluster:
    """A running ``tomus up`` process group. Use as a context manager or call ``stop()``."""

    addr: str
    data_dir: Path

    def __init__(
        self,
        providers: int = 4,
        data_dir: str | os.PathLike[str] | None = None,
        memory_tier: int | str = 0,
        fsync: bool = True,
        timeout: float = 60.0,
    ) -> None:
        self._own_dir = data_dir is None
        self.data_dir = (
            Path(tempfile.mkdtemp(prefix="tomus-")) if data_dir is None else Path(data_dir)
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / "up.log"
        cmd = [
            sys.executable, "-m", "tomus", "up",
            "--providers", str(providers),
            "--data", str(self.data_dir),
            "--addr", "127.0.0.1:0",
            "--memory-tier", str(memory_tier),
        ]  # fmt: skip
        if not fsync:
            cmd.append("--no-fsync")
        env = dict(os.environ)
        if threading.current_thread() is threading.main_thread():
            # The cluster dies with this process even if it is killed (see tomus.__main__).
            env["TOMUS_DIE_WITH_PARENT"] = str(os.getpid())
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        self._finalizer = weakref.finalize(
            self, _shutdown, self._proc, self.data_dir if self._own_dir else None
        )
        try:
            self.addr = self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> str:
        """Reads the address line ``tomus up`` prints once the cluster serves."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        seen = b""
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._failure(f"no address after {timeout:.0f}s")
                if sel.select(timeout=min(left, 0.5)):
                    chunk = os.read(fd, 4096)
                    if not chunk:
                        code = self._proc.wait()
                        raise self._failure(f"tomus up exited with status {code}")
                    seen += chunk
        line = seen.split(b"\n", 1)[0]
        if not line.startswith(_READY_LINE):
            raise self._failure(f"unexpected first line {line!r}")
        return line[len(_READY_LINE) :].decode().strip()

    def _failure(self, what: str) -> ClusterStartError:
        return ClusterStartError(
            f"local cluster did not start: {what}; log {self.log_path}:\n{_tail(self.log_path)}"
        )

    def connect(self, **options: Unpack[ConnectOptions]) -> _native.Client:
        """A client of this cluster (options as for ``tomus.connect``)."""
        from tomus import connect

        return connect(self.addr, **options)

    @property
    def running(self) -> bool:
        return self._finalizer.alive and self._proc.poll() is None

    def stop(self) -> None:
        """Kills the cluster's processes; removes the data directory if it made one."""
        self._finalizer()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        addr = getattr(self, "addr", None)
        return f"LocalCluster(addr={addr!r}, data_dir='{self.data_dir}', {state})"


def local_cluster(
    providers: int = 4,
    data_dir: str | os.PathLike[str] | None = None,
    memory_tier: int | str = 0,
    fsync: bool = True,
    timeout: float = 60.0,
) -> LocalCluster:
    """Starts an embedded cluster (``tomus up``) and waits until it serves.

    ``data_dir=None`` uses a temporary directory, removed on stop. ``memory_tier`` is the
    per-provider memory tier (bytes, or a size such as ``"256MiB"``); ``fsync=False`` lets
    providers acknowledge writes from the page cache.
    """
    return LocalCluster(providers, data_dir, memory_tier, fsync, timeout)


def _shutdown(proc: subprocess.Popen[bytes], temp_dir: Path | None) -> None:
    # Ctrl-C first: `tomus up` then stops (and reaps) its servers; SIGKILL whatever is left.
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    if temp_dir is not None:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(cannot read the log: {e})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"
