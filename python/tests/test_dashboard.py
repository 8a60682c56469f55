"""The manager's web dashboard in a real headless Chromium (Debian's, driven by Selenium
through chromium-driver): the overview lists every provider, the namespace browser shows a
directory and a file's versions, the live chart draws from /metrics. Screenshots go to
python/tests/artifacts/dashboard/ (git-ignored; CI keeps the work tree)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import Cluster, cluster, http_get

import tomus

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
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,900"]:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
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
        lines = browser.find_elements(By.CSS_SELECTOR, "#throughput polyline")  # type: ignore[attr-defined]
        assert len(lines) == 2
        points = len(lines[0].get_attribute("points").split())
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
