"""The README's Python examples, run as written (each ``python`` block, in order, in a fresh
namespace): a README that promises what the code does not do fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(readme: Path) -> list[str]:
    return BLOCK.findall(readme.read_text(encoding="utf-8"))


def run(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


def test_top_readme_example_runs_as_written() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) == 1
    ns = run(blocks[0])
    # pyarrow read the file pandas wrote through tomus://, given the file system.
    assert ns["table"].column("x").to_pylist() == [1, 2]
    assert ns["out"][-1] == (1 << 20) - 1


@pytest.mark.parametrize("readme", ["python/README.md"])
def test_package_readme_examples_run_as_written(readme: str) -> None:
    for block in python_blocks(ROOT / readme):
        run(block)
