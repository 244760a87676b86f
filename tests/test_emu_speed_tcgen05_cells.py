"""tmem_hb.Cells (the TMEM shadows' grids kept as rectangles of one record, arrays made only
when needed): after any sequence of rectangular fills, every record ``value`` reports is the
one each cell of the region holds, and the arrays (made at any point) equal a plain grid
filled the straightforward way; the same for the records it lists per region."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.tmem_hb import Cells

FIELDS = ((np.int64, 0), (np.int32, -1))
A, B = 16, 12


def _rect(rng, a, b, beyond: bool = False):
    a0, b0 = int(rng.integers(0, a)), int(rng.integers(0, b))
    hi_a, hi_b = (a + 3, b + 3) if beyond else (a, b)
    return a0, int(rng.integers(a0 + 1, hi_a + 1)), b0, int(rng.integers(b0 + 1, hi_b + 1))


def _plain():
    return [np.full((A, B), v, dtype=dt) for dt, v in FIELDS]


def _check_value(c: Cells, plain, r) -> bool:
    v = c.value(*r)
    if v is None:
        return False
    for arr, x in zip(plain, v):
        block = arr[r[0]:r[1], r[2]:r[3]]
        assert block.size and (block == x).all(), (r, v)
    return True


def _histories(seed: int, steps: int, make_at: int | None, values: int = 3):
    """Random fills (few records, so regions often hold one) on a Cells and a plain grid; the
    arrays made at step ``make_at`` (None: only when the Cells itself needs them)."""
    rng = np.random.default_rng(seed)
    c, plain = Cells(A, B, FIELDS), _plain()
    for step in range(steps):
        if make_at is not None and step == make_at:
            c.arrays()
        if rng.random() < 0.5:
            r = _rect(rng, A, B, beyond=rng.random() < 0.1)
            rec = (int(rng.integers(0, values)), int(rng.integers(-1, 1)))
            c.fill(*r, rec)
            for arr, x in zip(plain, rec):
                arr[r[0]:r[1], r[2]:r[3]] = x
        yield c, plain, _rect(rng, A, B, beyond=rng.random() < 0.1)


@pytest.mark.parametrize("make_at, lazy_keep", [(None, None), (None, 100_000), (0, None), (40, None), (400, None)])
def test_values_match_a_plain_grid_after_random_fills(make_at, lazy_keep, monkeypatch):
    if lazy_keep is not None:           # no arrays at all: the rectangles alone, however many
        monkeypatch.setattr(Cells, "LAZY_KEEP", lazy_keep)
    found = 0
    for seed in range(4):
        for c, plain, r in _histories(seed, 1500, make_at):
            found += _check_value(c, plain, r)
        assert lazy_keep is None or c.arrs is None
        for arr, want in zip(c.arrays(), plain):
            assert np.array_equal(arr, want)
            assert arr.dtype == want.dtype
    assert found > 400          # it does answer (else it only costs)


def test_regions_of_many_records_are_exact_without_arrays():
    """Lanes quarters written by four agents, then columns re-filled: the records of regions
    across them are listed exactly (and no arrays made)."""
    c, plain = Cells(128, 64, FIELDS), [np.full((128, 64), v, dtype=dt) for dt, v in FIELDS]
    rng = np.random.default_rng(3)
    for q in range(4):
        for rr in ((32 * q, 32 * q + 32, 0, 32), (32 * q, 32 * q + 32, 32, 64)):
            rec = (q + 1, int(rng.integers(0, 3)))
            c.fill(*rr, rec)
            for arr, x in zip(plain, rec):
                arr[rr[0]:rr[1], rr[2]:rr[3]] = x
    assert c.arrs is None
    for _ in range(300):
        r = _rect(rng, 128, 64)
        recs = c.records(*r)
        block = np.stack([arr[r[0]:r[1], r[2]:r[3]] for arr in plain], axis=-1).reshape(-1, 2)
        want = {tuple(int(x) for x in row) for row in block}
        assert recs is not None and set(recs) == want, r
    assert c.arrs is None


@pytest.mark.parametrize("make_at, lazy_keep", [(None, None), (None, 100_000), (0, None), (300, None)])
def test_listed_records_match_a_plain_grid(make_at, lazy_keep, monkeypatch):
    if lazy_keep is not None:
        monkeypatch.setattr(Cells, "LAZY_KEEP", lazy_keep)
    listed = 0
    for seed in range(4):
        for c, plain, r in _histories(100 + seed, 1000, make_at, values=6):
            recs = c.records(*r)
            if recs is None:
                continue
            listed += 1
            block = np.stack([arr[r[0]:r[1], r[2]:r[3]] for arr in plain], axis=-1).reshape(-1, 2)
            assert set(recs) == {tuple(int(x) for x in row) for row in block}, r
            assert len(set(recs)) == len(recs)
    assert listed > 300


def test_empty_and_wrapped_regions():
    c = Cells(8, 8, FIELDS)
    assert c.value(0, 8, 0, 8) == (0, -1)
    assert c.value(8, 9, 0, 8) is None            # beyond the grid: nothing
    assert c.value(-1, 4, 0, 4) is None           # a wrapped slice is not a rectangle
    c.fill(2, 4, 2, 4, (5, 1))
    assert c.value(0, 8, 0, 8) is None
    assert c.value(2, 4, 3, 4) == (5, 1)
    assert c.value(0, 2, 0, 8) == (0, -1)         # beside the fill: the background
    c.fill(-1, 8, 0, 8, (3, 3))                   # (numpy's slice from -1: the last row)
    plain = _plain()[0][:8, :8].copy()
    plain[2:4, 2:4] = 5
    plain[-1:8, 0:8] = 3
    assert np.array_equal(c.arrays()[0], plain)
