"""The stepper's straight runs for a diverged warp's lowest lane group and for the
register-only forms of other heads (packed float, cvt, carry chain), and the float
compares / selp / ex2.ftz taken in fewer numpy calls: every output, count and virtual time
is what stepping one by one with the general forms gives."""

from __future__ import annotations

import numpy as np

from porter import emu
from porter.emu import machine

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _kernel(body: str, params: str = "") -> str:
    return HEAD + (f".visible .entry k(.param .u64 out{params})\n{{\n.reg .pred %p<8>;\n.reg .b32 %r<64>;\n"
                   ".reg .f32 %f<16>;\n.reg .b16 %h<8>;\n.reg .b64 %rd<8>;\n"
                   "ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n"
                   "mov.u32 %r0, %tid.x;\nmul.wide.u32 %rd2, %r0, 4;\nadd.s64 %rd3, %rd1, %rd2;\n"
                   f"{body}\nret;\n}}\n")


def _launch(text: str, runs: bool, threads: int, args=()):
    out = np.zeros(threads, np.uint32)
    saved = machine._straight_runs
    if not runs:
        machine._straight_runs = lambda ops, pure: [None] * len(ops)
    try:
        res = emu.launch(text, "k", grid=1, block=threads, args=[out, *args], seed=5)
    finally:
        machine._straight_runs = saved
    return res.outputs[0], res.summary


def _same_as_one_by_one(text: str, threads: int, args=()):
    a, sa = _launch(text, True, threads, args)
    b, sb = _launch(text, False, threads, args)
    assert np.array_equal(a, b)
    for field in ("warp_instructions", "thread_instructions", "rounds", "virtual_ns"):
        assert getattr(sa, field) == getattr(sb, field), field
    return a


# The fall-through lanes run a straight run whose middle is where the branching lanes wait:
# the lower group's run must stop there, merge, and go on converged.
_INTO_A_RUN = """setp.lt.u32 %p1, %r0, 13;
@%p1 bra MID;
add.s32 %r2, %r0, 7;
mul.lo.s32 %r2, %r2, 3;
shl.b32 %r3, %r2, 2;
MID:
add.s32 %r2, %r2, %r0;
xor.b32 %r2, %r2, 85;
add.s32 %r2, %r2, %r3;
mul.lo.s32 %r2, %r2, 5;
st.global.u32 [%rd3], %r2;"""


def _into_a_run_reference(threads: int) -> np.ndarray:
    t = np.arange(threads, dtype=np.uint64)
    r2 = np.where(t < 13, 0, (t + 7) * 3)
    r3 = np.where(t < 13, 0, r2 << 2)
    return (((((r2 + t) ^ 85) + r3) * 5) & 0xFFFFFFFF).astype(np.uint32)


def test_a_diverged_group_runs_up_to_the_other_group_and_merges():
    text = _kernel(_INTO_A_RUN)
    out = _same_as_one_by_one(text, 64)
    assert np.array_equal(out, _into_a_run_reference(64))


def test_a_partial_warp_counts_its_own_lanes():
    text = _kernel(_INTO_A_RUN)
    out = _same_as_one_by_one(text, 40)          # warp 1: 8 live lanes
    assert np.array_equal(out, _into_a_run_reference(40))


def test_both_sides_of_an_if_else_run_straight():
    body = """setp.ge.u32 %p1, %r0, 20;
@%p1 bra ELSE;
mul.lo.s32 %r2, %r0, 9;
add.s32 %r2, %r2, 1;
xor.b32 %r2, %r2, 3;
bra.uni JOIN;
ELSE:
sub.s32 %r2, 100, %r0;
shl.b32 %r2, %r2, 1;
or.b32 %r2, %r2, 1;
JOIN:
add.s32 %r2, %r2, %r0;
st.global.u32 [%rd3], %r2;"""
    out = _same_as_one_by_one(_kernel(body), 32)
    t = np.arange(32)
    want = np.where(t < 20, ((t * 9 + 1) ^ 3) + t, (((100 - t) << 1) | 1) + t)
    assert np.array_equal(out, want.astype(np.uint32))


def test_packed_float_cvt_and_carry_forms_are_part_of_the_runs():
    body = """cvt.rn.f32.u32 %f1, %r0;
mov.f32 %f2, 0f3F000000;
cvt.rn.f16x2.f32 %r4, %f1, %f2;
add.rn.f16x2 %r5, %r4, %r4;
mov.b32 {%h1, %h2}, %r5;
cvt.f32.f16 %f3, %h2;
add.cc.u32 %r6, %r0, -16;
addc.u32 %r7, 0, 0;
cvt.rzi.u32.f32 %r8, %f3;
mad.lo.s32 %r9, %r7, 1000, %r8;
st.global.u32 [%rd3], %r9;"""
    text = _kernel(body)
    out = _same_as_one_by_one(text, 32)
    t = np.arange(32)
    assert np.array_equal(out, ((t >= 16) * 1000 + 2 * t).astype(np.uint32))
    # the packed add, the f16 cvt and the carry pair sit inside one straight run
    from porter.emu import memory as mem
    from porter.emu import ptx

    module = ptx.parse(text, "<ptx>")
    prog = machine.build_program(module, "k", mem.GlobalMemory())
    first = next(pc for pc, ins in enumerate(prog.kernel.code) if ins.opcode == "cvt.rn.f32.u32")
    last = next(pc for pc, ins in enumerate(prog.kernel.code) if ins.opcode.startswith("mad.lo"))
    assert prog.runs[first] is not None and len(prog.runs[first]) == last - first + 1


_NAN_PAYLOAD = 0x7FC01234


def test_float_compares_selp_and_ex2_ftz_keep_the_isa_values():
    # per lane: a and b from two input tables (NaNs, signed zeros, infinities, subnormals);
    # bit k of the result: compare k of a and b; selp keeps a NaN's payload bits
    specials = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 2.5], np.float32)
    a = np.resize(specials, 32).astype(np.float32)
    b = np.resize(specials[::-1], 32).astype(np.float32)
    a_bits = a.view(np.uint32).copy()
    a_bits[6] = _NAN_PAYLOAD
    cmps = ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"]
    lines = ["ld.param.u64 %rd4, [a];", "cvta.to.global.u64 %rd4, %rd4;", "add.s64 %rd5, %rd4, %rd2;",
             "ld.global.f32 %f1, [%rd5];", "ld.param.u64 %rd4, [b];", "cvta.to.global.u64 %rd4, %rd4;",
             "add.s64 %rd5, %rd4, %rd2;", "ld.global.f32 %f2, [%rd5];", "mov.u32 %r10, 0;"]
    for k, c in enumerate(cmps):
        lines += [f"setp.{c}.f32 %p2, %f1, %f2;", f"selp.u32 %r11, {1 << k}, 0, %p2;", "or.b32 %r10, %r10, %r11;"]
    lines += ["setp.lt.u32 %p3, %r0, 16;", "selp.f32 %f4, %f1, 0f3FC00000, %p3;", "mov.b32 %r12, %f4;",
              "ex2.approx.ftz.f32 %f5, %f1;", "mov.b32 %r13, %f5;", "add.f32 %f6, %f1, 0fC3160000;",
              "ex2.approx.ftz.f32 %f7, %f6;", "mov.b32 %r14, %f7;",
              "st.global.u32 [%rd3], %r10;", "add.s64 %rd6, %rd3, 128;", "st.global.u32 [%rd6], %r12;",
              "add.s64 %rd6, %rd6, 128;", "st.global.u32 [%rd6], %r13;", "add.s64 %rd6, %rd6, 128;",
              "st.global.u32 [%rd6], %r14;"]
    text = _kernel("\n".join(lines), ", .param .u64 a, .param .u64 b")
    out = np.zeros(128, np.uint32)
    res = emu.launch(text, "k", grid=1, block=32, args=[out, a_bits.view(np.float32), b], seed=1)
    got = res.outputs[0]
    x, y = a_bits.view(np.float32), b
    with np.errstate(all="ignore"):
        nan = np.isnan(x) | np.isnan(y)
        want = {"eq": (x == y) & ~nan, "ne": (x != y) & ~nan, "lt": (x < y) & ~nan, "le": (x <= y) & ~nan,
                "gt": (x > y) & ~nan, "ge": (x >= y) & ~nan, "equ": (x == y) | nan, "neu": (x != y) | nan,
                "ltu": (x < y) | nan, "leu": (x <= y) | nan, "gtu": (x > y) | nan, "geu": (x >= y) | nan,
                "num": ~nan, "nan": nan}
        bits = sum(want[c].astype(np.uint32) << k for k, c in enumerate(cmps))
        assert np.array_equal(got[:32], bits)
        assert np.array_equal(got[32:64], np.where(np.arange(32) < 16, a_bits, 0x3FC00000))
        tiny = np.finfo(np.float32).tiny
        for k, v in ((64, x), (96, (x + np.float32(-150.0)).astype(np.float32))):
            v = np.where(np.abs(v) < tiny, np.float32(0), v)          # ftz input
            e = np.exp2(v).astype(np.float32)
            e = np.where(np.abs(e) < tiny, np.float32(0), e)          # ftz output: +0 (2^x >= 0)
            assert np.array_equal(got[k:k + 32], e.view(np.uint32)), k
    # and with runs off, the same bits
    saved = machine._straight_runs
    machine._straight_runs = lambda ops, pure: [None] * len(ops)
    try:
        again = emu.launch(text, "k", grid=1, block=32, args=[np.zeros(128, np.uint32), a_bits.view(np.float32), b],
                           seed=1).outputs[0]
    finally:
        machine._straight_runs = saved
    assert np.array_equal(got, again)
