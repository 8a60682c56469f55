"""The AFM paper's synthetic benchmark workflow (its Figure 4): broadcast, then a reduction
tree whose layers pass files along a pipeline.

Shape, for ``width`` first-layer jobs (the paper's 20, 38 jobs in all)::

    stage-in:  stage0 -> a.bin, stage1 -> b.bin                 (2 jobs)
    layer 1:   L1-j reads a.bin and b.bin (a broadcast)         (width jobs)
    layer k:   Lk-j reads 2 outputs of layer k-1 (pipeline)     (halving while even and > 2)
    last:      final reads what is left and writes result.bin   (1 job)

With width 20: 2 + 20 + 10 + 5 + 1 = 38 jobs. Every file holds ``size`` bytes of unsigned
64-bit numbers below the prime ``P``; a job "applies several mathematical operations" as the
paper says (products and sums modulo ``P``, element by element), so every file of the tree
has the size of the stage-in files and the answer depends on every byte moved.

:func:`workflow` builds it (tasks are Python callables, run on the workers);
:func:`reference` runs the same jobs in order in one process and one directory; the
workflow's ``result.bin`` must equal the reference's byte for byte.
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tomus.workflow.dag import Workflow

__all__ = ["P", "answer", "reference", "workflow"]

P = (1 << 31) - 1
"""Numbers are kept below this prime, so products fit in 64 bits."""
_CHUNK = 1 << 20
"""Numbers handled at a time (8 MiB per array): memory stays flat whatever the file size."""


def _numbers(path: Path) -> int:
    return path.stat().st_size // 8


def _chunks(inputs: list[Path], out: Path, fn: Any) -> None:
    """Applies ``fn(list of input chunks, offset) -> output chunk`` over aligned chunks."""
    n = _numbers(inputs[0])
    if any(_numbers(p) != n for p in inputs):
        raise ValueError(f"inputs of different sizes: {[str(p) for p in inputs]}")
    with open(out, "wb") as f:
        for start in range(0, n, _CHUNK):
            count = min(_CHUNK, n - start)
            parts = [np.fromfile(p, np.uint64, count, offset=start * 8) for p in inputs]
            fn(parts, start).astype(np.uint64).tofile(f)


def stage_in(task_dir: Path, *, name: str, size: int, seed: int) -> None:
    """Writes ``size`` bytes (rounded down to whole numbers) of numbers below ``P``."""
    n = max(1, size // 8)
    rng = np.random.default_rng(seed)
    with open(task_dir / name, "wb") as f:
        for start in range(0, n, _CHUNK):
            rng.integers(0, P, min(_CHUNK, n - start), dtype=np.uint64).tofile(f)


def first_layer(task_dir: Path, *, j: int, out: str) -> None:
    """``(a * (j+1) + b * b + j) mod P``: both stage-in files, read by every such job."""

    def op(parts: list[np.ndarray], _start: int) -> np.ndarray:
        a, b = parts
        out: np.ndarray = (a * np.uint64(j + 1) % P + b * b % P + np.uint64(j)) % P
        return out

    _chunks([task_dir / "a.bin", task_dir / "b.bin"], task_dir / out, op)


def combine(task_dir: Path, *, inputs: list[str], out: str) -> None:
    """``sum_i (i+1) * x_i^2 mod P``: a reduction step (order matters, so a file passed to
    the wrong job changes the answer)."""

    def op(parts: list[np.ndarray], _start: int) -> np.ndarray:
        acc = np.zeros(len(parts[0]), np.uint64)
        for i, x in enumerate(parts):
            acc = (acc + (x * x % P) * np.uint64(i + 1)) % P
        return acc

    _chunks([task_dir / i for i in inputs], task_dir / out, op)


def workflow(size: int, *, width: int = 20, dir: str = "/wf/synthetic", seed: int = 1) -> Workflow:
    """The synthetic workflow with stage-in files of ``size`` bytes and ``width`` jobs on the
    tree's first layer."""
    if width < 1:
        raise ValueError("width must be at least 1")
    wf = Workflow("synthetic", dir)
    for i, name in enumerate(("a.bin", "b.bin")):
        wf.task(
            f"stage{i}",
            fn=functools.partial(stage_in, name=name, size=size, seed=seed + i),
            outputs=[name],
        )
    layer = []
    for j in range(width):
        out = f"l1-{j}.bin"
        wf.task(
            f"L1-{j}",
            fn=functools.partial(first_layer, j=j, out=out),
            inputs=["a.bin", "b.bin"],
            outputs=[out],
        )
        layer.append(out)
    level = 2
    while len(layer) > 2 and len(layer) % 2 == 0:
        nxt = []
        for j in range(len(layer) // 2):
            ins, out = layer[2 * j : 2 * j + 2], f"l{level}-{j}.bin"
            wf.task(
                f"L{level}-{j}",
                fn=functools.partial(combine, inputs=ins, out=out),
                inputs=ins,
                outputs=[out],
            )
            nxt.append(out)
        layer, level = nxt, level + 1
    wf.task(
        "final",
        fn=functools.partial(combine, inputs=layer, out="result.bin"),
        inputs=layer,
        outputs=["result.bin"],
    )
    return wf


def answer(path: Path) -> dict[str, Any]:
    """What the result file says: its size, SHA-256 and the sum of its numbers mod ``P``."""
    h = hashlib.sha256()
    total = 0
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
            total = (total + int(np.frombuffer(block, np.uint64).sum() % P)) % P
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest(), "sum_mod_p": total}


def reference(wf: Workflow, work_dir: str | Path | None = None) -> dict[str, Any]:
    """Runs every job of ``wf`` in order, in one process and one directory, and returns the
    :func:`answer` of its last output: what the distributed run must produce."""
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        for t in wf.validate():
            assert t.fn is not None, "the synthetic workflow's jobs are Python callables"
            t.fn(Path(tmp))
        return answer(Path(tmp) / wf.tasks[-1].outputs[0])
