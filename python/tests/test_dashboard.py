"""The manager's web dashboard in a real headless Chromium (Debian's, driven by Selenium
through chromium-driver): the overview lists every provider, the namespace browser shows a
directory and a file's versions, downloads any version and shows where its chunks are, the
progress section shows repair, garbage collection, a real backup and a replication rule's lag,
the live chart draws from /metrics, and real IterativeReduce and MapReduce (word count) jobs
on Dask get their timelines of task bars per worker.
Screenshots go to python/tests/artifacts/dashboard/ (git-ignored; CI keeps the work tree)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from servers import Cluster, basic, cluster, http_get

import tomus

if TYPE_CHECKING:
    from tomus.compute.engine import TaskRecord

ARTIFACTS = Path(__file__).parent / "artifacts" / "dashboard"
CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs Debian's chromium and chromium-driver (scripts/test.sh installs them)",
)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with cluster(tmp_path_factory.mktemp("dashboard"), providers=3) as c:
        yield c


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    # Chromium makes its profile and singleton-socket directories under TMPDIR and leaves the
    # socket's directory behind: keep both in pytest's scratch space, not in /tmp.
    scratch = tmp_path_factory.mktemp("chromium")

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900"]:
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={scratch / 'profile'}")
    service = Service(executable_path=DRIVER, env={**os.environ, "TMPDIR": str(scratch)})
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))  # type: ignore[attr-defined]


def wait_text(driver: object, element_id: str, want: str, timeout: float = 15.0) -> str:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = driver.find_element(By.ID, element_id).text  # type: ignore[attr-defined]
        if want in text:
            return text
        time.sleep(0.2)
    raise AssertionError(f"#{element_id} never showed {want!r}: {text!r}")


def test_overview_lists_every_provider_and_draws_the_chart(
    servers: Cluster, browser: object
) -> None:
    from selenium.webdriver.common.by import By

    client = tomus.connect(servers.addr)
    client.fs().pipe("photos/cat.bin", b"x" * 300_000)
    deadline = time.monotonic() + 15
    while True:
        browser.get(f"http://{servers.http}/")  # type: ignore[attr-defined]
        rows = browser.find_elements(By.CSS_SELECTOR, "#providers tr.provider")  # type: ignore[attr-defined]
        states = [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows]
        if states.count("up") == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert states == ["up", "up", "up"]
    assert browser.find_element(By.ID, "provider-count").text == "3 providers (3 up)"  # type: ignore[attr-defined]
    addresses = {r.find_elements(By.TAG_NAME, "td")[1].text for r in rows}
    assert all(a.startswith("127.0.0.1:") for a in addresses) and len(addresses) == 3
    # The chart script polls /metrics every second and draws a line per series; some writes
    # meanwhile give it something to show.
    wait_text(browser, "rates", "manager requests/s")
    deadline = time.monotonic() + 15
    points = 0
    while points < 4 and time.monotonic() < deadline:
        client.fs().pipe("photos/more.bin", os.urandom(1 << 20))
        # Read in one script: the chart replaces its polylines every second, so an element
        # found by one WebDriver call can be stale by the next (StaleElementReference).
        lines = browser.execute_script(  # type: ignore[attr-defined]
            "return Array.from(document.querySelectorAll('#throughput polyline'),"
            " p => p.getAttribute('points'))"
        )
        assert len(lines) == 2
        points = len(lines[0].split())
        time.sleep(0.3)
    assert points >= 4
    assert "Repair and garbage collection" in browser.page_source  # type: ignore[attr-defined]
    shot(browser, "overview")


def test_namespace_browser_shows_directories_and_every_version(
    servers: Cluster, browser: object
) -> None:
    from selenium.webdriver.common.by import By

    client = tomus.connect(servers.addr)
    fs = client.fs()
    fs.pipe("docs/report <v>.txt", b"a" * 1000)
    fs.pipe("docs/report <v>.txt", b"b" * 2500)
    fs.pipe("docs/sub/other.txt", b"c")
    browser.get(f"http://{servers.http}/fs?path=docs")  # type: ignore[attr-defined]
    names = [
        e.text
        for e in browser.find_elements(By.CSS_SELECTOR, "#entries tr td:first-child")  # type: ignore[attr-defined]
    ]
    assert names == ["report <v>.txt", "sub/"]
    shot(browser, "directory")
    browser.find_element(By.LINK_TEXT, "report <v>.txt").click()  # type: ignore[attr-defined]
    assert browser.find_element(By.ID, "title").text == "/docs/report <v>.txt"  # type: ignore[attr-defined]
    rows = browser.find_elements(By.CSS_SELECTOR, "#versions tr.version")  # type: ignore[attr-defined]
    cells = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    # Newest first: every version with its size, state and publication time.
    assert [c[0] for c in cells][:2] == ["2", "1"]
    assert cells[0][1] == "2.4 KiB" and cells[1][1] == "1000 B"
    assert all(c[4] == "Published" and c[5].endswith("UTC") for c in cells[:2])
    shot(browser, "file-versions")


def test_missing_pages_are_404(servers: Cluster) -> None:
    assert http_get(f"http://{servers.http}/fs?path=no/such/dir")[0] == 404
    assert http_get(f"http://{servers.http}/file?path=no/such/file")[0] == 404
    assert http_get(f"http://{servers.http}/nothing-here")[0] == 404
    status, body, headers = http_get(f"http://{servers.http}/chart.js")
    assert status == 200 and b"polyline" in body
    assert headers["content-type"].startswith("text/javascript")


def test_a_registered_file_is_listed_as_one(servers: Cluster, tmp_path: Path) -> None:
    """A workflow output registered in place is a row of its own (size, holders), not a
    "directory" whose link led to an error."""
    from tomus import workflow

    local = tmp_path / "out.bin"
    local.write_bytes(b"x" * 3000)
    workflow.register(tomus.connect(servers.addr), local, "/wfdash/out.bin")
    status, body, _ = http_get(f"http://{servers.http}/fs?path=wfdash")
    assert status == 200
    row = body.split(b'<tr class="registered">', 1)[1].split(b"</tr>", 1)[0]
    assert b"<td>out.bin</td><td>registered on 1 holder(s)</td>" in row
    assert b"2.9 KiB" in row
    assert b"out.bin/" not in body


def test_download_any_version_and_see_where_its_chunks_are(
    servers: Cluster, browser: object
) -> None:
    from selenium.webdriver.common.by import By

    client = tomus.connect(servers.addr)
    ns = client.namespace()
    _, blob = ns.create("dl/data é.bin", chunk_size=64 << 10, replication=2)
    v1 = os.urandom(200_000)
    v2 = os.urandom(70_000)
    blob.replace(v1)
    blob.replace(v2)
    browser.get(f"http://{servers.http}/file?path=dl/data%20%C3%A9.bin")  # type: ignore[attr-defined]
    rows = browser.find_elements(By.CSS_SELECTOR, "#versions tr.version")  # type: ignore[attr-defined]
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == ["2", "1"]
    link = rows[1].find_element(By.CLASS_NAME, "download").get_attribute("href")
    # The browser fetches the old version and hashes what it got.
    got = browser.execute_async_script(  # type: ignore[attr-defined]
        """const done = arguments[arguments.length - 1];
        fetch(arguments[0]).then(r => r.arrayBuffer()).then(b =>
          crypto.subtle.digest('SHA-256', b).then(h => done([b.byteLength,
            Array.from(new Uint8Array(h)).map(x => x.toString(16).padStart(2, '0')).join('')])));
        """,
        link,
    )
    assert got == [len(v1), hashlib.sha256(v1).hexdigest()]
    status, body, headers = http_get(link)
    assert status == 200 and body == v1
    assert headers["content-length"] == str(len(v1))
    assert headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"] == (
        "attachment; filename=\"data _.bin\"; filename*=UTF-8''data%20%C3%A9.bin"
    )
    # Without a version: the latest.
    assert http_get(f"http://{servers.http}/download?path=dl/data%20%C3%A9.bin")[1] == v2
    # A file larger than the manager's read window arrives whole, in order.
    big = os.urandom(9 << 20)
    client.fs().pipe("dl/big.bin", big)
    status, body, headers = http_get(f"http://{servers.http}/download?path=dl/big.bin")
    assert status == 200 and headers["content-length"] == str(len(big)) and body == big
    shot(browser, "file-versions-download")
    # Where the chunks of version 1 are: four 64 KiB chunks, each on two providers.
    rows[1].find_element(By.CLASS_NAME, "chunks").click()
    assert browser.find_element(By.ID, "title").text == "/dl/data é.bin · version 1"  # type: ignore[attr-defined]
    chunks = browser.find_elements(By.CSS_SELECTOR, "#chunks tr.chunk")  # type: ignore[attr-defined]
    cells = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in chunks]
    assert [int(c[0]) for c in cells] == [0, 65536, 131072, 196608]
    providers = {p.id: p.addr for p in client.providers()}
    for c in cells:
        holders = c[4].split(", ")
        assert len(holders) == 2
        for h in holders:
            pid, addr = h.split(" ", 1)
            assert providers[int(pid)] == addr.strip("()")
    assert len({c[2] for c in cells}) == 4  # four distinct chunks
    shot(browser, "chunks")
    # What does not exist is a 404; a version that is not a number, a 400.
    base = f"http://{servers.http}"
    assert http_get(f"{base}/download?path=dl/data%20%C3%A9.bin&version=9")[0] == 404
    assert http_get(f"{base}/download?path=dl/nothing.bin")[0] == 404
    assert http_get(f"{base}/chunks?path=dl/nothing.bin&version=1")[0] == 404
    assert http_get(f"{base}/download?path=dl/data%20%C3%A9.bin&version=x")[0] == 400
    # A path of the wrong kind is the request's fault (these were 500s): a file to browse,
    # a directory (or no path: the root) to download or to show the chunks of.
    assert http_get(f"{base}/fs?path=dl/data%20%C3%A9.bin")[0] == 400
    assert http_get(f"{base}/download?path=dl")[0] == 400
    assert http_get(f"{base}/download")[0] == 400
    assert http_get(f"{base}/chunks?version=1")[0] == 400
    assert http_get(f"{base}/job?id=123456")[0] == 404


def test_progress_shows_maintenance_and_a_real_backup(
    servers: Cluster, browser: object, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    tomus.connect(servers.addr).fs().pipe("backed/up.txt", b"k" * 5000)
    cli = [sys.executable, "-m", "tomus", "--addr", servers.addr, "backup"]
    target = f"file://{tmp_path / 'points'}"
    (tmp_path / "points").mkdir()
    for args in (["enable", "--target", target], ["now"]):
        r = subprocess.run([*cli, *args], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 30
    while True:
        browser.get(f"http://{servers.http}/")  # type: ignore[attr-defined]
        backup = browser.find_element(By.ID, "backup").text  # type: ignore[attr-defined]
        if "last point 0" in backup or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert f"target {target}" in backup
    assert "state idle" in backup and "failed attempts 0" in backup, backup
    done = [line for line in backup.splitlines() if line.startswith("current point")]
    # Every chunk of the point uploaded: "N of N chunks (100%)".
    assert done and "(100%)" in done[0], backup
    # tomus's own files (the backup configuration) are not served.
    for page in ("download", "chunks"):
        url = f"http://{servers.http}/{page}?path=.tomus-backup/config.json"
        assert http_get(url)[0] == 404
    maintenance = browser.find_element(By.ID, "maintenance").text  # type: ignore[attr-defined]
    assert "repair passes" in maintenance and "garbage collected (total)" in maintenance
    browser.execute_script("document.getElementById('backup').scrollIntoView()")  # type: ignore[attr-defined]
    shot(browser, "progress")


def test_overview_shows_each_replication_rule_and_its_lag(
    servers: Cluster, browser: object, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    cli = [sys.executable, "-m", "tomus", "--addr", servers.addr, "sites"]

    def sites(*args: str) -> None:
        r = subprocess.run([*cli, *args], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr

    def rule_row(want: str) -> str:
        """The overview's row of the rule, once it shows ``want``."""
        deadline = time.monotonic() + 30
        row = ""
        while want not in row and time.monotonic() < deadline:
            browser.get(f"http://{servers.http}/")  # type: ignore[attr-defined]
            rows = browser.find_elements(By.CSS_SELECTOR, "#replication tr.rule")  # type: ignore[attr-defined]
            row = " | ".join(r.text for r in rows)
            time.sleep(0.3)
        return row

    fs = tomus.connect(servers.addr).fs()
    for i in range(3):
        fs.pipe(f"geo/{i}.txt", b"r" * (1000 + i))
    (tmp_path / "site").mkdir()
    with cluster(tmp_path / "site", providers=1) as site:
        sites("add", "far", site.addr)
        sites("replicate", "/geo", "--to", "far")
        row = rule_row("caught up")
        assert row.startswith("far /geo caught up 0 0.0 s 3 versions"), row
        assert tomus.connect(site.addr).fs().cat_file("geo/2.txt") == b"r" * 1002
    # The site is gone: what is published since waits, and the overview says how much.
    fs.pipe("geo/late.txt", b"late")
    row = rule_row("far /geo site unreachable 1 ")
    assert "far /geo site unreachable 1 " in row, row
    browser.execute_script("document.getElementById('replication').scrollIntoView()")  # type: ignore[attr-defined]
    shot(browser, "replication")
    sites("stop", "/geo", "--to", "far")


@pytest.fixture(scope="module")
def dask() -> Iterator[object]:
    """Two Dask worker processes, for the compute jobs."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            scheduler_kwargs={"dashboard_address": ":0"},
            silence_logs=50,
        ) as dask_cluster,
        Client(dask_cluster, set_as_default=False) as client,
    ):
        client.wait_for_workers(2, timeout=60)
        yield client


def timeline_of(
    browser: object, base: str, job_id: int, timeline: list[TaskRecord]
) -> dict[str, list[float]]:
    """Opens job ``job_id`` from the list of jobs and checks that its drawing has a row per
    worker and, in it, a bar per task of ``timeline`` (the driver's own records). Returns the
    left and right ends of the bars of each kind of task."""
    from selenium.webdriver.common.by import By

    browser.get(f"http://{base}/jobs")  # type: ignore[attr-defined]
    browser.find_element(By.LINK_TEXT, str(job_id)).click()  # type: ignore[attr-defined]
    wait_text(browser, "job-summary", "finished")
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline g.worker")  # type: ignore[attr-defined]
    assert {r.get_attribute("data-worker") for r in rows} == {t.worker for t in timeline}
    drawn = {
        (r.get_attribute("data-worker"), bar.get_attribute("data-task"))
        for r in rows
        for bar in r.find_elements(By.CSS_SELECTOR, "rect.task")
    }
    # One bar per task the job ran, in its worker's row.
    assert drawn == {(t.worker, t.task) for t in timeline}
    ends: dict[str, list[float]] = {}
    for kind in ("map", "reduce"):
        bars = browser.find_elements(By.CSS_SELECTOR, f"#timeline rect.task.{kind}")  # type: ignore[attr-defined]
        assert len(bars) == sum(t.kind == kind for t in timeline)
        assert all(float(b.get_attribute("width")) >= 2 for b in bars)
        ends[kind] = [float(b.get_attribute("x")) for b in bars]
        ends[kind + "-end"] = [
            float(b.get_attribute("x")) + float(b.get_attribute("width")) for b in bars
        ]
    return ends


def test_a_compute_job_timeline_has_task_bars_per_worker(
    servers: Cluster, browser: object, dask: object
) -> None:
    from tomus.compute import IterativeReduce

    # Lambdas travel by value: the workers need not import this test module.
    res = IterativeReduce(
        lambda i: (time.sleep(0.2), [i])[1],
        lambda parts: sorted(x for p in parts for x in p),
        ratio=2,
    ).run(range(6), client=dask, addr=servers.addr)
    assert res.value == list(range(6))
    bars = timeline_of(browser, servers.http, res.job_id, res.timeline)
    assert len(bars["map"]) == 6 and len(bars["reduce"]) == res.reduce_tasks
    shot(browser, "job-timeline")


def test_a_mapreduce_job_shows_its_maps_then_its_reducers(
    servers: Cluster, browser: object, dask: object
) -> None:
    from selenium.webdriver.common.by import By

    from tomus.compute.apps import word_count

    fs = tomus.connect(servers.addr).fs()
    texts = [" ".join(["tomus", "blob", f"doc{i}"] * (50 + i)) + "\n" for i in range(4)]
    for i, text in enumerate(texts):
        fs.pipe(f"wc/in/{i}.txt", text.encode())
    res = word_count(["wc/in"], dask, servers.addr, partitions=2)
    expected = Counter(w for t in texts for w in t.split())
    assert res.value == expected
    assert {t.kind for t in res.timeline} == {"map", "reduce"}
    bars = timeline_of(browser, servers.http, res.job_id, res.timeline)
    assert len(bars["map"]) == 4 and len(bars["reduce"]) == 2
    # MapReduce's barrier, drawn: every reducer starts after the last map ended (a pixel of
    # rounding aside), unlike IterativeReduce's tree.
    assert min(bars["reduce"]) >= max(bars["map-end"]) - 1
    summary = browser.find_element(By.ID, "job-summary").text  # type: ignore[attr-defined]
    assert "mapreduce · 4 inputs, 2 reducers" in summary
    assert "6 tasks (4 map, 2 reduce) on" in summary
    shot(browser, "mapreduce-timeline")


def test_beyond_loopback_nothing_is_served_without_the_secret(tmp_path: Path) -> None:
    secret = "dashboard-test-secret-0123456789"
    env = {"TOMUS_CLUSTER_SECRET": secret}
    with cluster(tmp_path, providers=1, env=env, http_host="0.0.0.0") as c:
        client = tomus.connect(c.addr, secret=secret)
        client.fs().pipe("secret/data.bin", b"s" * 1000)
        base = f"http://{c.http}"
        paths = [
            "/",
            "/fs?path=secret",
            "/file?path=secret/data.bin",
            "/chunks?path=secret/data.bin&version=1",
            "/download?path=secret/data.bin",
            "/jobs",
            "/style.css",
            "/metrics",
        ]
        for p in paths:
            for auth in (None, basic("wrong"), "Bearer not-the-secret-0123456789"):
                status, body, _ = http_get(base + p, auth)
                assert status == 401 and b"s" * 100 not in body, (p, auth, status)
        status, body, _ = http_get(base + "/download?path=secret/data.bin", basic(secret))
        assert status == 200 and body == b"s" * 1000
        status, body, _ = http_get(base + "/download?path=secret/data.bin", f"Bearer {secret}")
        assert status == 200 and body == b"s" * 1000
