"""The hot path of ``mma.sync`` (``units.mma_sync.planned_step``: A, B and C registers in one
array, the codes of both operands in one lookup, D taken in register order) gives bit for
bit what ``mma_registers`` gives, for every shape and element format, random register
contents included (NaN and infinity codes among them); and ldmatrix's row path gives what
the unit's ``ldmatrix`` gives."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.units import mma_sync as unit

FORMS = [(shape, a, b) for shape, bits in unit.SHAPES.items()
         for a in unit.FORMATS[bits] for b in unit.FORMATS[bits]
         if not (shape == "m16n8k16" and a != b)]


@pytest.mark.parametrize("shape,atype,btype", FORMS)
def test_planned_step_matches_mma_registers(shape, atype, btype):
    rng = np.random.default_rng(len(shape) * 3 + len(atype) * 7 + len(btype))
    step = unit.planned_step(shape, atype, btype)
    for trial in range(6):
        a = rng.integers(0, 2**32, (4, 32), dtype=np.uint64).astype(np.uint32)
        b = rng.integers(0, 2**32, (2, 32), dtype=np.uint64).astype(np.uint32)
        c = rng.standard_normal((4, 32)).astype(np.float32)
        if trial % 2:
            c[rng.integers(4), rng.integers(32)] = np.nan
            c[rng.integers(4), rng.integers(32)] = np.inf
        c = c.view(np.uint32)
        with np.errstate(all="ignore"):
            want = unit.mma_registers(a, b, c, shape, atype, btype)
            got = step(np.concatenate([a, b, c], axis=None))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("num", [1, 2, 4])
def test_ldmatrix_rows_match_unit(trans, num):
    from porter.emu.ops.memory import _rows_of

    class _Smem:
        data = np.random.default_rng(num).integers(0, 256, 4096, dtype=np.uint8).astype(np.uint8)

    rng = np.random.default_rng(num + 10 * trans)
    offs = rng.integers(64, 256, 32).astype(np.int64) * 16
    want = unit.ldmatrix(_Smem.data, offs, num, trans, reg_major=True)
    got = unit.ldmatrix_rows(_rows_of(_Smem, 2, 8), offs[:8 * num] // 16, num, trans)
    np.testing.assert_array_equal(got, want)
