"""Idioms of hand-written (non-porter) kernels in porter's simulator: each a minimal PTX
kernel written here, in the shape NVRTC gives inline asm (every ``asm`` statement its own
``{ }`` block), that the simulator got wrong or refused before (issue 18 items 1-2)."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu

from emu_tma_ptx import tma_load_and_wait

# a tensor load without .tile (ptxas defaults the load mode to tile) into shared::cluster
NO_TILE_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"

HEAD = ".version 8.6\n.target sm_90a\n.address_size 64\n"
DECLS = (".reg .pred %p<8>;\n.reg .b16 %rs<8>;\n.reg .b32 %r<64>;\n.reg .f32 %f<32>;\n"
         ".reg .b64 %rd<32>;\n")


def kernel(body: str, params: str = ".param .u64 out", pre: str = "", directives: str = "",
           target: str = "sm_90a") -> str:
    """An entry ``k`` whose lanes have %rd3 = &out[tid] (u32 elements) and %r0 = tid."""
    head = HEAD.replace("sm_90a", target)
    return head + pre + f".visible .entry k({params}){directives}\n{{\n{DECLS}" \
        "ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\nmov.u32 %r0, %tid.x;\n" \
        f"mul.wide.u32 %rd2, %r0, 4;\nadd.s64 %rd3, %rd1, %rd2;\n{body}\nret;\n}}\n"


def run(body: str, n: int = 32, dtype=np.uint32, threads: int = 32, **kw):
    pre = kw.pop("pre", "")
    directives = kw.pop("directives", "")
    target = kw.pop("target", "sm_90a")
    kw.setdefault("budget", 200_000)        # a wrong wait fails in a second, not at the default budget
    out = np.zeros(n, dtype=dtype)
    res = emu.launch(kernel(body, pre=pre, directives=directives, target=target), "k", grid=1, block=threads,
                     args=[out], **kw)
    return res.outputs[0]


BARRIER = ".shared .align 8 .b64 bar;\n"


# ---- issue 18 item 1: two silent bugs ----------------------------------------------------------

@pytest.mark.parametrize("wait", ["try_wait", "test_wait"])
def test_wait_on_the_state_token_of_an_arrive_that_completed_the_phase(wait):
    # cuda::barrier's arrive-then-wait: the token names the phase the arrive took part in
    # (PTX ISA mbarrier.arrive: "the state of the mbarrier object before the arrive"), so a
    # wait on the token of the arrive that completed that phase returns at once.
    body = f"""
    mov.u32 %r1, bar;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], 32;
    bar.sync 0;
    mbarrier.arrive.shared::cta.b64 %rd4, [%r1];
    {{
    .reg .pred P1;
    LAB_WAIT:
    mbarrier.{wait}.shared::cta.b64 P1, [%r1], %rd4;
    @P1 bra DONE;
    bra LAB_WAIT;
    DONE:
    }}
    st.global.u32 [%rd3], 7;
    """
    out = run(body, pre=BARRIER)
    assert (out == 7).all()


def test_labels_repeated_in_inline_asm_blocks_resolve_in_their_own_block():
    # Two copies of one inline-asm loop (a spin count to 3, then 5): each block's LOOP and
    # DONE are its own, as ptxas scopes them; resolving both to the last definition sent
    # the first block's branches into the second.
    block = """
    {{
    .reg .pred P1;
    .reg .b32 R;
    mov.u32 R, 0;
    LOOP:
    setp.ge.u32 P1, R, {n};
    @P1 bra DONE;
    add.u32 R, R, 1;
    bra LOOP;
    DONE:
    add.u32 %r{dst}, R, 0;
    }}
    """
    body = block.format(n=3, dst=5) + block.format(n=5, dst=6) + """
    mad.lo.u32 %r7, %r5, 10, %r6;
    st.global.u32 [%rd3], %r7;
    """
    out = run(body)
    assert (out == 35).all()


def test_a_label_of_the_kernel_block_is_seen_from_an_inner_block():
    body = """
    mov.u32 %r5, 1;
    {
    .reg .pred P1;
    setp.eq.u32 P1, %r0, %r0;
    @P1 bra $L_out;
    }
    mov.u32 %r5, 2;
    $L_out:
    st.global.u32 [%rd3], %r5;
    """
    assert (run(body) == 1).all()


# ---- issue 18 item 2: forms ptxas accepts ---------------------------------------------------------

def _scaled_mma(selectors: str, setup: str = "") -> str:
    """One block-scaled mma.sync (sm_120a) over per-lane records: a (4 words), b (2), c (4),
    scale words (2) in; d (4) out."""
    op = "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0"
    sa, sb = selectors.split("|")
    return ".version 8.7\n.target sm_120a\n.address_size 64\n" + f"""
.visible .entry k(.param .u64 p_in, .param .u64 p_out)
{{
    .reg .b16 %rs<8>;
    .reg .b32 %r<16>;
    .reg .f32 %f<12>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_in];
    ld.param.u64 %rd2, [p_out];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 64;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.v4.b32 {{%r2, %r3, %r4, %r5}}, [%rd4];
    ld.global.v2.b32 {{%r6, %r7}}, [%rd4+16];
    ld.global.v4.f32 {{%f1, %f2, %f3, %f4}}, [%rd4+32];
    ld.global.v2.b32 {{%r8, %r9}}, [%rd4+48];
    {setup}
    {op} {{%f5, %f6, %f7, %f8}}, {{%r2, %r3, %r4, %r5}}, {{%r6, %r7}}, {{%f1, %f2, %f3, %f4}}, %r8, {sa}, %r9, {sb};
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd6, %rd2, %rd5;
    st.global.v4.f32 [%rd6], {{%f5, %f6, %f7, %f8}};
    ret;
}}
"""


def test_block_scale_selectors_in_registers_match_the_immediate_form():
    # CUTLASS passes the scale byte/thread ids as .u16 registers ("h" constraints)
    rng = np.random.default_rng(3)
    rec = rng.integers(0, 1 << 32, size=(32, 16), dtype=np.uint64).astype(np.uint32)
    rec[:, 0:6] &= 0x3B3B3B3B                                   # finite e4m3 codes
    rec[:, 8:12] = rng.standard_normal((32, 4)).astype(np.float32).view(np.uint32)
    rec[:, 12:14] = rng.integers(120, 134, size=(32, 8)).astype(np.uint8).view("<u4").reshape(32, 2)

    def go(text):
        out = np.zeros((32, 4), np.float32)
        return emu.launch(text, "k", grid=1, block=32, args=[rec, out]).outputs[1]
    want = go(_scaled_mma("{3, 1}|{2, 3}"))
    got = go(_scaled_mma("{%rs1, %rs2}|{%rs3, %rs4}",
                         "mov.u16 %rs1, 3;\n mov.u16 %rs2, 1;\n mov.u16 %rs3, 2;\n mov.u16 %rs4, 3;"))
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(want).all() and (want != 0).any()


@pytest.mark.parametrize("typ", ["u64", "s64"])
def test_mul_hi_64_bit(typ):
    # NVRTC's 64-bit division by a constant: the top half of the 128-bit product
    rng = np.random.default_rng(5)
    a = rng.integers(0, 1 << 63, size=32, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = np.full(32, 0xAAAAAAAAAAAAAAAB, dtype=np.uint64)
    text = HEAD + f"""
.visible .entry k(.param .u64 inp, .param .u64 out)
{{
{DECLS}
    ld.param.u64 %rd1, [inp];
    ld.param.u64 %rd5, [out];
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd2, %r0, 8;
    add.s64 %rd3, %rd1, %rd2;
    add.s64 %rd6, %rd5, %rd2;
    ld.global.u64 %rd4, [%rd3];
    mul.hi.{typ} %rd7, %rd4, -6148914691236517205;
    st.global.u64 [%rd6], %rd7;
    ret;
}}
"""
    out = np.zeros(32, np.uint64)
    got = emu.launch(text, "k", grid=1, block=32, args=[a, out]).outputs[1]

    def signed(v):
        return v - (1 << 64) if typ == "s64" and v >> 63 else v
    want = [((signed(int(x)) * signed(int(y))) >> 64) & ((1 << 64) - 1) for x, y in zip(a, b)]
    assert [int(v) for v in got] == want


def test_a_one_element_vector_is_a_scalar():
    body = """
    mov.b32 {%r5}, 41;
    add.u32 {%r6}, {%r5}, 1;
    st.global.u32 [%rd3], {%r6};
    """
    assert (run(body) == 42).all()


def test_maxntid_with_one_value():
    assert (run("st.global.u32 [%rd3], 3;", directives="\n.maxntid 128") == 3).all()
    with pytest.raises(emu.EmuError, match="at most"):
        run("st.global.u32 [%rd3], 3;", directives="\n.maxntid 16")


def test_mbarrier_complete_tx_without_an_arrive():
    # expect 64 bytes with the arrive; a thread completes them by hand in two halves
    body = """
    mov.u32 %r1, bar;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], 1;
    bar.sync 0;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r1], 64;
    @%p1 mbarrier.complete_tx.shared::cta.relaxed.cta.b64 [%r1], 32;
    bar.sync 0;
    mbarrier.test_wait.parity.shared::cta.b64 %p2, [%r1], 0;
    selp.u32 %r5, 1, 0, %p2;
    bar.sync 0;
    @%p1 mbarrier.complete_tx.shared::cta.b64 [%r1], 32;
    bar.sync 0;
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r1], 0;
    selp.u32 %r6, 2, 0, %p3;
    add.u32 %r7, %r5, %r6;
    st.global.u32 [%rd3], %r7;
    """
    assert (run(body, pre=BARRIER) == 2).all()


# ---- TMA stores in bulk async-groups ------------------------------------------------------------

from porter.runtime.tensormap import TensorMapParams  # noqa: E402  (test-side: builds the argument)


def _store_kernel(before_wait: str = "", fence: str = "fence.proxy.async.shared::cta;",
                  wait: str = "cp.async.bulk.wait_group.read 0;",
                  op: str = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") -> str:
    """32 threads write an 8 x 32 f32 tile (value r * 32 + c) into shared memory in the
    128B-swizzled layout (address bits [4:6] ^= [7:9]), then thread 0 stores it to global
    through the tensor map with one bulk group."""
    return HEAD + f"""
.visible .entry k(.param .align 64 .b8 tmap[128])
{{
{DECLS}
    .shared .align 1024 .b8 tile[1024];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    mov.u32 %r2, 0;
$row:
    shl.b32 %r3, %r2, 7;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r3, %r4;
    add.u32 %r5, %r5, %r1;            // linear address of element (r, c)
    shr.u32 %r6, %r5, 7;
    and.b32 %r6, %r6, 7;
    shl.b32 %r6, %r6, 4;
    xor.b32 %r7, %r5, %r6;            // where the 128B swizzle puts it
    shl.b32 %r8, %r2, 5;
    add.u32 %r8, %r8, %r0;
    cvt.rn.f32.u32 %f1, %r8;
    st.shared.f32 [%r7], %f1;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p1, %r2, 8;
    @%p1 bra $row;
    {fence}
    bar.sync 0;
    setp.eq.u32 %p2, %r0, 0;
    mov.u64 %rd1, tmap;
    cvta.param.u64 %rd1, %rd1;
    @%p2 {op} [%rd1, {{0, 0}}], [%r1];
    @%p2 cp.async.bulk.commit_group;
    {before_wait}
    @%p2 {wait}
    ret;
}}
"""


def _store(text, rows=8, fill=-1.0):
    out = np.full((rows, 32), fill, np.float32)
    p = TensorMapParams("out", "FLOAT32", dims=(32, rows), strides=(128,), box=(32, 8), swizzle="128B")
    res = emu.launch(text, "k", grid=1, block=32, args=[emu.tensor_map(p, out)], budget=200_000)
    return res.outputs[0]


def test_tma_store_epilogue_with_bulk_groups():
    got = _store(_store_kernel())
    np.testing.assert_array_equal(got, np.arange(256, dtype=np.float32).reshape(8, 32))


def test_tma_store_clips_rows_outside_the_tensor():
    got = _store(_store_kernel(), rows=5)                   # box of 8 rows, tensor of 5: rows 5-7 dropped
    np.testing.assert_array_equal(got, np.arange(160, dtype=np.float32).reshape(5, 32))


def test_shared_source_rewritten_before_wait_group_read_is_reported():
    bad = "@%p2 st.shared.f32 [%r1], 0f40000000;"
    with pytest.raises(emu.CheckFailed, match="rewritten before the cp.async.bulk.wait_group.read"):
        _store(_store_kernel(before_wait=bad))


def test_tma_store_without_fence_proxy_async_is_reported():
    with pytest.raises(emu.CheckFailed, match="fence.proxy.async"):
        _store(_store_kernel(fence=""))


def test_bulk_store_non_tensor_and_plain_wait_group():
    text = HEAD + f"""
.visible .entry k(.param .u64 out)
{{
{DECLS}
    .shared .align 128 .b8 buf[128];
    ld.param.u64 %rd1, [out];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, buf;
    shl.b32 %r2, %r0, 2;
    add.u32 %r3, %r1, %r2;
    add.u32 %r4, %r0, 100;
    st.shared.u32 [%r3], %r4;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r1], 128;
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group 0;
    ret;
}}
"""
    out = np.zeros(32, np.uint32)
    got = emu.launch(text, "k", grid=1, block=32, args=[out], budget=200_000).outputs[0]
    np.testing.assert_array_equal(got, np.arange(32) + 100)


# ---- issue 18 item 3: shared memory as the hardware lays it out -------------------------------

def test_swizzled_tma_load_to_a_destination_off_the_pattern_boundary():
    # an 8-byte barrier then a 128-byte aligned tile: the tile is not on a 1024 B boundary; the
    # 128B swizzle is a function of the address bits, so the box lands with the pattern shifted
    text = HEAD + f"""
.visible .entry k(.param .align 64 .b8 tmap[128], .param .u64 out)
{{
{DECLS}
    .shared .align 8 .b64 bar;
    .shared .align 128 .b8 tile[1024];
    ld.param.u64 %rd9, [out];
{tma_load_and_wait(1024, "0, 0", load=NO_TILE_LOAD, label="$w")}    mov.u32 %r2, 0;
$copy:                                   // out[i] = the tile's word i as it lies in shared memory
    shl.b32 %r3, %r2, 5;
    add.u32 %r3, %r3, %r0;
    shl.b32 %r4, %r3, 2;
    add.u32 %r5, %r1, %r4;
    ld.shared.u32 %r6, [%r5];
    mul.wide.u32 %rd3, %r3, 4;
    add.s64 %rd4, %rd9, %rd3;
    st.global.u32 [%rd4+4], %r6;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p3, %r2, 8;
    @%p3 bra $copy;
    @%p1 st.global.u32 [%rd9], %r1;      // out[0]: the tile's address
    ret;
}}
"""
    src = np.arange(256, dtype=np.uint32).reshape(8, 32)
    p = TensorMapParams("in", "UINT32", dims=(32, 8), strides=(128,), box=(32, 8), swizzle="128B")
    out = np.zeros(257, np.uint32)
    got = emu.launch(text, "k", grid=1, block=32, args=[emu.tensor_map(p, src), out], budget=200_000).outputs[1]
    base = int(got[0])
    assert base % 1024                                   # the case: off the pattern boundary
    addr = base + np.arange(1024)
    landed = (addr ^ (((addr >> 7) & 7) << 4)) - base    # PTX ISA 5.5.7, from the address bits
    want = np.zeros(1024, np.uint8)
    want[landed] = src.view(np.uint8).reshape(-1)
    np.testing.assert_array_equal(got[1:], want.view(np.uint32))


@pytest.mark.parametrize("arrive", ["barrier.cluster.arrive.release.aligned", "barrier.cluster.arrive.aligned",
                                    "barrier.cluster.arrive.relaxed.aligned"])
def test_peer_barrier_by_masking_the_rank_bit(arrive):
    # CUTLASS's 2-SM idiom: both CTAs of a pair arrive on the even CTA's barrier, addressed by
    # clearing bit 24 of their own shared address (addr & 0xFEFFFFFF); the odd CTA's own
    # addresses carry its rank there, as the hardware's do
    text = HEAD + f"""
.visible .entry k(.param .u64 out) .reqnctapercluster 2, 1, 1
{{
{DECLS}
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [out];
    mov.u32 %r0, %tid.x;
    mov.u32 %r10, %cluster_ctarank;
    mov.u32 %r1, bar;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r1], 2;
    fence.mbarrier_init.release.cluster;   // itself a release: any arrive form publishes the init
    {arrive};
    barrier.cluster.wait.acquire.aligned;
    and.b32 %r2, %r1, -16777217;          // 0xFEFFFFFF: the even CTA's barrier
    @%p1 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r2];
    setp.eq.u32 %p2, %r10, 0;
    @!%p2 bra $out;
$w:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r1], 0;
    @!%p3 bra $w;
$out:
    mul.wide.u32 %rd2, %r10, 4;
    add.s64 %rd3, %rd1, %rd2;
    @%p1 st.global.u32 [%rd3], %r1;
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    ret;
}}
"""
    out = np.zeros(2, np.uint32)
    got = emu.launch(text, "k", grid=2, block=32, args=[out], budget=200_000).outputs[0]
    assert int(got[1]) == int(got[0]) | 1 << 24          # rank 1's address of the same variable


def test_cluster_launch_control_takes_over_clusters_not_yet_started():
    # a persistent-style loop: do tile ctaid, then try_cancel a not-yet-launched CTA and do its
    # tile, until a try_cancel cancels nothing; every tile is done once, some by another CTA
    text = HEAD.replace("sm_90a", "sm_100a") + f"""
.visible .entry k(.param .u64 out, .param .u64 who)
{{
{DECLS}
    .reg .b128 %q<2>;
    .shared .align 16 .b8 resp[16];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd5, [who];
    mov.u32 %r0, %tid.x;
    setp.ne.u32 %p1, %r0, 0;
    @%p1 bra $end;
    mov.u32 %r1, bar;
    mov.u32 %r2, resp;
    mbarrier.init.shared::cta.b64 [%r1], 1;
    mov.u32 %r3, %ctaid.x;             // the tile to do
    mov.u32 %r4, 0;                    // phase
$tile:
    mul.wide.u32 %rd2, %r3, 4;
    add.s64 %rd3, %rd1, %rd2;
    add.u32 %r5, %r3, 1;
    st.global.u32 [%rd3], %r5;
    add.s64 %rd6, %rd5, %rd2;
    mov.u32 %r6, %ctaid.x;
    st.global.u32 [%rd6], %r6;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r1], 16;
    clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%r2], [%r1];
$w:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r4;
    @!%p2 bra $w;
    xor.b32 %r4, %r4, 1;
    ld.shared.b128 %q1, [%r2];
    clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p3, %q1;
    @!%p3 bra $end;
    clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r3, %q1;
    bra $tile;
$end:
    ret;
}}
"""
    n = 40                                   # more CTAs than the simulator keeps resident at once
    out, who = np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    res = emu.launch(text, "k", grid=n, block=32, args=[out, who], budget=2_000_000)
    np.testing.assert_array_equal(res.outputs[0], np.arange(n) + 1)
    assert (res.outputs[1] != np.arange(n)).any()          # some tiles taken over


# ---- issue 18 item 4: the async-proxy check covers tcgen05.mma operands ------------------------

@pytest.mark.parametrize("fence", ["", "fence.proxy.async.shared::cta;"])
def test_generic_store_to_a_tcgen05_mma_operand_needs_fence_proxy_async(fence):
    import test_emu_tcgen05_ops as t5

    wait = "  @!%p3 bra L1;\n"
    body = t5.MMA.replace(wait, wait + f"  st.shared.u32 [%r13+16], %r1;\n  {fence}\n", 1)
    for key, default in t5.PARTS.items():
        body = body.replace(key, default)
    src, _ = t5._mma_inputs(3)
    out = np.zeros((128, t5.N), dtype=np.float32)
    if fence:
        t5._run(body, ".param .u64 src, .param .u64 out", [src, out], seed=3)
    else:
        with pytest.raises(emu.CheckFailed, match="tcgen05.mma of .*written by generic stores with no "
                                                  "fence.proxy.async"):
            t5._run(body, ".param .u64 src, .param .u64 out", [src, out], seed=3)


# ---- forms met in public kernels' PTX (NVRTC's output for ordinary C++) -------------------------

def _bits_case(op: str, a, b, c):
    text = HEAD + f"""
.visible .entry k(.param .u64 inp, .param .u64 out)
{{
{DECLS}
    ld.param.u64 %rd1, [inp];
    ld.param.u64 %rd5, [out];
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd2, %r0, 12;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.u32 %r1, [%rd3];
    ld.global.u32 %r2, [%rd3+4];
    ld.global.u32 %r3, [%rd3+8];
    {op}
    mul.wide.u32 %rd6, %r0, 4;
    add.s64 %rd7, %rd5, %rd6;
    st.global.u32 [%rd7], %r4;
    ret;
}}
"""
    inp = np.stack([a, b, c], axis=1).astype(np.uint32)
    out = np.zeros(32, np.uint32)
    return [int(x) for x in emu.launch(text, "k", grid=1, block=32, args=[inp, out]).outputs[1]]


RNG = np.random.default_rng(17)
A, B = RNG.integers(0, 1 << 32, 32, dtype=np.uint64), RNG.integers(0, 1 << 32, 32, dtype=np.uint64)
C = RNG.integers(0, 1 << 32, 32, dtype=np.uint64)


def _prmt(a, b, s):
    pool = (b << 32) | a
    out = 0
    for k in range(4):
        n = (s >> 4 * k) & 0xF
        byte = (pool >> 8 * (n & 7)) & 0xFF
        if n & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << 8 * k
    return out


def test_prmt_default_mode():
    sel = RNG.integers(0, 1 << 16, 32, dtype=np.uint64)
    got = _bits_case("prmt.b32 %r4, %r1, %r2, %r3;", A, B, sel)
    assert got == [_prmt(int(a), int(b), int(s)) for a, b, s in zip(A, B, sel)]


@pytest.mark.parametrize("lut", [0x96, 0xE8, 0xF8, 0x1E])
def test_lop3_truth_tables(lut):
    got = _bits_case(f"lop3.b32 %r4, %r1, %r2, %r3, {lut};", A, B, C)

    def ref(a, b, c):
        return sum(((lut >> ((a >> j & 1) << 2 | (b >> j & 1) << 1 | (c >> j & 1))) & 1) << j for j in range(32))
    assert got == [ref(int(a), int(b), int(c)) for a, b, c in zip(A, B, C)]


@pytest.mark.parametrize("typ", ["u32", "s32"])
def test_bfe(typ):
    pos, ln = RNG.integers(0, 40, 32, dtype=np.uint64), RNG.integers(0, 40, 32, dtype=np.uint64)
    got = _bits_case(f"bfe.{typ} %r4, %r1, %r2, %r3;", A, pos, ln)

    def ref(a, p, n):
        if n == 0:
            return 0
        s = (a >> min(p + n - 1, 31)) & 1 if typ == "s32" else 0
        return sum((((a >> (p + j)) & 1) if (j < n and p + j < 32) else s) << j for j in range(32))
    assert got == [ref(int(a), int(p), int(n)) for a, p, n in zip(A, pos, ln)]


@pytest.mark.parametrize("mode", ["l.wrap", "r.wrap", "l.clamp", "r.clamp"])
def test_funnel_shift(mode):
    n = RNG.integers(0, 64, 32, dtype=np.uint64)
    got = _bits_case(f"shf.{mode}.b32 %r4, %r1, %r2, %r3;", A, B, n)

    def ref(a, b, k):
        k = k & 31 if "wrap" in mode else min(k, 32)
        pair = (b << 32) | a
        return ((pair << k) >> 32) & 0xFFFFFFFF if mode[0] == "l" else (pair >> k) & 0xFFFFFFFF
    assert got == [ref(int(a), int(b), int(k)) for a, b, k in zip(A, B, n)]


def test_brev():
    got = _bits_case("brev.b32 %r4, %r1;", A, B, C)
    assert got == [int(f"{int(a):032b}"[::-1], 2) for a in A]


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_pair_conversions(fmt):
    # DeepGEMM-style quantisation: two f32 to an FP8 pair (first source to the upper byte,
    # .satfinite clamps), and back to f16x2
    import ml_dtypes
    fp8 = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
    big = 448.0 if fmt == "e4m3" else 57344.0
    hi = (RNG.standard_normal(32) * 100).astype(np.float32)
    lo = (RNG.standard_normal(32) * 3).astype(np.float32)
    hi[:3] = [1e9, -1e9, np.inf]
    got = _bits_case(f"cvt.rn.satfinite.{fmt}x2.f32 %rs1, %r1, %r2;\n cvt.u32.u16 %r4, %rs1;",
                     hi.view(np.uint32), lo.view(np.uint32), C)
    want_hi = np.clip(hi, -big, big).astype(fp8).view(np.uint8).astype(int)
    want_lo = np.clip(lo, -big, big).astype(fp8).view(np.uint8).astype(int)
    assert got == [(h << 8) | l for h, l in zip(want_hi, want_lo)]
    back = _bits_case(f"cvt.u16.u32 %rs1, %r1;\n cvt.rn.f16x2.{fmt}x2 %r4, %rs1;", np.array(got, np.uint64), B, C)
    halves = np.array(back, np.uint32)
    np.testing.assert_array_equal((halves & 0xFFFF).astype(np.uint16).view(np.float16),
                                  want_lo.astype(np.uint8).view(fp8).astype(np.float16))
    np.testing.assert_array_equal((halves >> 16).astype(np.uint16).view(np.float16),
                                  want_hi.astype(np.uint8).view(fp8).astype(np.float16))


@pytest.mark.parametrize("op,typ", [("add", "u32"), ("min", "s32"), ("max", "u32"), ("xor", "b32")])
def test_redux_sync(op, typ):
    got = _bits_case(f"redux.sync.{op}.{typ} %r4, %r1, -1;", A, B, C)
    vals = [int(a) for a in A]
    if typ == "s32":
        vals = [v - (1 << 32) if v >> 31 else v for v in vals]
    ref = {"add": lambda v: sum(v), "min": min, "max": max,
           "xor": lambda v: np.bitwise_xor.reduce(np.array(v, np.uint64))}[op](vals)
    assert got == [int(ref) & 0xFFFFFFFF] * 32


def test_getctarank_of_a_mapa_address():
    text = HEAD + f"""
.visible .entry k(.param .u64 out) .reqnctapercluster 2, 1, 1
{{
{DECLS}
    .shared .align 4 .b32 cell;
    ld.param.u64 %rd1, [out];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, cell;
    mapa.shared::cluster.u32 %r2, %r1, 1;
    getctarank.shared::cluster.u32 %r3, %r2;
    getctarank.shared::cluster.u32 %r4, %r1;
    mov.u32 %r5, %cluster_ctarank;
    mad.lo.u32 %r6, %r4, 10, %r3;
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 st.global.u32 [%rd3], %r6;
    ret;
}}
"""
    out = np.zeros(2, np.uint32)
    got = emu.launch(text, "k", grid=2, block=32, args=[out]).outputs[0]
    assert list(got) == [1, 11]                          # own rank * 10 + the mapa target's rank


# ---- issue 18 item 4: no error for a rule the ISA does not state --------------------------------

def test_tmem_lane_field_beyond_127_and_dealloc_by_another_warp():
    from porter.emu.units.tmem import TensorMemory

    t = TensorMemory()
    a = t.alloc(0, 32)
    t.st(1, a | (160 << 16), "32x32b", 1, np.arange(32, dtype=np.uint32)[:, None])   # lane 160 = 32 (mod 128)
    got = t.ld(1, a | (32 << 16), "32x32b", 1)
    np.testing.assert_array_equal(got[:, 0], np.arange(32))
    t.dealloc(2, a, 32)


def test_tma_reduce_add_epilogue():
    got = _store(_store_kernel(op="cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"),
                 fill=1000.0)
    np.testing.assert_array_equal(got, 1000 + np.arange(256, dtype=np.float32).reshape(8, 32))


def test_st_bulk_zero_fills_shared_memory():
    # DeepGEMM (sm_100) clears shared buffers with st.bulk; initval must be 0
    body = """
    .shared .align 16 .b8 buf[256];
    mov.u32 %r1, buf;
    shl.b32 %r2, %r0, 2;
    add.u32 %r3, %r1, %r2;
    st.shared.u32 [%r3], 9;
    st.shared.u32 [%r3+128], 9;
    bar.sync 0;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 st.bulk.weak.shared::cta [%r1], 128, 0;
    bar.sync 0;
    ld.shared.u32 %r4, [%r3];
    ld.shared.u32 %r5, [%r3+128];
    add.u32 %r6, %r4, %r5;
    st.global.u32 [%rd3], %r6;
    """
    assert (run(body, target="sm_100a") == 9).all()
