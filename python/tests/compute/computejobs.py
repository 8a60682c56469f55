"""Task functions of the compute tests, in a module of their own so Dask worker processes (and
a driver run as a subprocess) import them by name."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from tomus.compute import GeneralizedReduction


def listed(i: int) -> list[int]:
    return [i]


def concat(parts: list[list[Any]]) -> list[Any]:
    return sorted(x for p in parts for x in p)


def padded(i: int) -> list[tuple[int, bytes]]:
    """A map result too big to travel inline (over ``joblog.INLINE_BYTES``)."""
    return [(i, bytes(70_000))]


class Slow:
    """A mapper that sleeps ``delays[i]`` seconds, first leaving a marker ``<dir>/<kind>-<i>-<pid>``
    so a test can see which worker process runs which task, and kill it while it sleeps."""

    def __init__(self, delays: list[float], marks: str | None = None) -> None:
        self.delays = delays
        self.marks = marks

    def __call__(self, i: int) -> list[int]:
        if self.marks:
            Path(self.marks, f"map-{i}-{os.getpid()}").touch()
        time.sleep(self.delays[i])
        return [i]


class SlowConcat:
    """``concat`` that marks and sleeps like Slow (to kill a worker in the middle of a reduce)."""

    def __init__(self, delay: float, marks: str) -> None:
        self.delay = delay
        self.marks = marks

    def __call__(self, parts: list[list[int]]) -> list[int]:
        out = concat(parts)
        Path(self.marks, f"reduce-{out[0]}-{len(out)}-{os.getpid()}").touch()
        time.sleep(self.delay)
        return out


class FailOnce:
    """``concat`` that raises the first time it sees a given input (a flag file records it)."""

    def __init__(self, marks: str) -> None:
        self.marks = marks

    def __call__(self, parts: list[list[int]]) -> list[int]:
        out = concat(parts)
        flag = Path(self.marks, f"failed-{out[0]}-{len(out)}")
        if not flag.exists():
            flag.touch()
            raise RuntimeError("reducer failure injected by the test")
        return out


def resume_driver(scheduler: str, addr: str, job_id: int, n: int, delay: float) -> Any:
    """The driver of the resume test, run in a subprocess that the test kills."""
    from distributed import Client

    from tomus.compute import IterativeReduce

    with Client(scheduler) as c:
        return IterativeReduce(Slow([delay] * n), concat, ratio=3).run(
            range(n), client=c, addr=addr, job_id=job_id
        )


class SlowWordPairs:
    """A per-split MapReduce mapper (word, 1 per occurrence) that marks and sleeps first."""

    def __init__(self, delay: float, marks: str) -> None:
        self.delay = delay
        self.marks = marks

    def __call__(self, text: bytes) -> list[tuple[bytes, int]]:
        from tomus.compute.apps.text import words

        Path(self.marks, f"map-{len(text)}-{os.getpid()}").touch()
        time.sleep(self.delay)
        return [(w, 1) for w in words(text)]


def line_pairs(line: bytes) -> list[tuple[bytes, int]]:
    from tomus.compute.apps.text import words

    return [(w, 1) for w in words(line)]


def add(_key: Any, values: list[int]) -> int:
    return sum(values)


def first_letter(key: bytes) -> int:
    return key[0]


class WeightedSum(GeneralizedReduction):
    """The sum of every record times ``weights`` (one weight per column): a reduction that
    carries ``pad`` bytes more, to be stored rather than sent with each task when big."""

    def __init__(self, weights: np.ndarray, pad: int) -> None:
        super().__init__(chunks_per_task=2)
        self.weights = weights
        self.pad = bytes(pad)

    def init(self) -> float:
        return 0.0

    def local(self, obj: float, chunk: np.ndarray) -> float:
        return obj + float((chunk * self.weights).sum())

    def merge(self, a: float, b: float) -> float:
        return a + b
