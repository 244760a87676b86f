"""The planned one-step ``mma.sync`` (register-major fragments straight to D's registers)
gives bit for bit what the step-by-step unit gives (operand values from the ISA's fragment
layouts, the product in float64, one rounding to f32), for every shape and element format,
random register contents included (NaN and infinity codes among them)."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.units import mma_sync as unit

FORMS = [(shape, a, b) for shape, bits in unit.SHAPES.items()
         for a in unit.FORMATS[bits] for b in unit.FORMATS[bits]
         if not (shape == "m16n8k16" and a != b)]


@pytest.mark.parametrize("shape,atype,btype", FORMS)
def test_one_step_matches_the_composition(shape, atype, btype):
    rng = np.random.default_rng(len(shape) + len(atype) * 7 + len(btype))
    for _ in range(5):
        a = rng.integers(0, 2**32, (4, 32), dtype=np.uint64).astype(np.uint32)
        b = rng.integers(0, 2**32, (2, 32), dtype=np.uint64).astype(np.uint32)
        c = rng.standard_normal((4, 32)).astype(np.float32).view(np.uint32)
        with np.errstate(invalid="ignore", over="ignore"):
            want = unit.accumulator_regs(unit.mma(unit.operand_values(a.T, shape, "a", atype),
                                                  unit.operand_values(b.T, shape, "b", btype),
                                                  unit.accumulator(c.T)))
        got = unit.mma_registers(a, b, c, shape, atype, btype)
        np.testing.assert_array_equal(got, want.T)
        np.testing.assert_array_equal(unit.operand_values(a, shape, "a", atype, reg_major=True),
                                      unit.operand_values(np.ascontiguousarray(a.T), shape, "a", atype))
