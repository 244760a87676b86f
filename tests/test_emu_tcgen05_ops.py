"""The simulator's tcgen05 instructions (porter.emu.ops.tcgen05) on small hand-written PTX
kernels: TMEM allocation rules, the address written to shared memory, tcgen05.ld / st with
the lane-quarter rule and the wait poisoning, one tcgen05.mma (operands laid out here from
the PTX ISA's canonical K-major layout, not by porter's encoders) completing at its commit's
mbarrier, and the checkers (in-flight TMEM, shared memory changed under an MMA, missing
fences, missing dealloc, dealloc under an MMA)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import CheckFailed, Deadlock

from emu_tcgen05_ptx import HEAD, tmem_setup, tmem_teardown


def _run(body: str, params: str, args: list, block: int = 128, seed: int = 1):
    text = HEAD + f".visible .entry k({params})\n{{\n{body}\n}}\n"
    return emu.launch(text, "k", grid=1, block=block, args=args, seed=seed, file="t.ptx")


# ---- allocation --------------------------------------------------------------------------------

ALLOC = """
  .reg .b32 %r<20>;
  .reg .b64 %rd<4>;
  .shared .align 16 .b8 slot[16];
  mov.u32 %r1, slot;
  add.u32 %r2, %r1, 4;
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 64;
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r2], 32;
  RELINQUISH
  ld.shared.u32 %r3, [%r1];
  ld.shared.u32 %r4, [%r2];
  ld.param.u64 %rd1, [out];
  st.global.u32 [%rd1], %r3;
  st.global.u32 [%rd1+4], %r4;
  DEALLOC
  ret;
"""
DEALLOC = ("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, 64;\n"
           "  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 32;")


def test_alloc_writes_the_tmem_address_to_shared_memory():
    out = np.full(2, 0xFFFF, dtype=np.uint32)
    res = _run(ALLOC.replace("RELINQUISH", "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;")
               .replace("DEALLOC", DEALLOC), ".param .u64 out", [out], block=32)
    # lane 0, the lowest free run aligned to the size: columns 0..63, then 64..95
    assert res.outputs[0].tolist() == [0, 64]


def test_tmem_left_allocated_at_exit_is_reported():
    with pytest.raises(CheckFailed, match="TMEM not deallocated at exit: columns 0..63"):
        _run(ALLOC.replace("RELINQUISH", "").replace("DEALLOC", ""), ".param .u64 out",
             [np.zeros(2, np.uint32)], block=32)


def test_alloc_after_relinquish_is_reported():
    body = ALLOC.replace("RELINQUISH", "").replace("DEALLOC", DEALLOC)
    body = body.replace("  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r2], 32;",
                        "  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
                        "  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r2], 32;")
    with pytest.raises(CheckFailed, match="t.ptx:14: CTA 0 warp 0: tcgen05.alloc 32 columns after warp "
                       "0 executed tcgen05.relinquish_alloc_permit"):
        _run(body, ".param .u64 out", [np.zeros(2, np.uint32)], block=32)


def test_alloc_that_never_finds_columns_blocks_into_a_deadlock_report():
    # warp 0 holds all 512 columns until the kernel's end; warp 1's alloc blocks forever
    body = """
  .reg .b32 %r<20>;
  .reg .pred %p<4>;
  .shared .align 16 .b8 slot[16];
  mov.u32 %r1, %tid.x;
  shr.u32 %r2, %r1, 5;
  mov.u32 %r3, slot;
  shl.b32 %r4, %r2, 2;
  add.u32 %r5, %r3, %r4;
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r5], 512;
  bar.sync 0;
  ld.shared.u32 %r6, [%r5];
  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r6, 512;
  ret;
"""
    with pytest.raises(Deadlock, match="tcgen05.alloc of 512 columns blocks"):
        _run(body, ".param .u64 out", [np.zeros(1, np.uint64)], block=64)


# ---- ld / st ---------------------------------------------------------------------------------

LDST = """
  .reg .b32 %r<40>;
  .reg .b64 %rd<8>;
  .reg .pred %p<4>;
  .shared .align 16 .b8 slot[16];
  mov.u32 %r1, %tid.x;
  shr.u32 %r2, %r1, 5;
  mov.u32 %r10, slot;
  setp.ne.u32 %p1, %r2, 0;
  @%p1 bra SKIP;
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r10], 32;
  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
SKIP:
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  tcgen05.fence::after_thread_sync;
  ld.shared.u32 %r20, [%r10];
  and.b32 %r3, %r2, QUARTER;
  shl.b32 %r4, %r3, 21;
  add.u32 %r21, %r20, %r4;
  mul.lo.u32 %r5, %r1, 3;
  add.u32 %r6, %r5, 1;
  tcgen05.st.sync.aligned.32x32b.x2.b32 [%r21], {%r5, %r6};
  tcgen05.wait::st.sync.aligned;
  tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r7, %r8}, [%r21];
  WAIT
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 8;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v2.b32 [%rd3], {%r7, %r8};
""" + tmem_teardown(32)


def test_st_then_ld_round_trip_by_lane_quarter():
    out = np.zeros((128, 2), dtype=np.uint32)
    res = _run(LDST.replace("QUARTER", "3").replace("WAIT", "tcgen05.wait::ld.sync.aligned;"),
               ".param .u64 out", [out])
    tid = np.arange(128)
    assert (res.outputs[0][:, 0] == 3 * tid).all() and (res.outputs[0][:, 1] == 3 * tid + 1).all()


def test_ld_destinations_read_before_wait_ld_are_a_warning():
    # the ISA states no rule against it (issue 18): a warning naming the read, and the run goes on
    res = _run(LDST.replace("QUARTER", "3").replace("WAIT", ""), ".param .u64 out", [np.zeros((128, 2), np.uint32)])
    hits = [w for w in res.warnings if "before the tcgen05.wait::ld" in w]
    assert hits and all(re.match(r"t.ptx:35 `st.global.v2.b32`: CTA 0 warp \d reads %r[78], the destination of the "
                                 r"tcgen05.ld at line 30, before the tcgen05.wait::ld that covers it \(a warning: the "
                                 r"PTX ISA", w) for w in hits), res.warnings
    tid = np.arange(128)
    assert (res.outputs[0][:, 0] == 3 * tid).all() and (res.outputs[0][:, 1] == 3 * tid + 1).all()


def test_ld_destinations_read_before_wait_ld_warn_once_per_reading_instruction():
    # all four warps read both destinations of the tcgen05.ld at line 30 before tcgen05.wait::ld:
    # one warning per instruction that reads them (the first warp and register it saw), not one per
    # warp and register (CUTLASS 77's FMHA forward gave 12,416 lines for 40 tcgen05.ld sites)
    res = _run(LDST.replace("QUARTER", "3").replace("WAIT", ""), ".param .u64 out", [np.zeros((128, 2), np.uint32)])
    hits = [w for w in res.warnings if "before the tcgen05.wait::ld" in w]
    assert len(hits) == 1 and hits[0].startswith("t.ptx:35 `st.global.v2.b32`: CTA 0 warp "), hits
    # a second instruction reading one of them first: two instructions, two warnings
    body = LDST.replace("QUARTER", "3").replace("WAIT", "add.u32 %r9, %r7, 0;")
    res = _run(body, ".param .u64 out", [np.zeros((128, 2), np.uint32)])
    hits = [w for w in res.warnings if "before the tcgen05.wait::ld" in w]
    assert [h.split(" ", 1)[0] for h in hits] == ["t.ptx:31", "t.ptx:35"], hits
    assert " reads %r7, " in hits[0] and " reads %r8, " in hits[1], hits


# warp 0 stores to lanes 0..31 and hands them, fenced, through bar.sync to warp 4 (the same lane
# quarter), which loads them: the storing warp must wait for its tcgen05.st first
ST_HANDOFF = """
  .reg .b32 %r<40>;
  .reg .b64 %rd<8>;
  .reg .pred %p<8>;
  .shared .align 16 .b8 bars[16];
""" + tmem_setup(32, 1) + """  setp.ne.u32 %p3, %r2, 0;
  @%p3 bra NOST;
  add.u32 %r6, %r1, 7;
  tcgen05.st.sync.aligned.32x32b.x2.b32 [%r20], {%r1, %r6};
  WAITST
NOST:
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  tcgen05.fence::after_thread_sync;
  setp.ne.u32 %p4, %r2, 4;
  @%p4 bra NOLD;
  tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r7, %r8}, [%r20];
  tcgen05.wait::ld.sync.aligned;
  and.b32 %r9, %r1, 31;
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r9, 8;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v2.b32 [%rd3], {%r7, %r8};
NOLD:
""" + tmem_teardown(32)


def test_st_handed_to_another_warp_before_wait_st_cites_the_different_thread_pattern():
    # the error names the canonical pattern that states the rule (PTX ISA 9.7.16.6.4.4: the
    # issuing thread waits for its asynchronous tcgen05 operation before synchronizing with the
    # consumer), not only the tcgen05.wait section (CUTLASS 77's softmax -> correction row stats)
    with pytest.raises(CheckFailed, match=r"CTA 0 warp 4: tcgen05.ld reads TMEM \(CTA 0 lanes 0..31, columns 0..1\) "
                       r"written by the tcgen05.st at t.ptx:\d+ of warp 0 before that warp's tcgen05.wait::st "
                       r"\[PTX ISA .*9.7.16.6.4.4 \"Non-pipelined instructions, different thread\""):
        _run(ST_HANDOFF.replace("WAITST", ""), ".param .u64 out", [np.zeros((32, 2), np.uint32)], block=160)
    res = _run(ST_HANDOFF.replace("WAITST", "tcgen05.wait::st.sync.aligned;"), ".param .u64 out",
               [np.zeros((32, 2), np.uint32)], block=160)
    lane = np.arange(32)
    assert (res.outputs[0][:, 0] == lane).all() and (res.outputs[0][:, 1] == lane + 7).all()


def test_a_warp_outside_its_lane_quarter_is_reported():
    # every warp addresses lane quarter 0: warp 1 may reach lanes 32..63 only
    with pytest.raises(CheckFailed, match=r"t.ptx:28: CTA 0 warp (\d): tcgen05.st.32x32b.x2 \[0x0\]: war"
                       r"p \1 \(warp \1 of its "
                                          r"warpgroup\) may access TMEM lanes \d+..\d+ only, this reaches lanes 0..31"):
        _run(LDST.replace("QUARTER", "0").replace("WAIT", "tcgen05.wait::ld.sync.aligned;"),
             ".param .u64 out", [np.zeros((128, 2), np.uint32)])


# ---- one MMA through commit ------------------------------------------------------------------

M, N, K = 128, 16, 16
LBO, SBO = 128, 256          # K-major, no swizzle: K core matrices 128 B apart, 8-row groups 256 B
A_BYTES = M // 8 * SBO
BUF = A_BYTES + N // 8 * SBO


def _kmajor_image(mat_u16: np.ndarray) -> np.ndarray:
    """A (rows, 16) bf16 matrix in the canonical K-major, no-swizzle layout (PTX ISA
    "Shared memory matrix layouts": 8 rows x 16 bytes core matrices; the next 8 K elements at
    LBO, the next 8 rows at SBO), written here from the ISA text."""
    rows = mat_u16.shape[0]
    img = np.zeros(rows // 8 * SBO, dtype=np.uint8)
    raw = mat_u16.astype("<u2").view(np.uint8).reshape(rows, 32)
    for r in range(rows):
        for kb in range(32):
            img[(r % 8) * 16 + (r // 8) * SBO + (kb // 16) * LBO + kb % 16] = raw[r, kb]
    return img


IDESC = (1 << 4) | (1 << 7) | (1 << 10) | ((N >> 3) << 17) | ((M >> 4) << 24)   # f32 D, bf16 A/B, K-major
DESC = (1 << 46) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32)                     # version 1, no swizzle

MMA = f"""
  .reg .b32 %r<80>;
  .reg .b64 %rd<16>;
  .reg .pred %p<8>;
  .shared .align 1024 .b8 buf[{BUF}];
  .shared .align 16 .b8 bars[32];
{tmem_setup(32, 2)}  mov.u32 %r13, buf;
  @%p2 bra WAIT;
  ld.param.u64 %rd1, [src];
  mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [%r10], {BUF};
  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r13], [%rd1], {BUF}, [%r10];
L1:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r10], 0;
  @!%p3 bra L1;
  tcgen05.fence::after_thread_sync;
  cvt.u64.u32 %rd3, %r13;
  shr.u64 %rd4, %rd3, 4;
  or.b64 %rd5, %rd4, {DESC};
  add.s64 %rd6, %rd5, {A_BYTES >> 4};
  mov.u32 %r21, {IDESC};
  setp.ne.u32 %p4, %r1, %r1;
  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p4;
  COMMIT
  POKE
WAIT:
  WAITMMA
  FENCE
  and.b32 %r30, %r2, 3;
  shl.b32 %r31, %r30, 21;
  add.u32 %r32, %r20, %r31;
  tcgen05.ld.sync.aligned.32x32b.x16.b32 {{%r40, %r41, %r42, %r43, %r44, %r45, %r46, %r47,
    %r48, %r49, %r50, %r51, %r52, %r53, %r54, %r55}}, [%r32];
  tcgen05.wait::ld.sync.aligned;
  ld.param.u64 %rd7, [out];
  mul.wide.u32 %rd8, %r1, 64;
  add.s64 %rd9, %rd7, %rd8;
  st.global.v4.b32 [%rd9], {{%r40, %r41, %r42, %r43}};
  st.global.v4.b32 [%rd9+16], {{%r44, %r45, %r46, %r47}};
  st.global.v4.b32 [%rd9+32], {{%r48, %r49, %r50, %r51}};
  st.global.v4.b32 [%rd9+48], {{%r52, %r53, %r54, %r55}};
{tmem_teardown(32)}"""
PARTS = {"COMMIT": "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r11];",
         "POKE": "",
         "WAITMMA": "L2:\n  mbarrier.try_wait.parity.shared::cta.b64 %p5, [%r11], 0;\n  @!%p5 bra L2;",
         "FENCE": "tcgen05.fence::after_thread_sync;"}


def _mma_inputs(seed: int):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K)).astype(np.float32)
    a16 = (a.view(np.uint32) >> 16).astype(np.uint16)          # bf16 by truncation: exact in f32
    b16 = (b.view(np.uint32) >> 16).astype(np.uint16)
    src = np.concatenate([_kmajor_image(a16), _kmajor_image(b16)])
    ref = (a16.astype(np.uint32) << 16).view(np.float32).astype(np.float64) @ \
        (b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64).T
    return src, ref


def _mma(seed: int = 3, **edits):
    body = MMA
    for key, default in PARTS.items():
        body = body.replace(key, edits.get(key, default))
    src, ref = _mma_inputs(seed)
    out = np.zeros((128, N), dtype=np.float32)
    res = _run(body, ".param .u64 src, .param .u64 out", [src, out], seed=seed)
    return res, ref


@pytest.mark.parametrize("seed", [3, 4])
def test_mma_completes_at_its_commit_and_d_is_row_per_lane(seed):
    res, ref = _mma(seed)
    np.testing.assert_allclose(res.outputs[1], ref, rtol=1e-6, atol=1e-5)
    assert res.summary.warp_instructions > 50


def test_reading_d_before_the_commit_completes_is_reported():
    with pytest.raises(CheckFailed, match=r"t.ptx:\d+: CTA 0 warp 0: tcgen05.ld reads TMEM \(CTA 0 lanes"
                       r" 0..31, columns 0..15\) that "
                                          "the tcgen05.mma issued at t.ptx:46 still writes"):
        # warp 0 (whose lane 0 issued the MMA) reads D without waiting for the commit
        _mma(WAITMMA="@%p1 bra L2;\n  bra.uni NOWAIT;\n" + PARTS["WAITMMA"] + "\nNOWAIT:")


def test_missing_fence_after_thread_sync_is_reported():
    with pytest.raises(CheckFailed, match=r"t.ptx:57: CTA 0 warp \d: tcgen05.ld accesses TMEM \(CTA 0 la"
                       r"nes \d+..\d+, columns 0..15\) that "
                                          "CTA 0 warp 0 last wrote, after the mbarrier wait at t.ptx:51 without "
                                          "tcgen05.fence::after_thread_sync"):
        _mma(FENCE="")


def test_shared_memory_changed_under_an_mma_is_reported():
    with pytest.raises(CheckFailed, match="t.ptx:46: CTA 0 warp 0 lane 0: the shared memory of CTA 0 this "
                                          "tcgen05.mma reads changed before the operation completed"):
        _mma(POKE="st.shared.u32 [%r13], %r1;")


def test_dealloc_under_an_uncommitted_mma_is_reported():
    # no commit, no wait: warp 0 reaches the dealloc while the MMA is still in its pipeline
    with pytest.raises(CheckFailed, match="tcgen05.dealloc of TMEM columns 0..31 while the tcgen05.mma issued at "
                                          "t.ptx:46 still uses them"):
        _mma_without_reads()


def test_mma_never_committed_is_no_error_but_its_tmem_left_allocated_is():
    # the PTX ISA states no rule that a tcgen05.mma be committed before exit (a warning, issue 18
    # item 4); it does state that TMEM is deallocated before the kernel exits
    with pytest.raises(CheckFailed, match="TMEM not deallocated at exit: columns 0..31 allocated by warp 0 "
                                          ".*PTX ISA 9.7.16"):
        _mma_without_reads(dealloc=False)


def _mma_without_reads(dealloc: bool = True):
    body = MMA
    if not dealloc:
        body = body.replace("  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r20, 32;\n", "")
    for key, default in PARTS.items():
        body = body.replace(key, "" if key in ("COMMIT", "WAITMMA", "FENCE") else default)
    start = body.index("  and.b32 %r30")
    end = body.index("  tcgen05.fence::before_thread_sync;\n  bar.sync 0;\n  @%p1 bra END;")
    body = body[:start] + body[end:]
    src, _ = _mma_inputs(3)
    _run(body, ".param .u64 src, .param .u64 out", [src, np.zeros((128, N), np.float32)])


# ---- cta_group::2: collective allocation across the CTA pair --------------------------------------

PAIR = """
  .reg .b32 %r<20>;
  .reg .b64 %rd<4>;
  .reg .pred %p<4>;
  .shared .align 16 .b8 slot[16];
  mov.u32 %r1, slot;
  mov.u32 %r2, %cluster_ctarank;
  tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%r1], 64;
  tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;
  ld.shared.u32 %r3, [%r1];
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r2, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  SKIP
  tcgen05.dealloc.cta_group::2.sync.aligned.b32 %r3, 64;
DONE:
  ret;
"""


def test_pair_alloc_gives_both_ctas_the_same_columns():
    out = np.full(2, 0xFFFF, dtype=np.uint32)
    text = HEAD + ".visible .entry k(.param .u64 out)\n{\n" + PAIR.replace("SKIP", "") + "\n}\n"
    res = emu.launch(text, "k", grid=2, block=32, cluster=(2, 1, 1), args=[out], seed=2, file="t.ptx")
    assert res.outputs[0].tolist() == [0, 0]


def test_pair_dealloc_skipped_by_the_odd_cta_is_reported():
    # the odd CTA skips the collective dealloc and exits holding its columns (the even CTA's
    # warp would wait for it forever)
    body = PAIR.replace("SKIP", "setp.ne.u32 %p1, %r2, 0;\n  @%p1 bra DONE;")
    text = HEAD + ".visible .entry k(.param .u64 out)\n{\n" + body + "\n}\n"
    with pytest.raises(CheckFailed, match="CTA 1: TMEM not deallocated at exit: columns 0..63"):
        emu.launch(text, "k", grid=2, block=32, cluster=(2, 1, 1), args=[np.zeros(2, np.uint32)], seed=2,
                   file="t.ptx")


def test_mma_into_unallocated_columns_is_reported_at_issue():
    # D at column 32 of a 32-column allocation: caught when the MMA is issued, not later
    with pytest.raises(CheckFailed, match=r"t.ptx:46: CTA 0 warp 0 lane 0: tcgen05.mma D: TMEM column 32"
                       r" \(of 32..47\) is not "
                                          "allocated"):
        body = MMA.replace("tcgen05.mma.cta_group::1.kind::f16 [%r20]", "tcgen05.mma.cta_group::1.kind::f16 [%r20+32]")
        for key, default in PARTS.items():
            body = body.replace(key, default)
        src, _ = _mma_inputs(3)
        _run(body, ".param .u64 src, .param .u64 out", [src, np.zeros((128, N), np.float32)])


# ---- a tcgen05.cp behind the same thread's in-flight MMA --------------------------------------
# The PTX ISA pipelines cp -> mma but lists no mma -> cp pair (9.7.16.6.2); CUTLASS's sm100
# block-scaled mainloop and DeepGEMM's sm100 FP8 GEMM copy each K block's scale factors into the
# same TMEM columns while the previous block's MMAs may still run, relying on one thread's
# tcgen05 operations executing in issue order. The simulator runs such a copy after them, with a
# warning. Here thread 0 copies A's 128 rows x 32 bytes over D's columns 0..7 right after
# issuing the MMA that writes them: D's columns 0..7 end as the copy, 8..15 as the product.

CP_OVER_D = "tcgen05.cp.cta_group::1.128x256b [%r20], %rd5;"


def test_a_copy_behind_the_threads_own_mma_lands_after_it_with_a_warning():
    res, ref = _mma(COMMIT=CP_OVER_D + "\n  " + PARTS["COMMIT"])
    src, _ = _mma_inputs(3)
    a_rows = np.zeros((M, 32), np.uint8)          # A's bf16 rows back out of the K-major image
    for r in range(M):
        for kb in range(32):
            a_rows[r, kb] = src[(r % 8) * 16 + (r // 8) * SBO + (kb // 16) * LBO + kb % 16]
    out = res.outputs[1]
    assert (out[:, :8].view(np.uint32) == a_rows.view("<u4")).all()
    np.testing.assert_allclose(out[:, 8:], ref[:, 8:], rtol=1e-6, atol=1e-5)
    hits = [w for w in res.warnings if "no tcgen05 pipeline orders the two" in w]
    assert len(hits) == 1 and "the tcgen05.mma issued at t.ptx:46 by the same thread still uses" in hits[0], \
        res.warnings


def test_a_copy_over_another_threads_in_flight_mma_is_an_error():
    # thread 32 (warp 1), which did not issue the MMA, copies over D before the commit completes:
    # nothing orders the two (caught at the copy, or at the MMA by the TMEM happens-before check)
    body_edit = PARTS["WAITMMA"].replace("L2:", "setp.ne.u32 %p6, %r1, 32;\n  @%p6 bra L2;\n  cvt.u64.u32 %rd10, "
                                         "%r13;\n  shr.u64 %rd11, %rd10, 4;\n  or.b64 %rd12, %rd11, "
                                         f"{DESC};\n  {CP_OVER_D.replace('%rd5', '%rd12')}\nL2:")
    with pytest.raises(CheckFailed, match=r"tcgen05.cp writes TMEM \(CTA 0 lanes 0..127, columns 0..7\) that the "
                                          r"tcgen05.mma issued at t.ptx:46 still writes|TMEM hand-off race in CTA 0 .* "
                                          r"the tcgen05.cp issued by CTA 0 warp 1"):
        _mma(WAITMMA=body_edit)


# ---- relax=("tcgen05-fences",): the hand-off fences' errors as warnings -------------------------
# CUTLASS 7107b05's sm100 kernels and Triton 3.9's sm_100a tl.dot hand TMEM between threads with no
# tcgen05.fence; porter emu run --relax tcgen05-fences reports each site once and runs on.

def _missing_fence_relaxed():
    """The MMA hand-off kernel with its fence left out, run with tcgen05-fences relaxed: the
    result and the fp64 reference."""
    body = MMA
    for key, default in PARTS.items():
        body = body.replace(key, "" if key == "FENCE" else default)
    src, ref = _mma_inputs(3)
    text = HEAD + f".visible .entry k(.param .u64 src, .param .u64 out)\n{{\n{body}\n}}\n"
    res = emu.launch(text, "k", grid=1, block=128, args=[src, np.zeros((128, N), np.float32)], seed=3,
                     file="t.ptx", relax=["tcgen05-fences"])
    return res, ref


def test_a_missing_fence_relaxed_is_one_warning_and_the_run_goes_on():
    res, ref = _missing_fence_relaxed()
    np.testing.assert_allclose(res.outputs[1], ref, rtol=1e-6, atol=1e-5)
    hits = [w for w in res.warnings if "(relaxed by --relax tcgen05-fences)" in w]
    assert len(hits) == 1 and "without tcgen05.fence::after_thread_sync" in hits[0] and "PTX ISA 9.7.16.6.4" in hits[0]


def test_a_relaxed_error_cites_its_section_once():
    # the checker's error carries its section already; the relaxed warning does not add it again
    res, _ = _missing_fence_relaxed()
    hits = [w for w in res.warnings if "(relaxed by --relax tcgen05-fences)" in w]
    assert len(hits) == 1 and hits[0].count('[PTX ISA 9.7.16.6.4.2 "Non-pipelined instructions') == 1, hits
    # a relaxed finding built without one (tmem-lanes) gets it
    lanes = HEAD + ".visible .entry k(.param .u64 out)\n{\n" + LDST.replace("QUARTER", "0").replace(
        "WAIT", "tcgen05.wait::ld.sync.aligned;") + "\n}\n"
    res = emu.launch(lanes, "k", grid=1, block=128, args=[np.zeros((128, 2), np.uint32)], seed=1, file="t.ptx",
                     relax=("tmem-lanes",))
    hits = [w for w in res.warnings if "(relaxed by --relax tmem-lanes)" in w]
    assert hits and all(w.count("[PTX ISA 9.7.16 \"Tensor Memory\"") == 1 for w in hits), hits


def test_relax_names_only_rules_porter_can_relax():
    with pytest.raises(emu.EmuError, match=r"relax 'tcgen05-fence': not a rule porter can relax \(rules: "
                                           r"tcgen05-fences, tmem-lanes\)"):
        emu.launch(HEAD + ".visible .entry k()\n{\n  ret;\n}\n", "k", 1, 32, [], relax="tcgen05-fence")


def test_tmem_lanes_relaxed_route_a_warps_lane_field_to_its_own_quarter():
    # every warp addresses lane quarter 0 (DeepGEMM's sm100 epilogues do): relaxed, each warp's
    # st and ld run at its own quarter, as release hardware routes them, with one warning each
    text = HEAD + ".visible .entry k(.param .u64 out)\n{\n" + LDST.replace("QUARTER", "0").replace(
        "WAIT", "tcgen05.wait::ld.sync.aligned;") + "\n}\n"
    res = emu.launch(text, "k", grid=1, block=128, args=[np.zeros((128, 2), np.uint32)], seed=1, file="t.ptx",
                     relax=("tmem-lanes",))
    tid = np.arange(128)
    assert (res.outputs[0][:, 0] == 3 * tid).all() and (res.outputs[0][:, 1] == 3 * tid + 1).all()
    hits = [w for w in res.warnings if "(relaxed by --relax tmem-lanes)" in w]
    assert len(hits) == 2 and all("may access TMEM lanes" in w and "PTX ISA 9.7.16" in w for w in hits), res.warnings
