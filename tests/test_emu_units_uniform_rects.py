"""tmem_hb.UniformRects: the value it reports for a region is the one every cell of the
region holds, after any sequence of rectangular fills (random fills checked against a
plain array)."""

from __future__ import annotations

import numpy as np

from porter.emu.tmem_hb import UniformRects


def _rect(rng, a, b):
    a0, b0 = int(rng.integers(0, a)), int(rng.integers(0, b))
    return a0, int(rng.integers(a0 + 1, a + 1)), b0, int(rng.integers(b0 + 1, b + 1))


def test_reported_values_match_the_array_after_random_fills():
    rng = np.random.default_rng(7)
    arr = np.full((16, 12), -1, dtype=np.int64)
    u = UniformRects(16, 12, -1)
    found = 0
    for step in range(3000):
        if rng.random() < 0.4:
            u.fill(arr, *_rect(rng, 16, 12), int(rng.integers(0, 4)))
        r = _rect(rng, 16, 12)
        v = u.value(*r)
        if v is not None:
            found += 1
            block = arr[r[0]:r[1], r[2]:r[3]]
            assert (block == v).all(), (step, r, v)
    assert found > 150          # the cache does answer (else it only costs)


def test_a_fill_over_part_of_a_rectangle_forgets_it():
    arr = np.zeros((8, 8), dtype=np.int64)
    u = UniformRects(8, 8, 0)
    assert u.value(0, 8, 0, 8) == 0
    u.fill(arr, 2, 4, 2, 4, 5)
    assert u.value(0, 8, 0, 8) is None          # no longer one value
    assert u.value(2, 4, 3, 4) == 5
    assert u.value(-1, 4, 0, 4) is None          # not a rectangle of the array
    u.fill(arr, -1, 8, 0, 8, 3)                  # (a wrapped slice: everything is forgotten)
    assert u.value(2, 4, 2, 4) is None
