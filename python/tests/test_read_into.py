"""read_into: in-place reads into numpy arrays and other writable buffers."""

from __future__ import annotations

import random

import numpy as np
import pytest
from blob_support import CHUNK

import tomus


def test_read_into_fills_the_same_numpy_array(blob: tomus.Blob) -> None:
    values = np.arange(3 * CHUNK // 8 + 5, dtype=np.float64)
    v = blob.write(0, values)
    out = np.zeros_like(values)
    address = out.__array_interface__["data"][0]
    assert blob.read_into(out) == v
    # Filled in place: same object, same memory, right contents.
    assert out.__array_interface__["data"][0] == address
    np.testing.assert_array_equal(out, values)


def test_read_into_partial_and_views(blob: tomus.Blob) -> None:
    data = random.Random(1).randbytes(2 * CHUNK + 10)
    v1 = blob.write(0, data)
    blob.write(0, bytes(len(data)))  # version 2 zeroes it
    whole = np.zeros(len(data) + 20, dtype=np.uint8)
    window = whole[10 : 10 + CHUNK]  # a contiguous view into a larger array
    assert blob.read_into(window, CHUNK - 3, version=v1) == v1
    assert window.tobytes() == data[CHUNK - 3 : 2 * CHUNK - 3]
    assert not whole[:10].any() and not whole[10 + CHUNK :].any()
    ba = bytearray(b"-" * 20)
    assert blob.read_into(memoryview(ba)[5:15], 1, version=v1) == v1
    assert ba == b"-" * 5 + data[1:11] + b"-" * 5
    assert blob.read_into(bytearray(0), 0) == 2  # empty buffer: nothing to read
    assert blob.read_into(np.empty((4, 4), dtype=np.uint8), 3, version=v1) == v1


def test_read_into_rejects_bad_buffers(blob: tomus.Blob) -> None:
    blob.write(0, bytes(100))
    with pytest.raises(TypeError, match="writable"):
        blob.read_into(b"immutable")
    frozen = np.zeros(10, dtype=np.uint8)
    frozen.setflags(write=False)
    with pytest.raises(TypeError, match="writable"):
        blob.read_into(frozen)
    with pytest.raises(ValueError, match="C-contiguous"):
        blob.read_into(np.zeros(20, dtype=np.uint8)[::2])
    with pytest.raises(ValueError, match="C-contiguous"):
        blob.read_into(np.zeros((4, 4), dtype=np.uint8, order="F"))
    with pytest.raises(TypeError, match="buffer protocol"):
        blob.read_into("text")  # type: ignore[arg-type]
    with pytest.raises(tomus.OutOfRange):
        blob.read_into(bytearray(101))
    with pytest.raises(ValueError, match="offset"):
        blob.read_into(bytearray(1), -1)
