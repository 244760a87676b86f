"""memory.gather reads each lane's aligned vector as one row (take): the same elements, in
the same order, as element-wise indexing of the buffer, for every element size and vector width."""

from __future__ import annotations

import bisect

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


def _per_lane_offsets(g, addrs, nbytes):
    """The per-lane rule check_lanes' one-allocation shortcut must agree with: each lane inside
    the allocation whose start is the last at or below it; None when one is not."""
    out = []
    for a in addrs.tolist():
        i = bisect.bisect_right(g.starts, a) - 1
        if i < 0 or a + nbytes > g.ends[i]:
            return None
        out.append(a - mem.GLOBAL_BASE)
    return out


def test_check_lanes_shortcut_agrees_with_the_per_lane_rule():
    g = mem.GlobalMemory()
    bases = [g.alloc(n, f"b{k}") for k, n in enumerate((256, 4096, 100, 64))]
    rng = np.random.default_rng(7)
    cases = [bases[1] + np.arange(32) * 8,                     # one allocation
             np.r_[bases[0] + np.arange(16) * 8, bases[1] + np.arange(16) * 8],   # two, no gap lane
             bases[1] + np.arange(32) * 128 + 8,               # the last lanes past the end
             np.full(32, bases[2] + 96),                       # 96 + 8 > 100: past a short buffer
             np.full(32, bases[0] - 8)]                        # below every allocation
    cases += [rng.choice(bases) + rng.integers(0, 300, 32) // 8 * 8 for _ in range(200)]
    for addrs in cases:
        addrs = np.asarray(addrs, dtype=np.int64)
        want = _per_lane_offsets(g, addrs, 8)
        if want is None:
            with pytest.raises(Exception, match="outside every allocation"):
                g.check_lanes(addrs, 8, "load")
        else:
            got = g.check_lanes(addrs, 8, "load")
            assert got.dtype == np.int64 and got.tolist() == want
            assert g.check_lanes(addrs.astype(np.uint64), 8, "load").tolist() == want
