"""``tomus compute mostfrequentwords|abrain --sites FILE`` against two real sites (and one
listed site that is down), as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sitenet import RealSite
from test_sites_multisite import text

from tomus.compute.apps.abrain import reference_abrain
from tomus.compute.apps.synth import genotypes_imaging
from tomus.compute.apps.text import reference_top_words


@pytest.fixture
def sites_file(tmp_path: Path, site_a: RealSite, site_b: RealSite) -> Path:
    body = ""
    for s in (site_a, site_b):
        (tmp_path / f"{s.name}.secret").write_bytes(s.secret)
        body += (
            f'[sites.{s.name}]\naddr = "{s.addr}"\nscheduler = "{s.scheduler}"\n'
            f'secret_file = "{s.name}.secret"\n'
        )
    # A listed site that does not answer: the job runs on the others and says so.
    body += '[sites.c]\naddr = "127.0.0.1:1"\nscheduler = "tcp://127.0.0.1:1"\n'
    f = tmp_path / "sites.toml"
    f.write_text(body)
    return f


def tomus_compute(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tomus", "compute", *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_mostfrequentwords_across_sites(sites_file: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    first, second = text(8000, seed=1), text(5000, seed=2)
    (corpus / "1.txt").write_bytes(first)
    (corpus / "2.txt").write_bytes(second)
    out = tomus_compute(
        "mostfrequentwords", "--sites", str(sites_file), "--json", "-k", "12",
        "--piece-size", "16384", "--share", "a=1", "--share", "b=3", str(corpus),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr + out.stdout  # stdout: which part is missing, why
    assert "site c is down" in out.stderr
    got = json.loads(out.stdout)
    assert got["complete"] and got["missing"] == []
    assert [tuple(wc) for wc in got["top"]] == reference_top_words(first + second, 12)
    maps = {r["part"]: r["map_tasks"] for r in got["runs"]}
    assert maps["b"] > 2 * maps["a"]  # --share b=3 gave b three quarters of the pieces
    assert got["inter_site_bytes"] == next(
        r["result_bytes"] for r in got["runs"] if r["part"] == "b"
    )

    # Text mode, and the exit status of a usage error.
    out = tomus_compute("mfw", "--sites", str(sites_file), "-k", "3", str(corpus))
    assert out.returncode == 0, out.stderr + out.stdout  # stdout: which part is missing, why
    assert out.stdout.splitlines() == [
        f"{w}\t{c}" for w, c in reference_top_words(first + second, 3)
    ]
    assert "# bytes between sites:" in out.stderr
    bad = tomus_compute("mfw", "--sites", str(sites_file), "--share", "z=1", str(corpus))
    assert bad.returncode == 1 and "unknown sites ['z']" in bad.stderr


def test_abrain_across_sites(sites_file: Path) -> None:
    out = tomus_compute(
        "abrain", "--sites", str(sites_file), "--json", "--synthetic", "--subjects", "120",
        "--snps", "256", "--voxels", "40", "--planted", "2", "--permutations", "19",
        "--snp-block", "64", "--seed", "3",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr + out.stdout  # stdout: which part is missing, why
    got = json.loads(out.stdout)
    x, y, planted = genotypes_imaging(120, 256, 40, planted=2, seed=3)
    ref = reference_abrain(x, y, 19, seed=3)
    assert got["complete"] and [tuple(p) for p in got["planted"]] == planted
    assert [(s, v, p) for s, v, _, p in got["pairs"]] == [(s, v, p) for s, v, _, p in ref.pairs]
    assert sorted(r["part"] for r in got["runs"]) == ["a", "b"]


def test_resident_inputs_with_a_site_down_give_a_partial_answer(
    sites_file: Path, site_a: RealSite, site_b: RealSite
) -> None:
    import tomus

    texts = {"a": text(3000, seed=7), "b": text(2000, seed=8)}
    for s in (site_a, site_b):
        ns = tomus.connect(s.addr, secret=s.secret).namespace()
        ns.mkdir("logs", True)
        _, blob = ns.create("logs/day1.txt", 65536, 1, False)
        blob.replace(texts[s.name])
    args = ["mfw", "--sites", str(sites_file), "--json", "-k", "8"]
    out = tomus_compute(*args, "a:logs", "b:logs/day1.txt", "c:logs/day1.txt")
    assert out.returncode == 3, out.stderr  # a part is missing
    got = json.loads(out.stdout)
    assert not got["complete"]
    (missing,) = got["missing"]
    assert missing["site"] == "c" and missing["inputs"] == ["c:logs/day1.txt"]
    assert [tuple(wc) for wc in got["top"]] == reference_top_words(texts["a"] + texts["b"], 8)
    # Processed where they are: nothing was scattered, so only b's result crossed.
    assert got["inter_site_bytes"] == next(
        r["result_bytes"] for r in got["runs"] if r["part"] == "b"
    )
