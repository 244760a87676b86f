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


SCALED = [("m16n8k32", a, b, "1X", "ue8m0") for a in unit.FORMATS[8] for b in unit.FORMATS[8]] + \
         [("m16n8k64", "e2m1", "e2m1", "2X", "ue8m0"), ("m16n8k64", "e2m1", "e2m1", "4X", "ue4m3")]


@pytest.mark.parametrize("shape,atype,btype,scale_vec,stype", SCALED)
def test_planned_scaled_step_matches_the_composition(shape, atype, btype, scale_vec, stype):
    from porter.emu.errors import EmuError

    rng = np.random.default_rng(len(atype) * 5 + len(btype) + len(scale_vec) * 11)
    step = unit.planned_scaled_step(shape, atype, btype, scale_vec, stype)
    bytes_ok = {"1X": (0, 1, 2, 3), "2X": (0, 2), "4X": (0,)}[scale_vec]
    for trial in range(8):
        a = rng.integers(0, 2**32, (4, 32), dtype=np.uint64).astype(np.uint32)
        b = rng.integers(0, 2**32, (2, 32), dtype=np.uint64).astype(np.uint32)
        c = rng.standard_normal((4, 32)).astype(np.float32).view(np.uint32)
        da = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
        db = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
        if stype == "ue4m3" and trial % 4:
            da &= np.uint32(0x7F7F7F7F)               # valid codes (trial 0, 4: an MSB set, refused alike)
            db &= np.uint32(0x7F7F7F7F)
        sel = (int(rng.choice(bytes_ok)), int(rng.integers(2)), int(rng.choice(bytes_ok)), int(rng.integers(4)))

        def composition():
            sa = unit.scale_values(da, "a", scale_vec, sel[0], sel[1], stype)
            sb = unit.scale_values(db, "b", scale_vec, sel[2], sel[3], stype)
            return unit.accumulator_regs(unit.mma(unit.operand_values(a, shape, "a", atype, reg_major=True),
                                                  unit.operand_values(b, shape, "b", btype, reg_major=True),
                                                  unit.accumulator(c, reg_major=True), sa, sb), reg_major=True)

        with np.errstate(all="ignore"):
            try:
                want = composition()
            except EmuError as exc:
                with pytest.raises(type(exc), match="MSB"):
                    step(np.concatenate([a, b, c], axis=None), da, db, *sel)
                continue
            got = step(np.concatenate([a, b, c], axis=None), da, db, *sel)
        np.testing.assert_array_equal(got, want)
