"""Random writes and appends against a bytearray model (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import tomus

CS = 4096  # the smallest chunk size: many chunk boundaries in little data

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 4 * CS), st.integers(1, 3 * CS)),
        st.tuples(st.just("append"), st.just(0), st.integers(1, 3 * CS)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=30, deadline=None)
@given(ops=ops, seed=st.integers(0, 255))
def test_random_writes_match_model(
    client: tomus.Client, ops: list[tuple[str, int, int]], seed: int
) -> None:
    blob = client.create_blob(chunk_size=CS)
    model = bytearray()
    snapshots = []
    for i, (op, offset, size) in enumerate(ops):
        data = bytes((seed + i + j) % 256 for j in range(size))
        if op == "append":
            version, offset = blob.append(data)
            assert offset == len(model)
        else:
            version = blob.write(offset, data)
        model.extend(bytes(max(0, offset + size - len(model))))
        model[offset : offset + size] = data
        snapshots.append((version, bytes(model)))
    assert blob.read() == model
    for version, snap in snapshots:
        assert blob.read(version=version) == snap
        assert blob.size(version) == len(snap)
