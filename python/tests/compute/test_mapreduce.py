"""MapReduce and the text applications against single-process references."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from computehelpers import Killer, attempts
from computejobs import SlowWordPairs, add, first_letter, line_pairs
from computetext import make_text, put_text

import tomus
from tomus.compute import frames
from tomus.compute.apps.text import (
    grep,
    most_frequent_words,
    most_frequent_words_classic,
    reference_grep,
    reference_top_words,
    reference_word_count,
    word_count,
)
from tomus.compute.engine import execute
from tomus.compute.mapreduce import MapReduce, _reduce_body, _Spec
from tomus.compute.storage import get_object


@pytest.fixture(scope="module")
def corpus(tc: tomus.Client) -> tuple[list[int], bytes]:
    texts = [make_text(seed, 700) for seed in range(3)]
    return [put_text(tc, t) for t in texts], b"".join(texts)


def test_word_count_equals_counter(dask: Any, addr: str, corpus: tuple[list[int], bytes]) -> None:
    blobs, text = corpus
    res = word_count(blobs, dask, addr, partitions=3, split_size=8192)
    assert res.value == reference_word_count(text)
    assert len(res.outputs) == 3
    assert sum(1 for t in res.timeline if t.kind == "map") > 6  # several splits per blob


def test_registered_workflow_outputs_are_inputs_too(
    dask: Any, addr: str, tc: tomus.Client, tmp_path: Path
) -> None:
    """A directory of a workflow's outputs, registered in place, next to an ordinary file:
    word count reads the registered ones from their holders, split across lines."""
    from tomus import workflow

    texts = [make_text(seed, 400) for seed in (10, 11, 12)]
    for i, t in enumerate(texts[:2]):
        (tmp_path / f"out{i}.txt").write_bytes(t)
        workflow.register(tc, tmp_path / f"out{i}.txt", f"/wfin/out{i}.txt")
    tc.fs().pipe("/wfin/plain.txt", texts[2])
    res = word_count("tomus://wfin/", dask, addr, partitions=2, split_size=4096)
    assert res.value == reference_word_count(b"".join(texts))
    assert sum(1 for t in res.timeline if t.kind == "map") > 6  # several splits per file


def test_per_record_mapper_without_combiner(
    dask: Any, addr: str, corpus: tuple[list[int], bytes]
) -> None:
    blobs, _ = corpus
    res = MapReduce(line_pairs, add, partitions=2, partition=first_letter).run(
        blobs[:1], dask, addr, split_size=4096
    )
    first = make_text(0, 700)
    expected = reference_word_count(first)
    assert {k.decode(): v for k, v in res.items()} == expected
    # The custom partitioner decided where keys went; each output is sorted by key.
    for p, ref in enumerate(res.outputs):
        keys = [k for k, _ in get_object(tomus.connect(addr), ref)]
        assert keys == sorted(keys)
        assert all(k[0] % 2 == p for k in keys)


def test_mappers_share_one_appended_blob_per_partition(
    dask: Any, addr: str, tc: tomus.Client, corpus: tuple[list[int], bytes]
) -> None:
    blobs, _ = corpus
    res = word_count(blobs, dask, addr, partitions=2, split_size=8192)
    maps = sum(1 for t in res.timeline if t.kind == "map")
    tags = set()
    for blob_id in res.partition_blobs:
        blob = tc.open_blob(blob_id)
        found = [f.tag for f in frames.iter_frames(blob.read())]
        assert len(found) == len(set(found))  # one frame per map task per partition
        assert blob.latest() == len(found)  # each frame was its own append
        tags |= set(found)
    assert tags == set(range(maps))


def test_reducer_keeps_only_the_winning_attempts(addr: str, tc: tomus.Client) -> None:
    blob = tc.create_blob(chunk_size=4096)
    blob.append(frames.encode(pickle.dumps([(b"a", [1])]), tag=0, attempt=11))  # lost attempt
    blob.append(frames.encode(pickle.dumps([(b"a", [10]), (b"b", [1])]), tag=1, attempt=5))
    v, _ = blob.append(frames.encode(pickle.dumps([(b"a", [100])]), tag=0, attempt=12))
    blob.append(frames.encode(pickle.dumps([(b"c", [1000])]), tag=2, attempt=1))  # after v
    spec = _Spec(line_pairs, add, None, 1, "record", first_letter)
    ref, _ = execute("reduce", "p0", addr, (), _reduce_body, spec, blob.id, v, {0: 12, 1: 5})
    assert get_object(tc, ref) == [(b"a", 110), (b"b", 1)]


def test_most_frequent_words_tree_and_classic_equal_reference(
    dask: Any, addr: str, corpus: tuple[list[int], bytes]
) -> None:
    blobs, text = corpus
    expected = reference_top_words(text, 7)
    tree = most_frequent_words(blobs, 7, dask, addr, ratio=3, split_size=4096)
    assert tree.value == expected
    assert tree.reduce_factor == tree.map_tasks > 3
    classic = most_frequent_words_classic(blobs, 7, dask, addr, partitions=3, split_size=4096)
    assert classic.value == expected
    assert [t.kind for t in classic.timeline][-1] == "aggregate"


def test_grep_counts_matching_lines(dask: Any, addr: str, corpus: tuple[list[int], bytes]) -> None:
    blobs, text = corpus
    for pattern in [rb"\berror\b", rb"(?i)\berror\b", rb"^$", rb"alpha.*omega"]:
        res = grep(blobs, pattern, dask, addr, split_size=16384)
        assert res.value == reference_grep(text, pattern), pattern
    assert reference_grep(text, rb"(?i)\berror\b") > 0


@pytest.mark.slow
def test_killing_a_worker_mid_map_still_gives_the_right_answer(
    dask_to_kill: Any, addr: str, tmp_path: Path, corpus: tuple[list[int], bytes]
) -> None:
    blobs, _ = corpus
    text = make_text(0, 700)
    job = MapReduce(SlowWordPairs(0.3, str(tmp_path)), add, combiner=add, partitions=2, per="split")
    killer = Killer(dask_to_kill, tmp_path, "map-")
    killer.start()
    res = job.run(blobs[:1], dask_to_kill, addr, split_size=16384)
    killer.join()
    assert killer.killed is not None, "no worker was killed: the test did not exercise a fault"
    task, pid = killer.killed
    assert {k.decode(): v for k, v in res.items()} == reference_word_count(text)
    assert attempts(tmp_path, task) - {pid}, "the killed map was not retried"
