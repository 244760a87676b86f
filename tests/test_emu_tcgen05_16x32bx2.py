"""tcgen05.ld / tcgen05.st of shape .16x32bx2 (PTX ISA 9.7.16.8.3 "tcgen05.ld", 9.7.16.8.4
"tcgen05.st", and the matrix fragments of .16x32bx2: two 16-lane x 32-bit blocks, the second
``immHalfSplitoff`` columns after the first), as CUTLASS 77's MLA backward kernel reads its
accumulators: ``tcgen05.ld.sync.aligned.16x32bx2.x16.b32 {..}, [taddr], 16``. Threads 0-15
access lanes 0-15 of the first block, threads 16-31 the same lanes of the second; register r
is the block's column r. A hand-written one-warp kernel fills 64 columns of TMEM with known
values through the 32x32b shape and reads them back through .16x32bx2 (or writes through it
and reads back through 32x32b); compared with the layout computed here."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import Unsupported

from emu_tcgen05_ptx import HEAD, tmem_setup, tmem_teardown

COLS = 64


def _fill() -> str:
    """Thread t writes lane t, columns 0..63: t * 1000 + column (%r100.. hold the values)."""
    lines = ["  mul.lo.u32 %r30, %r1, 1000;"]
    lines += [f"  add.u32 %r{100 + c}, %r30, {c};" for c in range(COLS)]
    regs = ", ".join(f"%r{100 + c}" for c in range(COLS))
    lines += [f"  tcgen05.st.sync.aligned.32x32b.x{COLS}.b32 [%r20], {{{regs}}};",
              "  tcgen05.wait::st.sync.aligned;"]
    return "\n".join(lines) + "\n"


def _kernel(middle: str, nout: int, out_regs: list[str]) -> str:
    stores = "\n".join(f"  st.global.b32 [%rd3+{4 * i}], {r};" for i, r in enumerate(out_regs))
    return HEAD + f""".visible .entry k(.param .u64 out)
{{
  .reg .b32 %r<240>;
  .reg .b64 %rd<8>;
  .reg .pred %p<8>;
  .shared .align 16 .b8 bars[16];
{tmem_setup(COLS, 1)}{_fill()}{middle}
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, {4 * nout};
  add.s64 %rd3, %rd1, %rd2;
{stores}
{tmem_teardown(COLS)}}}
"""


def _want_ld(col0: int, num: int, split: int) -> np.ndarray:
    t = np.arange(32)[:, None]
    r = np.arange(num)[None, :]
    return (t % 16) * 1000 + col0 + r + (t // 16) * split


@pytest.mark.parametrize("num,split,col0", [(1, 32, 0), (4, 32, 8), (16, 16, 0), (8, 40, 4)])
def test_ld_16x32bx2_reads_two_blocks_split_by_the_offset(num, split, col0):
    regs = [f"%r{170 + i}" for i in range(num)]
    middle = (f"  add.u32 %r40, %r20, {col0};\n"
              f"  tcgen05.ld.sync.aligned.16x32bx2.x{num}.b32 {{{', '.join(regs)}}}, [%r40], {split};\n"
              "  tcgen05.wait::ld.sync.aligned;")
    out = np.zeros((32, num), np.uint32)
    got = emu.launch(_kernel(middle, num, regs), "k", grid=1, block=32, args=[out]).outputs[0]
    np.testing.assert_array_equal(got, _want_ld(col0, num, split))


def test_st_16x32bx2_writes_two_blocks_and_leaves_the_rest():
    num, split, col0 = 2, 32, 8
    vals = [f"%r{200 + i}" for i in range(num)]
    back = [f"%r{100 + c}" for c in range(COLS)]
    middle = "\n".join([f"  mad.lo.u32 %r{200 + i}, %r1, 10, {50000 + i};" for i in range(num)] + [
        f"  add.u32 %r40, %r20, {col0};",
        f"  tcgen05.st.sync.aligned.16x32bx2.x{num}.b32 [%r40], {split}, {{{', '.join(vals)}}};",
        "  tcgen05.wait::st.sync.aligned;",
        f"  tcgen05.ld.sync.aligned.32x32b.x{COLS}.b32 {{{', '.join(back)}}}, [%r20];",
        "  tcgen05.wait::ld.sync.aligned;"])
    out = np.zeros((32, COLS), np.uint32)
    got = emu.launch(_kernel(middle, COLS, back), "k", grid=1, block=32, args=[out]).outputs[0]
    want = np.arange(32)[:, None] * 1000 + np.arange(COLS)[None, :]
    for t in range(32):                      # thread t's registers land in lane t % 16
        for i in range(num):
            want[t % 16, col0 + i + (t // 16) * split] = 50000 + i + 10 * t
    np.testing.assert_array_equal(got, want.astype(np.uint32))


def test_ld_16x32bx2_without_the_split_offset_is_one_line():
    regs = ["%r170"]
    middle = ("  tcgen05.ld.sync.aligned.16x32bx2.x1.b32 {%r170}, [%r20];\n  tcgen05.wait::ld.sync.aligned;")
    with pytest.raises(Unsupported, match="16x32bx2"):
        emu.launch(_kernel(middle, 1, regs), "k", grid=1, block=32, args=[np.zeros((32, 1), np.uint32)])


def test_the_columns_between_the_blocks_are_not_read():
    """Only columns 0-3 and 32-35 were ever written: the load of the two blocks reads no
    column between them (a read of one would be 'never written since allocated')."""
    regs = [f"%r{170 + i}" for i in range(4)]
    vals = ", ".join(f"%r{100 + c}" for c in range(4))
    fill = (f"  tcgen05.st.sync.aligned.32x32b.x4.b32 [%r20], {{{vals}}};\n"
            "  add.u32 %r41, %r20, 32;\n"
            f"  tcgen05.st.sync.aligned.32x32b.x4.b32 [%r41], {{{vals}}};\n  tcgen05.wait::st.sync.aligned;\n")
    middle = (f"  tcgen05.ld.sync.aligned.16x32bx2.x4.b32 {{{', '.join(regs)}}}, [%r20], 32;\n"
              "  tcgen05.wait::ld.sync.aligned;")
    text = _kernel(middle, 4, regs).replace(_fill(), "  mul.lo.u32 %r30, %r1, 1000;\n" + "".join(
        f"  add.u32 %r{100 + c}, %r30, {c};\n" for c in range(4)) + fill)
    got = emu.launch(text, "k", grid=1, block=32, args=[np.zeros((32, 4), np.uint32)]).outputs[0]
    t = np.arange(32)[:, None] % 16
    np.testing.assert_array_equal(got, t * 1000 + np.arange(4)[None, :])


def test_another_warp_writing_between_the_blocks_is_no_race():
    """Warp 4 (the same lane quarter as warp 0) stores into columns 16-19 while warp 0 loads
    the blocks at columns 0-3 and 32-35, with nothing ordering the two: disjoint cells, no
    race (the happens-before checker sees the load's two blocks, not the span)."""
    regs = [f"%r{170 + i}" for i in range(4)]
    vals = ", ".join(f"%r{100 + c}" for c in range(4))
    middle = ("  bar.sync 0;\n  shr.u32 %r42, %r1, 5;\n  setp.eq.u32 %p5, %r42, 4;\n  @%p5 bra W4;\n"
              "  setp.ne.u32 %p6, %r42, 0;\n  @%p6 bra DONE_LD;\n"
              f"  tcgen05.ld.sync.aligned.16x32bx2.x4.b32 {{{', '.join(regs)}}}, [%r20], 32;\n"
              "  tcgen05.wait::ld.sync.aligned;\n  bra.uni DONE_LD;\nW4:\n  add.u32 %r43, %r20, 16;\n"
              f"  tcgen05.st.sync.aligned.32x32b.x4.b32 [%r43], {{{vals}}};\n  tcgen05.wait::st.sync.aligned;\n"
              "DONE_LD:")
    # warp 0 fills its quarter's 64 columns first; warp 4 skips the fill (its lanes are warp 0's)
    text = _kernel(middle, 4, regs).replace(_fill(), "  shr.u32 %r44, %r1, 5;\n  setp.ne.u32 %p7, %r44, 0;\n"
                                            "  @%p7 bra FILLED;\n" + _fill() + "FILLED:\n"
                                            "  mul.lo.u32 %r30, %r1, 1000;\n")
    out = np.zeros((256, 4), np.uint32)
    got = emu.launch(text, "k", grid=1, block=256, args=[out]).outputs[0]
    t = np.arange(32)[:, None]
    np.testing.assert_array_equal(got[:32], (t % 16) * 1000 + np.arange(4)[None, :] + (t // 16) * 32)
