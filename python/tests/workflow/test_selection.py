"""The per-transfer choice (Algorithms 1 and 2) follows its configuration, and a user
module that scores higher wins, in a real workflow run too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tomus
from tomus import workflow
from tomus.workflow import FileInfo, SelectionConfig, TransferContext, choose
from tomus.workflow.modules import BUILTIN


def ctx(size: int, holders: int, readers: int = 1, registered: bool = True) -> TransferContext:
    f = FileInfo("/x", size, registered, tuple(f"h{i}" for i in range(holders)))
    return TransferContext(file=f, pending_readers=readers)


def test_default_choice_follows_config(tmp_path: Path) -> None:
    cfg = SelectionConfig()
    assert choose(ctx(100, 1), cfg).module.name == "memory"
    assert choose(ctx((15 << 20) - 1, 1), cfg).module.name == "memory"
    assert choose(ctx(15 << 20, 1), cfg).module.name == "direct"
    assert choose(ctx(20 << 20, 2, readers=4), cfg).module.name == "swarm"
    assert choose(ctx(20 << 20, 1, readers=1), cfg).module.name == "direct"
    assert choose(ctx(10, 0, registered=False), cfg).module.name == "store"
    toml = tmp_path / "t.toml"
    toml.write_text('[transfers]\nmemory_threshold = "1KiB"\nreplica_threshold = 100\n')
    cfg = SelectionConfig.load(toml)
    assert cfg.memory_threshold == 1024
    assert choose(ctx(2000, 1), cfg).module.name == "direct"
    assert choose(ctx(20 << 20, 5, readers=8), cfg).module.name == "direct"
    yml = tmp_path / "t.yaml"
    yml.write_text("memory_threshold: 0\nreplica_threshold: 2\n")
    cfg = SelectionConfig.load(yml)
    c = choose(ctx(5, 1, readers=2), cfg)
    assert c.module.name == "swarm" and "holders" in c.reason
    with pytest.raises(ValueError, match="unknown"):
        SelectionConfig.from_dict({"memory_treshold": 1})


class Counting:
    """A user module: plain direct fetch, scoring high for files named *.special."""

    name = "counting"

    def __init__(self) -> None:
        self.fetched: list[str] = []

    def score(self, context: TransferContext) -> float:
        return 0.9 if context.file.path.endswith(".special") else 0.0

    def fetch(self, file: FileInfo, dest: Path, context: TransferContext) -> dict[str, Any]:
        self.fetched.append(file.path)
        return BUILTIN["direct"].fetch(file, dest, context)


def test_user_module_with_higher_score_wins(client: tomus.Client, tmp_path: Path) -> None:
    m = Counting()
    workflow.register_module(m)
    try:
        c = choose(ctx(100, 1), SelectionConfig())
        assert c.module.name == "memory"
        special = TransferContext(file=FileInfo("/a.special", 100, True, ("h",)))
        c = choose(special, SelectionConfig())
        assert c.module is m and "user module" in c.reason
        # Below the threshold it loses to the default.
        assert choose(special, SelectionConfig(score_threshold=0.95)).module.name == "memory"
        # And it moves the bytes when chosen.
        (tmp_path / "s").write_bytes(b"special bytes")
        workflow.register(client, tmp_path / "s", "/t/sel/a.special")
        special.client = client
        special.file = FileInfo("/t/sel/a.special", 13, True, ())
        choose(special, SelectionConfig()).module.fetch(special.file, tmp_path / "d", special)
        assert (tmp_path / "d").read_bytes() == b"special bytes"
        assert m.fetched == ["/t/sel/a.special"]
    finally:
        workflow.unregister_module("counting")
