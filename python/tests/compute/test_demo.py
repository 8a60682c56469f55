"""The demo main job, end to end, small."""

from __future__ import annotations

import json

import pytest

from tomus.compute import demo


@pytest.mark.slow
def test_demo_main_reports_every_phase_and_finds_the_planted_pairs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOMUS_ADDR", raising=False)  # the demo starts its own cluster
    code = demo.main(["--size", "2MiB", "--providers", "2", "--workers", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    names = [p["name"] for p in out["phases"]]
    assert names == [
        "start clusters",
        "generate + load",
        "most frequent words",
        "kmeans",
        "a-brain",
        "workflow (blast)",
    ]
    res = out["results"]
    assert len(res["top_words"]) == 10 and res["top_words"][0][1] >= res["top_words"][-1][1]
    assert res["words_job"]["reduce_factor"] == res["words_job"]["map_tasks"]
    assert res["kmeans"]["max_distance_to_true_center"] < 1.0
    assert res["kmeans"]["converged"] and res["kmeans"]["iterations"] < 10
    ab = res["abrain"]
    assert ab["planted_found"] == len(ab["planted"]) and ab["false_positives"] == 0
    assert all(p["bytes_read"] > 0 for p in out["phases"][2:])
    bw = res["blast_workflow"]
    assert bw["equals_reference"] and bw["planted_found"] == bw["planted"] > 0
    assert bw["tasks"] == 3 + 1 + 1 + bw["matchers"] + 1  # dbs, queries, split, ..., assemble


def test_kmeans_report_says_how_it_ended() -> None:
    # The demo announces "KMeans (up to 10 passes)": the report says why it took fewer.
    said = demo._kmeans_passes({"iterations": 3, "converged": True})
    assert said == "converged after 3 passes"
    said = demo._kmeans_passes({"iterations": 10, "converged": False})
    assert said == "stopped after 10 passes without converging"


def test_parse_size() -> None:
    assert demo.parse_size("16MiB") == 16 << 20
    assert demo.parse_size("2k") == 2048
    assert demo.parse_size("123") == 123
    with pytest.raises(Exception, match="not a size"):
        demo.parse_size("lots")
