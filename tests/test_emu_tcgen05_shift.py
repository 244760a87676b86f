"""tcgen05.shift.cta_group::1.down (PTX ISA 9.7.16.9.3) in porter's simulator, on a small
hand-written kernel: every warp writes its TMEM lane quarter with tcgen05.st, one thread
shifts one 32-lane matrix down a row (8 columns, the implicit .31x256b shape of 9.7.16.2.3),
commits it to an mbarrier, and every warp reads its quarter back after the wait. The
expected TMEM is computed here with numpy; also: reading before the commit completes, a
lane not aligned to 32."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import CheckFailed

from emu_tcgen05_ptx import HEAD, tmem_setup, tmem_teardown


SHIFT = """
  .reg .b32 %r<80>;
  .reg .b64 %rd<16>;
  .reg .pred %p<8>;
  .shared .align 16 .b8 bars[16];
""" + tmem_setup(32, 1) + """  // this warp's lane quarter: lanes 32q..32q+31 (TMEM address bits 31-16)
  and.b32 %r30, %r2, 3;
  shl.b32 %r31, %r30, 21;
  add.u32 %r32, %r20, %r31;
  // lane l, column c holds l * 1000 + c + 1
  mad.lo.u32 %r40, %r1, 1000, 1;
  add.u32 %r41, %r40, 1;
  add.u32 %r42, %r40, 2;
  add.u32 %r43, %r40, 3;
  add.u32 %r44, %r40, 4;
  add.u32 %r45, %r40, 5;
  add.u32 %r46, %r40, 6;
  add.u32 %r47, %r40, 7;
  add.u32 %r48, %r40, 8;
  add.u32 %r49, %r40, 9;
  add.u32 %r50, %r40, 10;
  add.u32 %r51, %r40, 11;
  add.u32 %r52, %r40, 12;
  add.u32 %r53, %r40, 13;
  add.u32 %r54, %r40, 14;
  add.u32 %r55, %r40, 15;
  tcgen05.st.sync.aligned.32x32b.x16.b32 [%r32], {%r40, %r41, %r42, %r43, %r44, %r45, %r46, %r47,
    %r48, %r49, %r50, %r51, %r52, %r53, %r54, %r55};
  tcgen05.wait::st.sync.aligned;
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  tcgen05.fence::after_thread_sync;
  @%p2 bra WAIT;
  ld.param.u32 %r21, [off];
  add.u32 %r22, %r20, %r21;
  tcgen05.shift.cta_group::1.down [%r22];
  tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r10];
WAIT:
  WAITSHIFT
  tcgen05.fence::after_thread_sync;
  tcgen05.ld.sync.aligned.32x32b.x16.b32 {%r40, %r41, %r42, %r43, %r44, %r45, %r46, %r47,
    %r48, %r49, %r50, %r51, %r52, %r53, %r54, %r55}, [%r32];
  tcgen05.wait::ld.sync.aligned;
  ld.param.u64 %rd7, [out];
  mul.wide.u32 %rd8, %r1, 64;
  add.s64 %rd9, %rd7, %rd8;
  st.global.v4.b32 [%rd9], {%r40, %r41, %r42, %r43};
  st.global.v4.b32 [%rd9+16], {%r44, %r45, %r46, %r47};
  st.global.v4.b32 [%rd9+32], {%r48, %r49, %r50, %r51};
  st.global.v4.b32 [%rd9+48], {%r52, %r53, %r54, %r55};
""" + tmem_teardown(32)
WAIT = "L2:\n  mbarrier.try_wait.parity.shared::cta.b64 %p5, [%r10], 0;\n  @!%p5 bra L2;"


def _run(lane: int, col: int, wait: str = WAIT, seed: int = 1):
    text = HEAD + ".visible .entry k(.param .u64 out, .param .u32 off)\n{\n" + \
        SHIFT.replace("WAITSHIFT", wait) + "\n}\n"
    out = np.zeros((128, 16), dtype=np.uint32)
    res = emu.launch(text, "k", grid=1, block=128, args=[out, np.uint32(lane << 16 | col)], seed=seed,
                     file="t.ptx")
    return res.outputs[0]


def _expected(lane: int, col: int) -> np.ndarray:
    before = np.arange(128)[:, None] * 1000 + np.arange(16)[None, :] + 1
    after = before.copy()
    # rows lane..lane+30 of the 32-lane matrix move down one row; 8 columns (32 bytes) wide
    after[lane + 1:lane + 32, col:col + 8] = before[lane:lane + 31, col:col + 8]
    return after.astype(np.uint32)


@pytest.mark.parametrize("lane,col,seed", [(0, 0, 1), (32, 4, 2), (96, 8, 3)])
def test_shift_down_moves_31_rows_of_8_columns_one_lane_down(lane, col, seed):
    got = _run(lane, col, seed=seed)
    np.testing.assert_array_equal(got, _expected(lane, col))


def test_reading_the_shifted_rows_before_the_commit_completes_is_reported():
    # warp 0, whose lane 0 issued the shift, reads its quarter without waiting for the commit
    with pytest.raises(CheckFailed, match=r"tcgen05.ld reads TMEM \(CTA 0 lanes 0..31, columns 0..15\) that "
                                          r"the tcgen05.shift issued at t.ptx:\d+ still writes"):
        _run(0, 0, wait="@%p1 bra L2;\n  bra.uni NOWAIT;\n" + WAIT + "\nNOWAIT:")


def test_a_shift_address_whose_lane_is_not_a_multiple_of_32_is_reported():
    with pytest.raises(CheckFailed, match=r"t.ptx:\d+: CTA 0 warp 0 lane 0: .*lane of the tcgen05.shift "
                                          r"address \(16\) must be a multiple of 32.*PTX ISA 9.7.16.9.3"):
        _run(16, 0)


# ---- cta_group::2: one thread shifts the matrix in both CTAs of the pair ----------------------

PAIR = (SHIFT
        .replace("tcgen05.alloc.cta_group::1", "tcgen05.alloc.cta_group::2")
        .replace("tcgen05.relinquish_alloc_permit.cta_group::1", "tcgen05.relinquish_alloc_permit.cta_group::2")
        .replace("tcgen05.dealloc.cta_group::1", "tcgen05.dealloc.cta_group::2")
        .replace("  mbarrier.init.shared::cta.b64 [%r10], 1;",
                 "  mbarrier.init.shared::cta.b64 [%r10], 1;\n  fence.mbarrier_init.release.cluster;")
        # every sync spans the pair (the shift reads / writes the peer's TMEM)
        .replace("  bar.sync 0;", "  barrier.cluster.arrive.release.aligned;\n  barrier.cluster.wait.acquire.aligned;")
        # the values say which CTA wrote them: rank * 100000 + lane * 1000 + column + 1
        .replace("  mad.lo.u32 %r40, %r1, 1000, 1;",
                 "  mov.u32 %r60, %cluster_ctarank;\n  mad.lo.u32 %r61, %r60, 100000, 1;\n"
                 "  mad.lo.u32 %r40, %r1, 1000, %r61;")
        # the shifter: thread 0 of the even CTA; its commit arrives on both CTAs' barriers
        .replace("  @%p2 bra WAIT;",
                 "  setp.ne.u32 %p3, %r60, 0;\n  or.pred %p4, %p2, %p3;\n  @%p4 bra WAIT;")
        .replace("tcgen05.shift.cta_group::1.down", "tcgen05.shift.cta_group::2.down")
        .replace("  tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r10];",
                 "  mov.u16 %rs1, 3;\n"
                 "  tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
                 " [%r10], %rs1;")
        .replace("  mul.wide.u32 %rd8, %r1, 64;", "  mad.lo.u32 %r62, %r60, 128, %r1;\n  mul.wide.u32 %rd8, %r62, 64;")
        .replace("  .reg .pred %p<8>;", "  .reg .pred %p<8>;\n  .reg .b16 %rs<4>;"))


@pytest.mark.parametrize("lane,col", [(0, 0), (64, 8)])
def test_pair_shift_moves_the_rows_in_both_ctas(lane, col):
    text = HEAD + ".visible .entry k(.param .u64 out, .param .u32 off)\n{\n" + \
        PAIR.replace("WAITSHIFT", WAIT) + "\n}\n"
    # barrier.cluster at the end, so neither CTA exits while its peer may still reach it
    text = text.replace("END:\n  ret;", "END:\n  barrier.cluster.arrive.release.aligned;\n"
                                        "  barrier.cluster.wait.acquire.aligned;\n  ret;")
    out = np.zeros((2, 128, 16), dtype=np.uint32)
    res = emu.launch(text, "k", grid=2, block=128, cluster=(2, 1, 1),
                     args=[out, np.uint32(lane << 16 | col)], seed=5, file="t.ptx")
    got = res.outputs[0]
    for rank in range(2):
        np.testing.assert_array_equal(got[rank], _expected(lane, col) + np.uint32(rank * 100000))
