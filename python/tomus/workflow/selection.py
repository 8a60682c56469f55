"""Adaptive choice of the transfer module, per transfer (the AFM paper's Algorithms 1 and 2).

Algorithm 1: every user module scores the context (size, holders, pending readers, node
load); the best score wins if it reaches ``score_threshold``. Algorithm 2, the default
module, otherwise: a file that is not registered comes from the ``store``; a registered one
below ``memory_threshold`` bytes from ``memory``; one whose holders and pending readers
together pass ``replica_threshold`` by ``swarm``; any other by ``direct``. Each decision
carries its reason, recorded in the workflow's report.

Configuration (TOML or YAML file, or a dict), every key optional::

    memory_threshold = "15MiB"   # or bytes
    replica_threshold = 3        # holders + pending readers * reader_weight
    reader_weight = 0.5
    score_threshold = 0.5
    module = "direct"            # optional: every registered file by this one module
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tomus.workflow.modules import BUILTIN, TransferContext, TransferModule, user_modules

__all__ = ["Choice", "SelectionConfig", "choose", "parse_size"]

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "M": 1 << 20,
    "G": 1 << 30,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
    "KB": 1000,
    "MB": 10**6,
}


def parse_size(value: int | str) -> int:
    """``15MiB``, ``200KB`` or a number of bytes."""
    if isinstance(value, int):
        return value
    s = value.strip().upper()
    digits = s.rstrip("KMGIB")
    unit = s[len(digits) :]
    try:
        return int(float(digits) * _UNITS[unit])
    except (KeyError, ValueError):
        raise ValueError(
            f"not a size: {value!r} (bytes, or a number with K, M, G, KiB, MiB, GiB, KB, MB)"
        ) from None


@dataclass(frozen=True)
class SelectionConfig:
    memory_threshold: int = 15 << 20
    replica_threshold: float = 3.0
    reader_weight: float = 0.5
    score_threshold: float = 0.5
    module: str = ""
    """A module name: no adaptive choice, every registered file moves by it (the fixed
    strategies the benchmarks compare adaptive selection with)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SelectionConfig:
        known = {
            "memory_threshold",
            "replica_threshold",
            "reader_weight",
            "score_threshold",
            "module",
        }
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown transfer settings: {sorted(unknown)}")
        return cls(
            memory_threshold=parse_size(d.get("memory_threshold", 15 << 20)),
            replica_threshold=float(d.get("replica_threshold", 3.0)),
            reader_weight=float(d.get("reader_weight", 0.5)),
            score_threshold=float(d.get("score_threshold", 0.5)),
            module=str(d.get("module", "")),
        )

    @classmethod
    def load(cls, path: str | Path) -> SelectionConfig:
        """From a TOML (``.toml``), YAML (``.yaml``/``.yml``) or JSON file; a ``transfers``
        table/section is used when there is one."""
        p = Path(path)
        text = p.read_text()
        data: Any
        if p.suffix == ".toml":
            try:  # the standard library's from Python 3.11 on
                tomllib = importlib.import_module("tomllib")
            except ImportError as e:
                raise ValueError(f"{p}: TOML settings need Python 3.11 (use YAML)") from e
            data = tomllib.loads(text)
        elif p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a table of settings")
        section = data.get("transfers", data)
        return cls.from_dict(dict(section))


@dataclass(frozen=True)
class Choice:
    module: TransferModule
    reason: str


def choose(context: TransferContext, config: SelectionConfig) -> Choice:
    """Algorithm 1 over the user modules, then Algorithm 2 (or the configured module)."""
    if config.module and context.file.registered:
        fixed = BUILTIN.get(config.module) or next(
            (m for m in user_modules() if m.name == config.module), None
        )
        if fixed is None:
            raise ValueError(f"no transfer module named {config.module!r}")
        return Choice(fixed, "fixed by the configuration")
    best: tuple[float, TransferModule] | None = None
    for module in user_modules():
        s = float(module.score(context))
        if best is None or s > best[0]:
            best = (s, module)
    if best is not None and best[0] >= config.score_threshold:
        return Choice(best[1], f"user module scored {best[0]:.2f} >= {config.score_threshold}")
    f = context.file
    if not f.registered:
        return Choice(BUILTIN["store"], "not registered: an ordinary file of the store")
    if f.size < config.memory_threshold:
        return Choice(BUILTIN["memory"], f"{f.size} B < memory threshold {config.memory_threshold}")
    replicas = len(f.holders) + context.pending_readers * config.reader_weight
    if replicas >= config.replica_threshold:
        return Choice(
            BUILTIN["swarm"],
            f"{len(f.holders)} holders + {context.pending_readers} pending readers "
            f"x {config.reader_weight} >= {config.replica_threshold}",
        )
    return Choice(BUILTIN["direct"], f"{len(f.holders)} holder(s), large file: one stream")
