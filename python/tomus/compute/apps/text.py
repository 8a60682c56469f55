"""Text applications: WordCount, MostFrequentWords (top-k) and grep over text blobs.

WordCount is a plain MapReduce (the per-key output is the answer). MostFrequentWords needs one
final answer, so it runs on IterativeReduce: each map counts the words of a split, reducers add
counters R at a time, and the top k are taken from the one counter that covers every split. The
classic shape for comparison is ``most_frequent_words_classic``: MapReduce into R partitions,
then one aggregator merging the partitions' top k. grep counts the lines matching a pattern.

Words are runs of ASCII letters, digits and underscores, lowercased; the single-process
``reference_*`` functions here define the expected answers for tests and benchmarks.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tomus.compute.engine import Session, TaskRecord, tomus_client, use_session
from tomus.compute.iterative import IterativeReduce, IterativeResult
from tomus.compute.mapreduce import MapReduce, MapReduceResult
from tomus.compute.splits import Input, Split, iter_lines, plan_splits, read_text

if TYPE_CHECKING:
    from distributed import Client as DaskClient

__all__ = [
    "grep",
    "most_frequent_words",
    "most_frequent_words_classic",
    "reference_grep",
    "reference_top_words",
    "reference_word_count",
    "top_k",
    "word_count",
    "words",
]

_WORD = re.compile(rb"[a-z0-9_]+")

Inputs = Input | Iterable[Input]  # blob ids, Blobs, Splits or namespace paths


def words(text: bytes) -> list[bytes]:
    return _WORD.findall(text.lower())


def top_k(counts: Counter[bytes] | Iterable[tuple[bytes, int]], k: int) -> list[tuple[str, int]]:
    """The k most frequent words, ties broken alphabetically (so answers are comparable)."""
    items = counts.items() if isinstance(counts, Counter) else counts
    best = heapq.nsmallest(k, items, key=lambda wc: (-wc[1], wc[0]))
    return [(w.decode(), c) for w, c in best]


# --- single-process references ----------------------------------------------------------------


def reference_word_count(text: bytes) -> Counter[str]:
    return Counter(w.decode() for w in words(text))


def reference_top_words(text: bytes, k: int) -> list[tuple[str, int]]:
    return top_k(Counter(words(text)), k)


def reference_grep(text: bytes, pattern: bytes) -> int:
    rx = re.compile(pattern)
    return sum(1 for line in iter_lines(text) if rx.search(line))


# --- WordCount (MapReduce) ----------------------------------------------------------------------


def _count_pairs(text: bytes) -> Iterable[tuple[bytes, int]]:
    return Counter(words(text)).items()


def _add(_key: bytes, values: list[int]) -> int:
    return sum(values)


def word_count(
    inputs: Inputs,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    partitions: int = 2,
    split_size: int | None = None,
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
    output: str | None = None,
) -> MapReduceResult:
    """Word counts of the text blobs or files; ``.value`` is a ``Counter`` of str.
    ``output``: a namespace directory for the ``part-NNNNN`` files (``word\tcount`` lines)."""
    job = MapReduce(_count_pairs, _add, combiner=_add, partitions=partitions, per="split")
    with use_session(session, client, addr) as s:
        res = job.run_in(s, inputs, split_size=split_size, on_task=on_task, output=output)
        res.value = Counter({k.decode(): v for k, v in res.items(s.tomus)})
    return res


# --- MostFrequentWords (IterativeReduce, and the classic shape) -------------------------------


def _count_split(split: Split) -> Counter[bytes]:
    return Counter(words(read_text(tomus_client(), split)))


def _merge_counts(parts: list[Counter[bytes]]) -> Counter[bytes]:
    total = parts[0]
    for p in parts[1:]:
        total.update(p)
    return total


@dataclass(frozen=True)
class _TopK:
    k: int

    def __call__(self, counts: Counter[bytes]) -> list[tuple[str, int]]:
        return top_k(counts, self.k)


def most_frequent_words(
    inputs: Inputs,
    k: int = 10,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    ratio: int = 5,
    shape: str = "tree",
    split_size: int | None = None,
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> IterativeResult:
    """The k most frequent words; ``.value`` is ``[(word, count), ...]``."""
    job = IterativeReduce(_count_split, _merge_counts, ratio=ratio, finalize=_TopK(k))
    with use_session(session, client, addr) as s:
        splits = plan_splits(s.tomus, inputs, split_size)
        return job.run_in(s, splits, shape=shape, on_task=on_task)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _MergeTopK:
    k: int

    def __call__(self, outputs: list[list[tuple[bytes, int]]]) -> list[tuple[str, int]]:
        # Each partition holds distinct words, so the global top k is among the partitions' top k.
        return top_k([wc for out in outputs for wc in top_k_bytes(out, self.k)], self.k)


def top_k_bytes(items: Iterable[tuple[bytes, int]], k: int) -> list[tuple[bytes, int]]:
    return heapq.nsmallest(k, items, key=lambda wc: (-wc[1], wc[0]))


def most_frequent_words_classic(
    inputs: Inputs,
    k: int = 10,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    partitions: int = 2,
    split_size: int | None = None,
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
    output: str | None = None,
) -> MapReduceResult:
    """MostFrequentWords as classic MapReduce plus one final aggregator; ``.value`` as above
    (``output``: a directory for the per-word counts, as in ``word_count``)."""
    job = MapReduce(
        _count_pairs,
        _add,
        combiner=_add,
        partitions=partitions,
        per="split",
        aggregate=_MergeTopK(k),
    )
    with use_session(session, client, addr) as s:
        return job.run_in(s, inputs, split_size=split_size, on_task=on_task, output=output)


# --- grep (IterativeReduce) -------------------------------------------------------------------


@dataclass(frozen=True)
class _CountMatches:
    pattern: bytes

    def __call__(self, split: Split) -> int:
        rx = re.compile(self.pattern)
        text = read_text(tomus_client(), split)
        return sum(1 for line in iter_lines(text) if rx.search(line))


def _sum(parts: list[int]) -> int:
    return sum(parts)


def grep(
    inputs: Inputs,
    pattern: bytes | str,
    client: DaskClient | None = None,
    addr: str | None = None,
    *,
    ratio: int = 4,
    split_size: int | None = None,
    session: Session | None = None,
    on_task: Callable[[TaskRecord], None] | None = None,
) -> IterativeResult:
    """The number of lines matching the regular expression; ``.value`` is an int."""
    pat = pattern.encode() if isinstance(pattern, str) else pattern
    job = IterativeReduce(_CountMatches(pat), _sum, ratio=ratio)
    with use_session(session, client, addr) as s:
        splits = plan_splits(s.tomus, inputs, split_size)
        return job.run_in(s, splits, on_task=on_task)
