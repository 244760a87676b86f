"""Integer wgmma (PTX ISA 9.7.15.5.2 "wgmma.mma_async", its integer form:
``wgmma.mma_async.sync.aligned.m64nNk32{.satfinite}.s32.{s8,u8}.{s8,u8} d, a-desc, b-desc,
scale-d``, as CUTLASS's Hopper int8 GEMMs issue it): exact products and sums, D wrapping
modulo 2^32, or clamped to the .s32 range with .satfinite.

The kernel (written for this test): one warpgroup copies a 64 x 32 A and an 8 x 32 B (8-bit,
K-major, no swizzle, laid out by the test in the core-matrix layout) into shared memory, loads
its four accumulators from C, runs one m64n8k32 with scale-d = 1 (D = A B^T + C) and stores
them; compared with numpy's int64 product."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import launch
from porter.emu.errors import Unsupported

from emu_wgmma_ptx import OPERANDS_TO_SHARED, core_layout


_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry wgi(.param .u64 a_ptr, .param .u64 b_ptr, .param .u64 c_ptr, .param .u64 out_ptr)
{
  .reg .pred %p<4>;
  .reg .b32 %r<40>;
  .reg .b64 %rd<20>;
""" + OPERANDS_TO_SHARED + """  ld.param.u64 %rd13, [c_ptr];
  ld.param.u64 %rd3, [out_ptr];
  add.u64 %rd14, %rd13, %rd4;
  ld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd14];
  wgmma.fence.sync.aligned;
  wgmma.mma_async.sync.aligned.m64n8k32FORM {%r20, %r21, %r22, %r23}, %rd11, %rd12, 1;
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  add.u64 %rd8, %rd3, %rd4;
  st.global.v4.u32 [%rd8], {%r20, %r21, %r22, %r23};
  ret;
}
"""


def _fragment_position(t: int, j: int) -> tuple[int, int]:
    """(row, column) of D held by thread t's accumulator j (the m64nNk16 f32 layout, which the
    .s32 form shares): warp w, lane l: rows 16w + l/4 (+8), columns 2 (l % 4) (+1)."""
    w, lane = divmod(t, 32)
    return 16 * w + lane // 4 + 8 * (j // 2), 2 * (lane % 4) + j % 2


def _fragment(d: np.ndarray) -> np.ndarray:
    return np.array([[d[_fragment_position(t, j)] for j in range(4)] for t in range(128)], d.dtype)


def _run(a, b, c, form):
    out = np.zeros((128, 4), np.int32)
    text = _PTX.replace("FORM", form)
    res = launch(text, "wgi", 1, 128, [core_layout(a), core_layout(b), _fragment(c), out])
    d = np.zeros((64, 8), np.int64)
    for t in range(128):
        for j in range(4):
            d[_fragment_position(t, j)] = res.outputs[3][t, j]
    return d, res


@pytest.mark.parametrize("atype,btype", [("s8", "s8"), ("u8", "s8"), ("s8", "u8"), ("u8", "u8")])
def test_integer_wgmma_is_exact_for_each_signedness(atype, btype):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (64, 32)).astype(np.uint8)
    b = rng.integers(0, 256, (8, 32)).astype(np.uint8)
    c = rng.integers(-1000, 1000, (64, 8)).astype(np.int32)
    d, res = _run(a, b, c, f".s32.{atype}.{btype}")
    av = a.view(np.int8) if atype == "s8" else a
    bv = b.view(np.int8) if btype == "s8" else b
    want = av.astype(np.int64) @ bv.astype(np.int64).T + c
    np.testing.assert_array_equal(d, want)
    assert res.summary.wgmma == 4


@pytest.mark.parametrize("form", [".s32.u8.u8", ".satfinite.s32.u8.u8", ".s32.u8.u8.satfinite"])
def test_integer_wgmma_wraps_or_saturates_at_the_s32_range(form):
    a = np.full((64, 32), 255, np.uint8)                  # each product sum: 32 x 255 x 255 = 2,080,800
    b = np.full((8, 32), 255, np.uint8)
    c = np.full((64, 8), 2**31 - 1000, np.int32)          # C near the top: the sum overflows
    c[:32] = -5                                           # half the rows stay in range
    d, _ = _run(a, b, c, form)
    exact = 32 * 255 * 255 + c.astype(np.int64)
    if "satfinite" in form:
        want = np.minimum(exact, 2**31 - 1)
    else:
        want = (exact & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)
    np.testing.assert_array_equal(d, want)
    assert (d[32:] < 0).any() != ("satfinite" in form)     # wrapping turns the overflowed rows negative


@pytest.mark.parametrize("form,match", [
    (".s32.s8.s8 {%r20, %r21, %r22, %r23}, %rd11, %rd12, 1, 1, 1;", "no scale or transpose|takes none"),
    (".satfinite.f32.bf16.bf16", "integer form only"),
    (".f32.s8.s8", "need an .s32 accumulator"),
    (".s32.e4m3.e4m3", "takes .s8 or .u8"),
])
def test_integer_wgmma_forms_the_isa_does_not_give_are_one_line(form, match):
    a, b, c = np.zeros((64, 32), np.uint8), np.zeros((8, 32), np.uint8), np.zeros((64, 8), np.int32)
    if form.startswith(".s32.s8.s8 {"):                    # extra immediates after scale-d
        text = _PTX.replace("m64n8k32FORM {%r20, %r21, %r22, %r23}, %rd11, %rd12, 1;", "m64n8k32" + form)
        with pytest.raises(Unsupported, match=match):
            launch(text, "wgi", 1, 128, [core_layout(a), core_layout(b), _fragment(c), np.zeros((128, 4), np.int32)])
        return
    with pytest.raises(Unsupported, match=match):
        _run(a, b, c, form)


def test_integer_wgmma_shape_outside_the_isa_list_is_one_line():
    text = _PTX.replace("m64n8k32FORM", "m64n40k32.s32.s8.s8")
    a, b, c = np.zeros((64, 32), np.uint8), np.zeros((8, 32), np.uint8), np.zeros((64, 8), np.int32)
    with pytest.raises(Unsupported, match="integer form m64nNk32 with N in"):
        launch(text, "wgi", 1, 128, [core_layout(a), core_layout(b), _fragment(c), np.zeros((128, 4), np.int32)])


def _a_registers(a: np.ndarray) -> np.ndarray:
    """A (64 x 32, 8-bit) as each thread's four A registers of the RS form (PTX ISA 9.7.15.5.1,
    the 8-bit A fragment): warp w, lane l, register j holds row 16w + l/4 (+8 for j odd),
    columns 4 (l % 4) .. +3 (+16 for j >= 2), the lowest column in the lowest byte."""
    regs = np.zeros((128, 4), np.uint32)
    for t in range(128):
        w, lane = divmod(t, 32)
        for j in range(4):
            row = 16 * w + lane // 4 + 8 * (j % 2)
            col = 4 * (lane % 4) + 16 * (j // 2)
            regs[t, j] = int.from_bytes(a[row, col:col + 4].tobytes(), "little")
    return regs


def test_integer_wgmma_with_a_from_registers():
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, (64, 32)).astype(np.uint8)
    b = rng.integers(0, 256, (8, 32)).astype(np.uint8)
    c = rng.integers(-50, 50, (64, 8)).astype(np.int32)
    text = _PTX.replace("m64n8k32FORM {%r20, %r21, %r22, %r23}, %rd11, %rd12, 1;",
                        "m64n8k32.s32.s8.u8 {%r20, %r21, %r22, %r23}, {%r30, %r31, %r32, %r33}, %rd12, 1;")
    text = text.replace("  ld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd14];",
                        "  ld.global.v4.u32 {%r20, %r21, %r22, %r23}, [%rd14];\n"
                        "  ld.global.v4.u32 {%r30, %r31, %r32, %r33}, [%rd5];")     # this thread's A registers
    out = np.zeros((128, 4), np.int32)
    res = launch(text, "wgi", 1, 128, [_a_registers(a), core_layout(b), _fragment(c), out])
    d = np.zeros((64, 8), np.int64)
    for t in range(128):
        for j in range(4):
            d[_fragment_position(t, j)] = res.outputs[3][t, j]
    want = a.view(np.int8).astype(np.int64) @ b.astype(np.int64).T + c
    np.testing.assert_array_equal(d, want)
