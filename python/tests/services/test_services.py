"""Data services on a real tomus cluster and a real Dask cluster with storage-resource workers:
grouped compression through the CLI, a user function run on a storage worker, a service whose
worker is SIGKILLed, failures, and the records ``status``/``list`` show."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import servicejobs
from servers import cluster
from similar import similar_files

import tomus
from tomus import services


def cli(addr: str, *args: str) -> Any:
    """Runs ``tomus service ARGS --json`` as a process; returns its parsed output."""
    env = {**os.environ, "TOMUS_ADDR": addr, "PYTHONPATH": str(Path(__file__).parent)}
    out = subprocess.run(
        [sys.executable, "-m", "tomus", "service", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def put_results(client: tomus.Client, prefix: str, n: int = 40, size: int = 16 << 10) -> dict:
    fs = client.fs()
    files = {f"/{prefix}/run-{i:03}.csv": d for i, d in enumerate(similar_files(n, size))}
    for p, d in files.items():
        fs.pipe_file(p.strip("/"), d)
    return files


def test_grouped_compression_round_trip_from_the_cli(
    cluster: tomus.LocalCluster, client: tomus.Client, dask: Any, tmp_path: Path
) -> None:
    files = put_results(client, "results-cli")
    sched = dask.scheduler.address
    sid = cli(cluster.addr, "submit", "compress", "--scheduler", sched,
              "--paths", "/results-cli/*", "--into", "/results-cli.tzst")["id"]  # fmt: skip
    st = cli(cluster.addr, "status", sid, "--wait")
    assert st["state"] == "done", st
    res = st["result"]
    assert res["members"] == len(files)
    assert res["input_bytes"] == sum(len(d) for d in files.values())
    # The ratio is reported against compressing each file alone, and grouped wins on similar
    # files by far.
    assert res["grouped_bytes"] < res["per_file_bytes"]
    assert res["gain"] > 0.2 and res["grouped_ratio"] > res["per_file_ratio"]
    # It ran on a storage worker, never the compute one.
    (attempt,) = st["attempts"]
    assert attempt["worker"] in services.storage_workers(dask)
    assert attempt["resources"] == {"storage": 1}
    # Byte-exact back: an explicit extract to local files ...
    cli(cluster.addr, "extract", "/results-cli.tzst", "--to", str(tmp_path))
    for p, d in files.items():
        assert (tmp_path / p.lstrip("/")).read_bytes() == d
    # ... and the archive's size is what the service said.
    assert client.fs().info("results-cli.tzst")["size"] == res["archive_bytes"]
    # The log lives in the namespace, in two copies (the cluster has four providers).
    log = client.fs().info(f".tomus/services/{sid}.log")
    assert log["replication"] == 2 and log["size"] > 0
    listed = {s["id"]: s for s in cli(cluster.addr, "list")}
    assert listed[sid]["state"] == "done" and listed[sid]["kind"] == "compress"


def test_compress_with_removal_reads_originals_from_the_archive(
    client: tomus.Client, dask: Any
) -> None:
    files = put_results(client, "results-rm", n=20, size=4 << 10)
    svc = services.submit_compress(
        client, dask, ["/results-rm/*"], "/archives/rm.tzst", mode="dict", remove=True
    )
    st = svc.wait(timeout=120)
    assert st.state == "done", st.error
    assert st.result["removed"] == len(files)
    assert st.progress is not None and st.progress["done"] == st.progress["total"]
    fs = client.fs()
    assert fs.ls("results-rm", detail=False) == []
    for p, d in files.items():
        assert services.read(client, p) == d  # transparently, from the archive
    with pytest.raises(tomus.NotFound):
        services.read(client, "/results-rm/never")
    # Restoring puts them back in place, byte-exact.
    services.extract(client, "/archives/rm.tzst", restore=True)
    for p, d in files.items():
        assert fs.cat_file(p.strip("/")) == d


def test_user_function_runs_on_a_storage_worker(client: tomus.Client, dask: Any) -> None:
    files = put_results(client, "inputs-fn", n=5, size=2 << 10)
    compute = {a for a, w in dask.scheduler_info()["workers"].items() if not w["resources"]}
    pids = dask.run(os.getpid)
    svc = services.submit_function(
        client, dask, servicejobs.summarize, "/out/summary.json", paths=["/inputs-fn/*"]
    )
    st = svc.wait(timeout=120)
    assert st.state == "done", st.traceback
    ran = st.result
    assert ran["worker"] in services.storage_workers(dask)
    assert ran["worker"] not in compute
    assert pids[ran["worker"]] == ran["pid"]  # that worker's process, as Dask knows it
    assert st.attempts[0].resources == {"storage": 1}
    summary = json.loads(client.fs().cat_file("out/summary.json"))
    assert summary == {p: {"bytes": len(d), "lines": d.count(b"\n")} for p, d in files.items()}


def test_function_by_name_from_the_cli(cluster: tomus.LocalCluster, client: tomus.Client,
                                       dask: Any) -> None:  # fmt: skip
    put_results(client, "inputs-cli", n=3, size=1 << 10)
    sid = cli(cluster.addr, "submit", "function", "--scheduler", dask.scheduler.address,
              "--function", "servicejobs:summarize", "--paths", "/inputs-cli/*",
              "--args", '["/out/cli.json"]', "--wait")["id"]  # fmt: skip
    st = services.status(client, sid)
    assert st.state == "done" and st.result["files"] == 3
    assert len(json.loads(client.fs().cat_file("out/cli.json"))) == 3


def kill_first_attempt(dask: Any, marks: Path) -> tuple[threading.Thread, list[int]]:
    """A thread that SIGKILLs the storage worker running attempt 1 of ``slow_first_attempt``
    (once its mark appears in ``marks``); the list gets the pid killed."""
    storage = set(services.storage_workers(dask))
    pids = {pid for addr, pid in dask.run(os.getpid).items() if addr in storage}
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for m in marks.glob("attempt1-*"):
                pid = int(m.name.split("-")[1])
                if pid in pids:  # else not a storage worker: the test fails on `killed`
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    return t, killed


def test_a_service_whose_worker_is_killed_is_retried(
    client: tomus.Client, dask_to_kill: Any, tmp_path: Path
) -> None:
    dask = dask_to_kill
    t, killed = kill_first_attempt(dask, tmp_path)
    svc = services.submit_function(client, dask, servicejobs.slow_first_attempt, str(tmp_path))
    st = svc.wait(timeout=120)
    t.join()
    assert killed, "the first attempt never ran on a storage worker"
    assert st.state == "done", st.error
    assert [a.outcome for a in st.attempts] == ["died", "done"]
    assert st.attempts[0].pid == killed[0] and st.attempts[1].pid != killed[0]
    assert st.result["attempt"] == 2
    assert client.fs().cat_file("svc/retried.txt") == b"attempt 2"


def test_failures_are_visible_and_retried_when_asked(client: tomus.Client, dask: Any) -> None:
    st = services.submit_function(client, dask, servicejobs.fails, retries=1).wait(timeout=120)
    assert st.state == "failed"
    assert [a.outcome for a in st.attempts] == ["failed", "failed"]
    assert "broken on purpose (attempt 2)" in (st.error or "")
    assert "RuntimeError" in (st.traceback or "")
    # A replicate service to an address that is not a site name: refused, with the reason.
    st = services.submit_replicate(client, dask, "/results", "elsewhere").wait(timeout=120)
    assert st.state == "failed" and "HOST:PORT" in (st.error or "")
    assert st.params == {"subtree": "/results", "target": "elsewhere", "options": {}}


def test_a_replicate_service_copies_a_subtree_to_another_cluster(
    client: tomus.Client, dask: Any, tmp_path: Path
) -> None:
    fs = client.fs()
    files = {f"georep/{i}.bin": os.urandom(1000 + i) for i in range(5)}
    for path, data in files.items():
        fs.pipe_file(path, data)
    fs.pipe_file("georep/0.bin", b"second version")  # versions are replayed in order
    with cluster(tmp_path, 1) as site:
        st = services.submit_replicate(client, dask, "/georep", site.addr).wait(timeout=180)
        assert st.state == "done", st.error
        assert st.result["state"] == "caught up" and st.result["versions_behind"] == 0
        assert st.result["versions_replicated"] >= len(files) + 1
        there = tomus.connect(site.addr).fs()
        assert there.cat_file("georep/0.bin") == b"second version"
        for path, data in list(files.items())[1:]:
            assert there.cat_file(path) == data
        # Submitting it again changes nothing and finds the site caught up.
        again = services.submit_replicate(client, dask, "/georep", site.addr).wait(timeout=180)
        assert again.state == "done" and again.result["versions_behind"] == 0
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tomus",
                "sites",
                "--addr",
                client.addr,
                "stop",
                "/georep",
                "--to",
                st.result["site"],
            ],
            check=True,
        )


def test_status_asks_the_scheduler_about_unfinished_services(client: tomus.Client) -> None:
    from distributed import Client, LocalCluster

    # A Dask cluster without storage workers: the service waits, and status says why.
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc,
        Client(lc, set_as_default=False) as dask,
    ):
        with pytest.warns(UserWarning, match="no Dask worker has the 'storage' resource"):
            svc = services.submit_function(client, dask, servicejobs.fails)
        st = svc.status()  # asks the scheduler named in the log
        assert st.state == "queued"
        assert st.progress == {"note": "waiting for a Dask worker with the 'storage' resource"}
        # The scheduler drops it (as a restarted one would): the next status records it lost.
        # (The handle's future would keep it there: the CLI's submitter holds none.)
        svc.future.release()
        deadline = time.monotonic() + 20
        while st.state != "lost" and time.monotonic() < deadline:  # the release is async
            dask.run_on_scheduler(_forget, key=st.key)
            st = svc.status()
        assert st.state == "lost" and "no longer has this service" in (st.error or "")
        assert st.attempts == []
    assert svc.id in [s.id for s in services.list_services(client)]


def _forget(dask_scheduler: Any, key: str) -> None:
    dask_scheduler.client_releases_keys(keys=[key], client="fire-and-forget", stimulus_id="test")


def test_the_worker_command_starts_a_storage_worker(dask: Any) -> None:
    sched = dask.scheduler.address
    proc = subprocess.Popen(
        [sys.executable, "-m", "tomus", "service", "worker", "--scheduler", sched,
         "--name", "cli-storage"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            named = {w["name"]: w for w in dask.scheduler_info(n_workers=-1)["workers"].values()}
            if "cli-storage" in named:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the worker never joined the scheduler")
        assert named["cli-storage"]["resources"] == {"storage": 1}
        assert len(services.storage_workers(dask)) == 3  # the fixture's two and this one
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # Gone again, so the session's cluster is as the other tests expect it.
    deadline = time.monotonic() + 30
    while len(services.storage_workers(dask)) != 2 and time.monotonic() < deadline:
        time.sleep(0.2)


def test_archive_members_through_fsspec(cluster: tomus.LocalCluster, client: tomus.Client,
                                        dask: Any) -> None:  # fmt: skip
    import fsspec
    import pandas as pd

    files = put_results(client, "results-fsspec", n=6, size=2 << 10)
    st = services.submit_compress(client, dask, ["/results-fsspec/*"], "/fsspec.tzst").wait()
    assert st.state == "done", st.error
    url = "tzst://results-fsspec/run-003.csv::tomus://fsspec.tzst"
    with fsspec.open(url, "rb", tomus={"addr": cluster.addr}) as f:
        assert f.read() == files["/results-fsspec/run-003.csv"]
    fs = fsspec.filesystem("tzst", fo="tomus://fsspec.tzst", target_options={"addr": cluster.addr})
    assert fs.ls("results-fsspec", detail=False) == sorted(p.lstrip("/") for p in files)
    df = pd.read_csv(url, storage_options={"tomus": {"addr": cluster.addr}})
    assert list(df.columns) == ["step", "x", "y", "z", "energy", "flag"]


def test_a_service_the_scheduler_gives_up_on_is_failed(
    client: tomus.Client, dask_no_second_chance: Any, tmp_path: Path
) -> None:
    dask = dask_no_second_chance
    t, killed = kill_first_attempt(dask, tmp_path)
    svc = services.submit_function(client, dask, servicejobs.slow_first_attempt, str(tmp_path))
    st = svc.wait(timeout=120)  # asks the scheduler: nobody else writes the verdict
    t.join()
    assert killed, "the first attempt never ran on a storage worker"
    assert st.state == "failed", st
    assert "died" in (st.error or ""), st.error  # Dask's KilledWorker: all workers died
    assert len(st.attempts) == 1 and st.attempts[0].pid == killed[0]
