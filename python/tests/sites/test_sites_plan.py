"""The scatter plan, text pieces and the sites file (no processes needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tomus.sites import SitesError, cut_pieces, load_sites, plan
from tomus.sites.scatter import parse_shares


def test_plan_is_proportional_contiguous_and_complete() -> None:
    shares = plan(10, {"a": 2.0, "b": 1.0})
    assert shares == {"a": [0, 1, 2, 3, 4, 5, 6], "b": [7, 8, 9]}
    shares = plan(7, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert [len(v) for v in shares.values()] == [3, 2, 2]  # largest remainder to the first
    assert sorted(u for v in shares.values() for u in v) == list(range(7))
    assert plan(3, {"a": 0.0, "b": 5.0}) == {"a": [], "b": [0, 1, 2]}


def test_explicit_assignment_is_used_as_given_and_checked() -> None:
    assert plan(4, {"a": 1.0, "b": 1.0}, {"a": [3, 1], "b": [0, 2]}) == {
        "a": [1, 3],
        "b": [0, 2],
    }
    with pytest.raises(ValueError, match="to both a and b"):
        plan(2, {"a": 1.0, "b": 1.0}, {"a": [0, 1], "b": [1]})
    with pytest.raises(ValueError, match=r"leaves units \[2\]"):
        plan(3, {"a": 1.0, "b": 1.0}, {"a": [0], "b": [1]})
    with pytest.raises(ValueError, match="not available"):
        plan(1, {"a": 1.0}, {"z": [0]})
    with pytest.raises(ValueError, match="none is up"):
        plan(1, {})
    assert parse_shares(["a=2", "b=0.5"]) == {"a": 2.0, "b": 0.5}
    with pytest.raises(ValueError, match="SITE=WEIGHT"):
        parse_shares(["a"])


def test_pieces_end_at_line_ends_and_keep_every_byte() -> None:
    data = b"".join(b"line %d of the file\n" % i for i in range(500)) + b"no newline at end"
    pieces = cut_pieces([("f", data), ("g", b"x y\n")], piece_size=1000)
    f = [p for p in pieces if p.name == "f"]
    assert b"".join(p.data for p in f) == data + b"\n"
    assert all(p.data.endswith(b"\n") for p in pieces)
    assert all(1000 <= len(p.data) < 1100 for p in f[:-1])
    assert [(p.start, p.end) for p in f] == list(
        zip([0] + [p.end for p in f[:-1]], [p.end for p in f], strict=True)
    )
    assert pieces[-1].name == "g" and str(pieces[-1]) == "g bytes 0-4"


def test_sites_file(tmp_path: Path) -> None:
    (tmp_path / "b.secret").write_text("s3cret\n")
    f = tmp_path / "sites.toml"
    f.write_text(
        'home = "b"\n'
        '[sites.a]\naddr = "10.0.0.1:7000"\nscheduler = "tcp://10.0.0.1:8786"\nshare = 3\n'
        '[sites.b]\naddr = "10.0.0.2:7000"\nsecret_file = "b.secret"\nworkers = 2\n'
    )
    sites = load_sites(f)
    assert sites.names == ["a", "b"] and sites.home == "b"
    assert sites["a"].scheduler == "tcp://10.0.0.1:8786" and sites["a"].share == 3.0
    assert sites["b"].secret == b"s3cret" and sites["b"].workers == 2
    assert sites["b"].scheduler is None and sites["a"].secret is None
    for body, message in [
        ('[sites.a]\nscheduler = "x"\n', "'addr'"),
        ('[sites.a]\naddr = "h:1"\nport = 3\n', "unknown keys"),
        ('[sites.a]\naddr = "h:1"\nworkers = 0\n', "positive integer"),
        ('[sites.a]\naddr = "h:1"\nsecret_file = "nope"\n', "cannot read secret_file"),
        ('home = "z"\n[sites.a]\naddr = "h:1"\n', "home site 'z'"),
        ("[other]\n", "unknown top-level"),
        ("sites = [", "not valid TOML"),
    ]:
        f.write_text(body)
        with pytest.raises(SitesError, match=message):
            load_sites(f)
