"""Real sites for tests and bench/sites.py: a tomus cluster (a manager and two providers), a Dask
scheduler and Dask workers, each a process of its own, optionally in a network namespace.

``Link`` is a network namespace joined to the root namespace by one veth pair (10.79.C.1 inside,
10.79.C.254 outside): everything a site in it exchanges with the rest of the machine crosses that
veth, whose kernel counters (``Link.bytes``) count the inter-site traffic, and ``Link.shape``
puts a ``tc`` token bucket on both ends (a slow wide-area link). Namespaces need root; without
them (or with ``TOMUS_TEST_NO_NETNS=1``) ``Link.create`` returns None and the site runs on
loopback, as crates/cli/tests/common/hosts/ does. Namespaces left by killed test processes
are swept when the next link is made.

``RealSite`` starts the processes (in the link's namespace if given) and SIGKILLs them on
``kill_dask``/``kill_tomus``/``close``, each process group at once, as a machine failing would.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tomus.sites import Site


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _sweep() -> None:
    """Removes the namespaces of test processes that died without closing their links (their
    PID is gone); deleting a namespace deletes its veth pair too."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "tmsites" and parts[1].isdigit():
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
            except PermissionError:
                pass


class Link:
    """A network namespace and the veth pair joining it to the root namespace."""

    def __init__(self, c: int) -> None:
        self.c = c
        self.ns = f"tmsites-{os.getpid()}-{c}"
        self.outer, self.inner = f"tsr{c}x{os.getpid() % 1000}", f"tsn{c}"
        self.ip = f"10.79.{c}.1"
        self.root_ip = f"10.79.{c}.254"

    @classmethod
    def create(cls) -> Link | None:
        """A new link, or None (saying why on stderr) when namespaces are not permitted."""
        if os.environ.get("TOMUS_TEST_NO_NETNS", "0") != "0":
            return None
        if os.geteuid() != 0:
            print("sitenet: not root, sites run on loopback", file=sys.stderr)
            return None
        _sweep()
        for _ in range(20):
            link = cls(random.randrange(1, 250))
            try:
                _ip("link", "add", link.outer, "type", "veth", "peer", "name", link.inner)
            except (subprocess.CalledProcessError, FileNotFoundError):
                continue  # taken by a concurrent test (or no `ip`)
            try:
                _ip("netns", "add", link.ns)
                _ip("link", "set", link.inner, "netns", link.ns)
                _ip("addr", "add", f"{link.root_ip}/24", "dev", link.outer)
                _ip("link", "set", link.outer, "up")
                _ip("-n", link.ns, "addr", "add", f"{link.ip}/24", "dev", link.inner)
                _ip("-n", link.ns, "link", "set", link.inner, "up")
                _ip("-n", link.ns, "link", "set", "lo", "up")
            except subprocess.CalledProcessError as e:
                link.close()
                print(f"sitenet: netns not permitted ({e.stderr!r}); loopback", file=sys.stderr)
                return None
            return link
        return None

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.ns]

    def bytes(self) -> int:
        """Bytes that crossed the veth so far, both directions."""
        base = Path("/sys/class/net", self.outer, "statistics")
        return int((base / "rx_bytes").read_text()) + int((base / "tx_bytes").read_text())

    def shape(self, mbit: float, delay_ms: float = 0.0) -> None:
        """Limits the link to ``mbit`` Mbit/s each way (and ``delay_ms`` one-way delay)."""
        for pre, dev in (([], self.outer), (["-n", self.ns], self.inner)):
            netem = ["netem", "delay", f"{delay_ms}ms"] if delay_ms else []
            if netem:
                subprocess.run(
                    ["tc", *pre, "qdisc", "add", "dev", dev, "root", "handle", "1:", *netem],
                    check=True,
                )
                parent = ["parent", "1:", "handle", "2:"]
            else:
                parent = ["root"]
            subprocess.run(
                ["tc", *pre, "qdisc", "add", "dev", dev, *parent, "tbf",
                 "rate", f"{mbit}mbit", "burst", "64kb", "latency", "500ms"],
                check=True,
            )  # fmt: skip

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


class RealSite:
    """A site of real processes: ``tomus up``, ``dask scheduler``, ``dask worker``."""

    def __init__(self, name: str, workers: int = 1, link: Link | None = None) -> None:
        self.name, self.link = name, link
        self.dir = Path(tempfile.mkdtemp(prefix=f"tomus-site-{name}-"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        host = link.ip if link else "127.0.0.1"
        self.secret = secrets.token_hex(16).encode()
        secret_file = self.dir / "secret"
        secret_file.write_bytes(self.secret)
        # Workers import the tests' task functions (sitejobs.py) by name, as Dask workers do.
        path = os.pathsep.join(
            p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p
        )
        env = {"TOMUS_CLUSTER_SECRET": self.secret.decode(), "PYTHONPATH": path}
        try:
            # A manager and two providers, each a process, on the site's address (``tomus up``
            # keeps its providers on loopback).
            sec = ["--secret-file", str(secret_file), "--addr", f"{host}:0"]
            self.addr = self._start(
                "manager",
                ["-m", "tomus", *sec, "manager", "--data", str(self.dir / "manager")],
                rb"(?m)^tomus \w+ listening on (\S+)\s*$", env,
            )  # fmt: skip
            for i in range(2):
                self._start(
                    f"provider-{i}",
                    ["-m", "tomus", *sec, "provider", "--manager", self.addr,
                     "--data", str(self.dir / f"provider-{i}"), "--no-fsync",
                     "--heartbeat-ms", "200"],
                    rb"(?m)^tomus \w+ listening on (\S+)\s*$", env,
                )  # fmt: skip
            self._wait_providers(2)
            self.scheduler = self._start(
                "scheduler",
                ["-m", "distributed.cli.dask_scheduler", "--host", host, "--port", "0",
                 "--no-dashboard", "--no-show"],
                rb"Scheduler at:\s+(\S+)", env,
            )  # fmt: skip
            # The site's workers know its secret from the environment, as deployed workers do.
            self._start(
                "workers",
                ["-m", "distributed.cli.dask_worker", self.scheduler, "--host", host,
                 "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard"],
                None, env,
            )  # fmt: skip
            self.workers = workers
        except BaseException:
            self.close()
            raise

    def site(self, **kw: object) -> Site:
        return Site(self.name, self.addr, self.secret, self.scheduler, self.workers, **kw)  # type: ignore[arg-type]

    def _start(self, name: str, args: list[str], ready: bytes | None, env: dict[str, str]) -> str:
        log = self.dir / f"{name}.log"
        cmd = [*(self.link.prefix if self.link else []), sys.executable, *args]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **env}, start_new_session=True,
            )  # fmt: skip
        self.procs[name] = proc
        if ready is None:
            return ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            m = re.search(ready, log.read_bytes())
            if m:
                return m.group(1).decode()
            if proc.poll() is not None:
                raise RuntimeError(f"{name} of site {self.name} exited: {log.read_text()}")
            time.sleep(0.05)
        raise TimeoutError(f"{name} of site {self.name} not ready: {log.read_text()}")

    def _kill(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def kill_dask(self) -> None:
        """SIGKILLs the site's scheduler and workers (its cluster stays up)."""
        self._kill("workers")
        self._kill("scheduler")

    def kill_tomus(self) -> None:
        """SIGKILLs the site's manager and providers."""
        for name in [n for n in self.procs if n == "manager" or n.startswith("provider")]:
            self._kill(name)

    def _wait_providers(self, n: int) -> None:
        import tomus

        c = tomus.connect(self.addr, secret=self.secret)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                c.create_blob().write(0, b"x")  # succeeds once providers registered
                return
            except tomus.TomusError:
                time.sleep(0.1)
        raise TimeoutError(f"site {self.name}: providers did not register")

    def close(self) -> list[str]:
        """Kills the site and removes its directory. Returns how each process that ended
        without being asked to ended (with the tail of its log); the directory is then kept,
        so that a test fixture can fail on an unexplained death with the evidence at hand."""
        deaths: list[str] = []
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                tail = (self.dir / f"{name}.log").read_text(errors="replace")[-4000:]
                deaths.append(f"{name} of site {self.name} exited with {code}:\n{tail}")
        for name in list(self.procs):
            self._kill(name)
        if deaths:
            deaths.append(f"site {self.name}'s logs and data are kept in {self.dir}")
        else:
            subprocess.run(["rm", "-rf", str(self.dir)], check=False)
        return deaths
