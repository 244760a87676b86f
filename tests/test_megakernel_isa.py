from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from porter.megakernel import isa
from porter.megakernel.isa import Epilogue, Flag, Instruction, Opcode, W


def test_layout_is_fixed_width_and_stop_is_zero():
    assert isa.WORDS == 32
    assert Opcode.STOP == 0          # zero padding reads as STOP
    assert W.COST_KIB == isa.WORDS - 1
    assert W.T0 + isa.N_TENSOR_SLOTS == W.R0
    assert W.I0 + isa.N_INT_OPERANDS == W.F0
    assert W.WAIT0 + 2 * isa.MAX_WAITS == W.FLAGS
    needed = {"RMSNORM", "MATVEC", "ROPE", "KV_APPEND", "ATTN_PARTIAL", "ATTN_REDUCE",
              "RESIDUAL_ADD", "ARGMAX_PARTIAL", "ARGMAX_REDUCE", "STOP"}
    assert needed <= {o.name for o in Opcode}
    d = isa.describe()
    assert d["words"] == 32 and d["opcodes"]["MATVEC"] == 3
    for op in Opcode:                 # every opcode is specified in the module docstring
        assert f"{op.name} ({int(op)})" in isa.__doc__


@given(
    op=st.sampled_from(list(Opcode)), layer=st.integers(-1, 200), signal=st.integers(-1, 10_000),
    waits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 5000)), max_size=4),
    epi=st.sampled_from(list(Epilogue)), flags=st.sampled_from([Flag.NONE, Flag.PRE_NORM, Flag.ARGMAX | Flag.PRE_NORM, Flag.ROPE_Q]),
    tensors=st.lists(st.integers(-1, 500), max_size=7), r=st.tuples(st.integers(0, 1 << 20), st.integers(0, 1 << 20)),
    ints=st.lists(st.integers(-(1 << 31), (1 << 31) - 1), max_size=6),
    f0=st.floats(allow_nan=False, width=32),
)
def test_words_round_trip(op, layer, signal, waits, epi, flags, tensors, r, ints, f0):
    ins = Instruction(op=op, layer=layer, signal=signal, waits=waits, epilogue=epi, flags=flags,
                      tensors=tensors, r0=r[0], r1=r[1], ints=ints, f0=f0, id=7, cost_kib=3)
    w = ins.to_words()
    assert w.dtype == np.int32 and w.shape == (32,)
    back = Instruction.from_words(w)
    assert back.op == op and back.waits == waits and back.epilogue == epi and back.flags == flags
    assert back.tensors == tensors + [-1] * (7 - len(tensors))
    assert back.ints == ints + [0] * (6 - len(ints))
    assert back.f0 == f0 and (back.r0, back.r1) == r and back.signal == signal


def test_float_words_are_bit_patterns():
    assert isa.f32_bits(1.0) == 0x3F800000
    assert isa.bits_f32(isa.f32_bits(1e-5)) == pytest.approx(1e-5, rel=1e-7)


def test_too_many_waits_rejected():
    with pytest.raises(ValueError):
        Instruction(op=Opcode.MATVEC, waits=[(0, 1)] * 5).to_words()
