"""memory.gather reads each lane's aligned vector as one row (take): the same elements, in
the same order, as element-wise indexing of the buffer, for every element size and vector width."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import memory as mem


def _reference(buf, offs, nbytes, count):
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.dtype("V16")}[nbytes]
    view = buf[: buf.size - buf.size % nbytes].view(dt)
    return view[(offs // nbytes)[:, None] + np.arange(count)]


@pytest.mark.parametrize("nbytes", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("count", [1, 2, 4])
def test_gather_matches_elementwise(nbytes, count):
    rng = np.random.default_rng(nbytes * 10 + count)
    buf = rng.integers(0, 256, size=4099, dtype=np.uint8)       # a size no vector divides
    width = nbytes * count
    lanes = rng.integers(0, buf.size // width, size=32)
    offs = (lanes * width).astype(np.int64)
    got = mem.gather(buf, offs, nbytes, count)
    want = _reference(buf, offs, nbytes, count)
    assert got.shape == (32, count) and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_gather_of_selected_lanes_and_repeats():
    buf = np.arange(256, dtype=np.uint8)
    offs = np.array([16, 16, 0, 240], dtype=np.int64)          # a repeated lane, the last row
    got = mem.gather(buf, offs, 4, 4)
    assert got.shape == (4, 4)
    assert got.tobytes() == _reference(buf, offs, 4, 4).tobytes()
