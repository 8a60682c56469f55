"""Fixtures: the S3 gateway of a real embedded cluster (``tomus up --s3 127.0.0.1:0``)."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.auth import S3SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
ACCESS_KEY = "tomus-test-access"
SECRET_KEY = "tomus-test-secret-key"
# A second user, from a keys file.
OTHER_KEY = ("other-user", "other-secret")


def tomus_command() -> list[str]:
    """The tomus executable: $TOMUS_BIN, a cargo build of this checkout, or the package."""
    if os.environ.get("TOMUS_BIN"):
        return [os.environ["TOMUS_BIN"]]
    for profile in ("debug", "release"):
        exe = ROOT / "target" / profile / "tomus"
        if exe.exists():
            return [str(exe)]
    if shutil.which("tomus"):
        return ["tomus"]
    return [sys.executable, "-m", "tomus"]


@dataclass
class Gateway:
    endpoint: str
    manager: str
    data: Path
    proc: subprocess.Popen

    def client(self, access: str = ACCESS_KEY, secret: str = SECRET_KEY, **config):
        return boto3.client(
            "s3",
            endpoint_url=f"http://{self.endpoint}",
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1},
                **config,
            ),
        )

    def tomus(self, *args: str, stdin: bytes | None = None) -> bytes:
        """Runs a tomus CLI command against the gateway's cluster."""
        cmd = [*tomus_command(), "--addr", self.manager, *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, check=True).stdout

    def chunk_bytes(self) -> int:
        """Bytes of chunk data on every provider (as `chunk_files` counts files)."""
        return sum(p.stat().st_size for p in self._chunk_paths())

    def chunk_files(self) -> int:
        """Chunk files on every provider (chunks of 64 KiB and more are one file each)."""
        return sum(1 for _ in self._chunk_paths())

    def _chunk_paths(self) -> Iterator[Path]:
        """Chunk files: not temporaries, small-chunk logs, the memory-class journal or the
        short-circuit read token."""
        for p in self.data.glob("provider-*/chunks/**/*"):
            if not p.is_file() or ".tmp" in p.name:
                continue
            if p.name in ("memory-class.ids", "local-read-token"):
                continue
            if not p.name.endswith(".log"):
                yield p


def _read_lines(stream, out: queue.Queue) -> None:
    for line in stream:
        out.put(line.decode(errors="replace").strip())


def start_gateway(
    data: Path, *extra: str, env_extra: dict[str, str] | None = None
) -> Iterator[Gateway]:
    """Runs `tomus up --s3` with its data in `data` (and `extra` arguments, and `env_extra`
    in its environment) for the life of the generator."""
    keys = data / "keys"
    keys.write_text(f"# extra users\n{OTHER_KEY[0]} {OTHER_KEY[1]}\n")
    env = {**os.environ, "TOMUS_S3_ACCESS_KEY": ACCESS_KEY, "TOMUS_S3_SECRET_KEY": SECRET_KEY}
    env.update(env_extra or {})
    cmd = [
        *tomus_command(),
        "up",
        "--providers",
        "3",
        "--data",
        str(data / "cluster"),
        "--addr",
        "127.0.0.1:0",
        "--no-fsync",
        "--s3",
        "127.0.0.1:0",
        "--s3-keys",
        str(keys),
        *extra,
    ]
    log = open(data / "up.log", "wb")  # noqa: SIM115 - open for the life of the process
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    manager = endpoint = None
    try:
        while endpoint is None:
            line = lines.get(timeout=60)
            if line.startswith("tomus cluster listening on"):
                manager = line.rsplit(" ", 1)[1]
            elif line.startswith("tomus s3 listening on"):
                endpoint = line.rsplit(" ", 1)[1]
    except queue.Empty:
        proc.kill()
        pytest.fail(f"tomus up --s3 did not start: {(data / 'up.log').read_text()[-2000:]}")
    assert manager is not None
    yield Gateway(endpoint, manager, data / "cluster", proc)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    yield from start_gateway(tmp_path_factory.mktemp("s3-cluster"))


@pytest.fixture(scope="session")
def s3(gateway: Gateway):
    return gateway.client()


@pytest.fixture
def bucket(s3) -> str:
    """A fresh, empty bucket."""
    name = f"t-{uuid.uuid4().hex[:20]}"
    s3.create_bucket(Bucket=name)
    return name


def signed_headers(
    gateway: Gateway, method: str, path: str, body: bytes, headers: dict[str, str] | None = None
) -> dict[str, str]:
    """The headers of a raw request signed with SigV4 by the test user (so it passes
    authentication), for tests that send what boto3 would not."""
    url = f"http://{gateway.endpoint}{path}"
    req = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
    return dict(req.headers)


def eventually(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Waits until ``check()`` holds, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def error_code(excinfo: pytest.ExceptionInfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def status(excinfo: pytest.ExceptionInfo) -> int:
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]
