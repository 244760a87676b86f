"""PTX forms that public kernels (CUTLASS/CuTe, ThunderKittens, FlashAttention 2/3,
DeepGEMM) use and porter's own kernels do not: each a small kernel written here whose
numbers are checked against numpy (issue 18 item 2). Several were silent wrong numbers
before (packed-half arithmetic computed on the raw bits, st.async never signalling its
mbarrier, .relu/.satfinite/.sat ignored by cvt)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter import emu

DECLS = (".reg .pred %p<8>;\n.reg .b16 %rs<8>;\n.reg .b32 %r<64>;\n.reg .f32 %f<32>;\n.reg .b64 %rd<32>;\n"
         ".reg .b8 %b<4>;\n")


def kernel(body: str, target: str = "sm_90a", pre: str = "", directives: str = "", params: str = "") -> str:
    """Entry ``k(out, inp)``: %rd3 = &out[tid] (u32), %rd4 = &inp[tid] (u32), %r0 = tid."""
    return (f".version 8.7\n.target {target}\n.address_size 64\n{pre}"
            f".visible .entry k(.param .u64 out, .param .u64 inp{params}){directives}\n{{\n{DECLS}"
            "ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n"
            "ld.param.u64 %rd5, [inp];\ncvta.to.global.u64 %rd5, %rd5;\nmov.u32 %r0, %tid.x;\n"
            "mul.wide.u32 %rd2, %r0, 4;\nadd.s64 %rd3, %rd1, %rd2;\nadd.s64 %rd4, %rd5, %rd2;\n"
            f"{body}\nret;\n}}\n")


def run(body: str, inp=None, n: int = 32, threads: int = 32, grid: int = 1, **kw) -> np.ndarray:
    inp = np.zeros(max(n, threads), np.uint32) if inp is None else np.ascontiguousarray(inp).view(np.uint32)
    out = np.zeros(n, np.uint32)
    src = kernel(body, kw.pop("target", "sm_90a"), kw.pop("pre", ""), kw.pop("directives", ""))
    res = emu.launch(src, "k", grid=grid, block=threads, args=[out, inp], budget=400_000, **kw)
    return res.outputs[0]


LOAD = "ld.global.u32 %r1, [%rd4];\n"
STORE = "st.global.u32 [%rd3], %r2;\n"
RNG = np.random.default_rng(7)


def _halves(kind):
    dt = np.float16 if kind == "f16" else ml_dtypes.bfloat16
    vals = RNG.standard_normal(64).astype(np.float32) * 4
    return vals.astype(dt)


def _pack(h):
    return h.view(np.uint16).astype(np.uint32)[0::2] | (h.view(np.uint16).astype(np.uint32)[1::2] << 16)


def _unpack(words, kind):
    dt = np.float16 if kind == "f16" else ml_dtypes.bfloat16
    w = np.asarray(words, np.uint32)
    return np.stack([(w & 0xFFFF).astype(np.uint16), (w >> 16).astype(np.uint16)], 1).reshape(-1).view(dt)


# ---- packed 16-bit and f32x2 arithmetic ---------------------------------------------------------

@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("op,ref", [
    ("add.rn", lambda a: a + a), ("mul.rn", lambda a: a * a), ("fma.rn", lambda a: a * a + a),
    ("neg", lambda a: -a), ("abs", np.abs), ("max", lambda a: np.maximum(a, 0.5)),
    ("fma.rn.relu", lambda a: np.maximum(a * a - 2 * a, 0.0)), ("fma.rn.scalar", lambda a: a * a + a),
])
def test_packed_half_arithmetic_is_per_element(kind, op, ref):
    h = _halves(kind)
    t = f"{kind}x2"
    half = "0x38003800" if kind == "f16" else "0x3f003f00"
    two = "0xc000c000" if kind == "f16" else "0xc000c000"
    body = {"add.rn": f"add.rn.{t} %r2, %r1, %r1;", "mul.rn": f"mul.rn.{t} %r2, %r1, %r1;",
            "fma.rn": f"fma.rn.{t} %r2, %r1, %r1, %r1;", "neg": f"neg.{t} %r2, %r1;", "abs": f"abs.{t} %r2, %r1;",
            "fma.rn.scalar": f"mov.b32 {{%rs1, %rs2}}, %r1;\nfma.rn.{kind} %rs3, %rs1, %rs1, %rs1;\n"
                             f"fma.rn.{kind} %rs4, %rs2, %rs2, %rs2;\nmov.b32 %r2, {{%rs3, %rs4}};",
            "max": f"mov.b32 %r3, {half};\nmax.{t} %r2, %r1, %r3;",
            "fma.rn.relu": f"mov.b32 %r3, {two};\nmul.rn.{t} %r4, %r1, %r3;\nfma.rn.relu.{t} %r2, %r1, %r1, %r4;"}[op]
    got = _unpack(run(LOAD + body + "\n" + STORE, _pack(h)), kind).astype(np.float64)
    x = h.astype(np.float64)
    if op == "fma.rn.relu":       # the product by -2 rounds first, as the kernel computes it
        want = np.maximum(x * x + (x * -2).astype(h.dtype).astype(np.float64), 0.0)
    else:
        want = ref(x)
    want = want.astype(np.float32).astype(h.dtype).astype(np.float64)
    np.testing.assert_array_equal(got, want)


def test_f32x2_fma_and_add_work_on_both_floats():
    a = RNG.standard_normal(64).astype(np.float32)
    body = ("ld.global.u32 %r1, [%rd4];\nld.global.u32 %r5, [%rd4+128];\nmov.b64 %rd6, {%r1, %r5};\n"
            "fma.rn.f32x2 %rd7, %rd6, %rd6, %rd6;\nadd.rn.f32x2 %rd7, %rd7, %rd6;\nmov.b64 {%r2, %r6}, %rd7;\n"
            "st.global.u32 [%rd3], %r2;\nst.global.u32 [%rd3+128], %r6;\n")
    got = run(body, a, n=64).view(np.float32)
    x = a.astype(np.float64)
    want = (x * x + x).astype(np.float32) + a            # the fma rounds once
    np.testing.assert_array_equal(got, want)


def test_mixed_precision_add_converts_the_bf16_operand():
    b = (np.arange(32, dtype=np.float32) - 8).astype(ml_dtypes.bfloat16)
    inp = b.view(np.uint16).astype(np.uint32)
    body = LOAD + "cvt.u16.u32 %rs1, %r1;\nmov.f32 %f1, 0f3FC00000;\nadd.rn.f32.bf16 %f2, %rs1, %f1;\n" \
        "fma.rn.f32.bf16 %f3, %rs1, %rs1, %f2;\nmov.b32 %r2, %f3;\n" + STORE
    got = run(body, inp, target="sm_100a").view(np.float32)
    x = b.astype(np.float32)
    np.testing.assert_array_equal(got, x * x + (x + 1.5))


def test_min_max_nan_and_three_inputs():
    body = ("mov.b32 %f1, 0x7fc00000;\nmov.f32 %f2, 0f3F800000;\nmax.NaN.f32 %f3, %f1, %f2;\nmax.f32 %f4, %f1, %f2;\n"
            "cvt.rn.f32.u32 %f5, %r0;\nmax.f32 %f6, %f5, %f2, 0f40A00000;\nmin.f32 %f7, %f5, %f2, 0f40A00000;\n"
            "mov.b32 %r2, %f3;\nst.global.u32 [%rd3], %r2;\nmov.b32 %r2, %f4;\nst.global.u32 [%rd3+128], %r2;\n"
            "mov.b32 %r2, %f6;\nst.global.u32 [%rd3+256], %r2;\nmov.b32 %r2, %f7;\nst.global.u32 [%rd3+384], %r2;\n")
    got = run(body, n=128, target="sm_100a")
    assert (got[:32] == 0x7FFFFFFF).all() and (got[32:64] == 0x3F800000).all()
    t = np.arange(32, dtype=np.float32)
    np.testing.assert_array_equal(got[64:96].view(np.float32), np.maximum(t, 5.0))
    np.testing.assert_array_equal(got[96:].view(np.float32), np.minimum(t, 1.0))


def test_half_compares_set_and_setp_per_half():
    h = _halves("f16")
    body = LOAD + "mov.b32 %r3, 0;\nset.le.u32.f16x2 %r2, %r1, %r3;\nsetp.gt.f16x2 %p1|%p2, %r1, %r3;\n" \
        "selp.u32 %r4, 1, 0, %p1;\nselp.u32 %r5, 2, 0, %p2;\nor.b32 %r4, %r4, %r5;\n" + STORE + \
        "st.global.u32 [%rd3+128], %r4;\n"
    got = run(body, _pack(h), n=64)
    lo, hi = h[0::2].astype(np.float32), h[1::2].astype(np.float32)
    np.testing.assert_array_equal(got[:32], np.where(lo <= 0, 0xFFFF, 0) | np.where(hi <= 0, 0xFFFF0000, 0))
    np.testing.assert_array_equal(got[32:], (lo > 0).astype(np.uint32) | 2 * (hi > 0).astype(np.uint32))


@pytest.mark.parametrize("kind", ["f16x2", "bf16x2"])
def test_red_add_on_packed_halves_adds_each_half(kind):
    h = _halves(kind[:-2])
    body = LOAD + "st.global.u32 [%rd3], %r1;\n" + f"red.global.add.noftz.{kind} [%rd3], %r1;\n" \
        f"atom.global.add.noftz.{kind} %r2, [%rd3], %r1;\nst.global.u32 [%rd3+128], %r2;\n"
    got = run(body, _pack(h), n=64)
    x = h.astype(np.float64)
    twice = (x + x).astype(np.float32).astype(h.dtype)
    np.testing.assert_array_equal(_unpack(got[32:], kind[:-2]), twice)
    np.testing.assert_array_equal(_unpack(got[:32], kind[:-2]),
                                  (twice.astype(np.float64) + x).astype(np.float32).astype(h.dtype))


# ---- cvt packs ----------------------------------------------------------------------------------

def test_cvt_fp4_pairs_round_trip_through_f16x2():
    v = (RNG.standard_normal(64) * 3).astype(np.float32)
    v[0], v[1] = 100.0, -0.1                                     # saturates; rounds to -0
    body = ("ld.global.f32 %f1, [%rd4];\nld.global.f32 %f2, [%rd4+128];\n"
            "cvt.rn.satfinite.e2m1x2.f32 %b0, %f1, %f2;\ncvt.u32.u8 %r2, %b0;\n"
            "cvt.rn.f16x2.e2m1x2 %r3, %b0;\n" + STORE + "st.global.u32 [%rd3+128], %r3;\n")
    got = run(body, v, n=64, target="sm_100a")
    hi, lo = v[:32].astype(ml_dtypes.float4_e2m1fn), v[32:].astype(ml_dtypes.float4_e2m1fn)
    codes = (hi.view(np.uint8).astype(np.uint32) << 4) | lo.view(np.uint8).astype(np.uint32)
    np.testing.assert_array_equal(got[:32], codes)
    halves = _unpack(got[32:], "f16").astype(np.float32)
    np.testing.assert_array_equal(halves[0::2], lo.astype(np.float32))
    np.testing.assert_array_equal(halves[1::2], hi.astype(np.float32))
    assert hi[0].astype(np.float32) == 6.0


def test_cvt_ue8m0_pairs_round_toward_zero_or_up():
    v = np.array([1.0, 3.0, 0.3, 2.0 ** -130, 8.0, 1e38, 5e-3, 0.75] * 4, np.float32)
    body = ("ld.global.f32 %f1, [%rd4];\ncvt.rz.satfinite.ue8m0x2.f32 %rs1, %f1, %f1;\n"
            "cvt.rp.satfinite.ue8m0x2.f32 %rs2, %f1, %f1;\ncvt.u32.u16 %r2, %rs1;\ncvt.u32.u16 %r3, %rs2;\n"
            "cvt.rn.bf16x2.ue8m0x2 %r4, %rs2;\n" + STORE + "st.global.u32 [%rd3+128], %r3;\n"
            "st.global.u32 [%rd3+256], %r4;\n")
    got = run(body, v, n=96, target="sm_100a")
    e_floor = np.floor(np.log2(v.astype(np.float64)))
    e_ceil = np.ceil(np.log2(v.astype(np.float64)))
    rz = np.clip(e_floor + 127, 0, 254).astype(np.uint32)
    rp = np.clip(e_ceil + 127, 0, 254).astype(np.uint32)
    np.testing.assert_array_equal(got[:32], rz * 257)
    np.testing.assert_array_equal(got[32:64], rp * 257)
    np.testing.assert_array_equal(_unpack(got[64:], "bf16").astype(np.float64)[0::2], 2.0 ** (rp.astype(np.int64) - 127))


def test_cvt_relu_satfinite_tf32_sat_and_pack():
    body = ("mov.f32 %f1, 0fBF800000;\nmov.f32 %f2, 0f7F800000;\n"
            "cvt.rn.relu.satfinite.bf16x2.f32 %r2, %f2, %f1;\nst.global.u32 [%rd3], %r2;\n"
            "mov.b32 %f3, 0x3f801000;\ncvt.rn.tf32.f32 %r2, %f3;\nst.global.u32 [%rd3+128], %r2;\n"
            "mov.b32 %f3, 0x3f803000;\ncvt.rn.tf32.f32 %r2, %f3;\nst.global.u32 [%rd3+256], %r2;\n"
            "mov.f32 %f4, 0f40000000;\ncvt.sat.f32.f32 %f5, %f4;\nmov.b32 %r2, %f5;\nst.global.u32 [%rd3+384], %r2;\n"
            "mov.u32 %r5, 300;\nmov.u32 %r6, -7;\ncvt.pack.sat.u8.s32.b32 %r2, %r5, %r6, 0x1234;\n"
            "st.global.u32 [%rd3+512], %r2;\n")
    got = run(body, n=160)
    assert got[0] == 0x7F7F0000               # hi: +inf saturated to bf16's MAX_NORM; lo: -1 to +0
    assert got[32] == 0x3F800000              # a tie rounds to the even tf32 (down here)
    assert got[64] == 0x3F804000              # a tie from odd rounds up
    assert got[96] == 0x3F800000
    assert got[128] == 0x1234FF00             # c << 16 | sat(300) << 8 | sat(-7)


# ---- warp collectives ---------------------------------------------------------------------------

def test_match_any_and_all():
    body = ("and.b32 %r1, %r0, 3;\nmatch.any.sync.b32 %r2, %r1, 0xffffffff;\n" + STORE +
            "match.all.sync.b32 %r3|%p1, %r1, 0xffffffff;\nmov.u32 %r4, 5;\nmatch.all.sync.b32 %r5|%p2, %r4, 0xffff;\n"
            "selp.u32 %r6, 1, 0, %p1;\nselp.u32 %r7, 1, 0, %p2;\nst.global.u32 [%rd3+128], %r3;\n"
            "st.global.u32 [%rd3+256], %r6;\nst.global.u32 [%rd3+384], %r7;\n"
            "@%p2 st.global.u32 [%rd3+384], %r5;\n")
    got = run(body, n=128)
    want = np.array([sum(1 << j for j in range(32) if j % 4 == i % 4) for i in range(32)], np.uint32)
    np.testing.assert_array_equal(got[:32], want)
    assert (got[32:64] == 0).all() and (got[64:96] == 0).all()
    np.testing.assert_array_equal(got[96:112], np.full(16, 0xFFFF))   # lanes 16.. are not members


def test_redux_f32_max_abs_and_nan():
    v = RNG.standard_normal(32).astype(np.float32)
    body = ("ld.global.f32 %f1, [%rd4];\nredux.sync.max.abs.f32 %f2, %f1, 0xffffffff;\n"
            "redux.sync.min.f32 %f3, %f1, 0xffffffff;\nsetp.eq.u32 %p1, %r0, 3;\n@%p1 mov.b32 %f1, 0x7fc00000;\n"
            "redux.sync.max.NaN.f32 %f4, %f1, 0xffffffff;\nredux.sync.max.f32 %f5, %f1, 0xffffffff;\n"
            "mov.b32 %r2, %f2;\n" + STORE + "mov.b32 %r2, %f3;\nst.global.u32 [%rd3+128], %r2;\n"
            "mov.b32 %r2, %f4;\nst.global.u32 [%rd3+256], %r2;\nmov.b32 %r2, %f5;\nst.global.u32 [%rd3+384], %r2;\n")
    got = run(body, v, n=128, target="sm_100a")
    assert (got[:32].view(np.float32) == np.abs(v).max()).all()
    assert (got[32:64].view(np.float32) == v.min()).all()
    assert (got[64:96] == 0x7FFFFFFF).all()
    assert (got[96:].view(np.float32) == np.delete(v, 3).max()).all()


def test_movmatrix_transposes_the_fragment():
    m = np.arange(64, dtype=np.uint16).reshape(8, 8) + 100
    frag = np.array([m[l // 4, 2 * (l % 4)] | (m[l // 4, 2 * (l % 4) + 1].astype(np.uint32) << 16) for l in range(32)],
                    np.uint32)
    body = LOAD + "movmatrix.sync.aligned.m8n8.trans.b16 %r2, %r1;\n" + STORE
    got = run(body, frag)
    t = m.T
    want = np.array([t[l // 4, 2 * (l % 4)] | (t[l // 4, 2 * (l % 4) + 1].astype(np.uint32) << 16) for l in range(32)],
                    np.uint32)
    np.testing.assert_array_equal(got, want)


def test_bar_red_counts_and_ors_across_the_cta():
    body = ("setp.lt.u32 %p1, %r0, 37;\nbar.red.popc.u32 %r2, 0, %p1;\n" + STORE +
            "setp.eq.u32 %p2, %r0, 70;\nbar.red.or.pred %p3, 1, %p2;\nselp.u32 %r4, 1, 0, %p3;\n"
            "bar.red.and.pred %p4, 2, %p1;\nselp.u32 %r5, 1, 0, %p4;\n"
            "st.global.u32 [%rd3+512], %r4;\nst.global.u32 [%rd3+1024], %r5;\n")
    got = run(body, n=128 * 3, threads=128)
    assert (got[:128] == 37).all() and (got[128:256] == 1).all() and (got[256:] == 0).all()


# ---- asynchronous cluster stores and bulk forms -------------------------------------------------

CLUSTER = ".shared .align 16 .b8 buf[256];\n.shared .align 8 .b64 bar;\n"


@pytest.mark.parametrize("form", ["st.async.shared::cluster.mbarrier::complete_tx::bytes.u32",
                                  "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32"])
def test_async_store_into_the_peer_cta_signals_its_mbarrier(form):
    # CTA 1's 32 lanes each store tid+1 into CTA 0's buffer and complete 4 bytes each on CTA 0's
    # barrier, which CTA 0 armed for 128 bytes: CTA 0 reads the values after its wait.
    body = f"""
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r10, buf;
    mov.u32 %r11, bar;
    setp.eq.u32 %p1, %r0, 0;
    setp.eq.u32 %p2, %r1, 0;
    and.pred %p3, %p1, %p2;
    @%p3 mbarrier.init.shared::cta.b64 [%r11], 1;
    @%p3 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r11], 128;
    barrier.cluster.arrive.aligned;
    barrier.cluster.wait.aligned;
    @%p2 bra WAIT;
    shl.b32 %r12, %r0, 2;
    add.u32 %r12, %r10, %r12;
    mapa.shared::cluster.u32 %r13, %r12, 0;
    mapa.shared::cluster.u32 %r14, %r11, 0;
    add.u32 %r15, %r0, 1;
    {form} [%r13], %r15, [%r14];
    bra DONE;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r11], 0;
    @!%p4 bra WAIT;
    shl.b32 %r12, %r0, 2;
    add.u32 %r12, %r10, %r12;
    ld.shared.u32 %r2, [%r12];
    st.global.u32 [%rd3], %r2;
DONE:
    barrier.cluster.arrive.aligned;
    barrier.cluster.wait.aligned;
    """
    got = run(body, pre=CLUSTER, grid=2, directives=" .reqnctapercluster 2, 1, 1")
    np.testing.assert_array_equal(got, np.arange(1, 33))


def test_bulk_copy_into_the_peer_cta():
    body = f"""
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r10, buf;
    mov.u32 %r11, bar;
    setp.eq.u32 %p1, %r0, 0;
    setp.eq.u32 %p2, %r1, 0;
    and.pred %p3, %p1, %p2;
    @%p3 mbarrier.init.shared::cta.b64 [%r11], 1;
    @%p3 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r11], 128;
    shl.b32 %r12, %r0, 2;
    add.u32 %r12, %r10, %r12;
    add.u32 %r15, %r0, 7;
    st.shared.u32 [%r12], %r15;
    fence.proxy.async.shared::cta;
    barrier.cluster.arrive.aligned;
    barrier.cluster.wait.aligned;
    @%p2 bra WAIT;
    mapa.shared::cluster.u32 %r13, %r10, 0;
    mapa.shared::cluster.u32 %r14, %r11, 0;
    @%p1 cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r13], [%r10], 128, [%r14];
    bra DONE;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r11], 0;
    @!%p4 bra WAIT;
    ld.shared.u32 %r2, [%r12];
    st.global.u32 [%rd3], %r2;
DONE:
    barrier.cluster.arrive.aligned;
    barrier.cluster.wait.aligned;
    """
    got = run(body, pre=CLUSTER, grid=2, directives=" .reqnctapercluster 2, 1, 1")
    np.testing.assert_array_equal(got, np.arange(7, 39))


def test_bulk_reduce_add_f32_into_global_and_prefetch_hints():
    body = """
    mov.u32 %r10, buf;
    shl.b32 %r12, %r0, 2;
    add.u32 %r12, %r10, %r12;
    cvt.rn.f32.u32 %f1, %r0;
    st.shared.f32 [%r12], %f1;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 cp.async.bulk.prefetch.L2.global [%rd1], 128;
    @%p1 cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1], [%r10], 128;
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group 0;
    """
    out = np.full(32, 0.5, np.float32)
    res = emu.launch(kernel(body, pre=CLUSTER), "k", grid=1, block=32, args=[out, np.zeros(32, np.uint32)])
    np.testing.assert_array_equal(res.outputs[0], np.arange(32, dtype=np.float32) + 0.5)


# ---- integer extras -----------------------------------------------------------------------------

def test_carry_chain_adds_64_bits_in_halves():
    a = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    body = ("ld.global.u32 %r1, [%rd4];\nld.global.u32 %r5, [%rd4+128];\n"
            "add.cc.u32 %r2, %r1, %r5;\naddc.u32 %r6, 0, 0;\n" + STORE + "st.global.u32 [%rd3+128], %r6;\n"
            "sub.cc.u32 %r7, %r1, %r5;\nsubc.u32 %r8, 0, 0;\nst.global.u32 [%rd3+256], %r8;\n")
    got = run(body, a, n=96)
    x, y = a[:32].astype(np.uint64), a[32:].astype(np.uint64)
    np.testing.assert_array_equal(got[:32], ((x + y) & 0xFFFFFFFF).astype(np.uint32))
    np.testing.assert_array_equal(got[32:64], ((x + y) >> 32).astype(np.uint32))
    np.testing.assert_array_equal(got[64:], np.where(x < y, 0xFFFFFFFF, 0).astype(np.uint32))


def test_integer_extras_dp4a_bfind_fns_mul24_sad_bmsk_szext_prmt_testp_slct():
    body = ("mov.u32 %r1, 0x01ff0302;\nmov.u32 %r5, 0x02020202;\ndp4a.s32.u32 %r2, %r1, %r5, 10;\n" + STORE +
            "bfind.u32 %r2, %r0;\nst.global.u32 [%rd3+128], %r2;\n"
            "fns.b32 %r2, 0xf0f0, 0, 3;\nst.global.u32 [%rd3+256], %r2;\n"
            "mul24.hi.u32 %r2, 0x00ffffff, 0x00ffffff;\nst.global.u32 [%rd3+384], %r2;\n"
            "sad.u32 %r2, 3, 10, 100;\nst.global.u32 [%rd3+512], %r2;\n"
            "bmsk.clamp.b32 %r2, 4, 8;\nst.global.u32 [%rd3+640], %r2;\n"
            "szext.wrap.s32 %r2, 0x1c, 5;\nst.global.u32 [%rd3+768], %r2;\n"
            "prmt.b32.f4e %r2, 0x33221100, 0x77665544, 2;\nst.global.u32 [%rd3+896], %r2;\n"
            "mov.b32 %f1, 0x7f800000;\ntestp.infinite.f32 %p1, %f1;\nselp.u32 %r2, 1, 0, %p1;\n"
            "st.global.u32 [%rd3+1024], %r2;\nslct.u32.s32 %r2, 11, 22, -1;\nst.global.u32 [%rd3+1152], %r2;\n"
            "mov.u32 %r8, -7;\nmad.hi.s32 %r2, %r8, 3, 5;\nst.global.u32 [%rd3+1280], %r2;\n"
            "cnot.b32 %r2, %r0;\nst.global.u32 [%rd3+1408], %r2;\n")
    got = run(body, n=384)
    assert got[0] == 10 + 2 * 2 + 3 * 2 + (-1) * 2 + 1 * 2
    np.testing.assert_array_equal(got[32:64], [0xFFFFFFFF] + [int(i).bit_length() - 1 for i in range(1, 32)])
    assert got[64] == 6 and got[96] == (0xFFFFFF * 0xFFFFFF) >> 16 & 0xFFFFFFFF
    assert got[128] == 107 and got[160] == 0xFF0 and got[192] == 0xFFFFFFFC
    assert got[224] == 0x55443322 and got[256] == 1 and got[288] == 22
    assert got[320] == 4                                         # (-21 >> 32) + 5 = -1 + 5
    np.testing.assert_array_equal(got[352:384], (np.arange(32) == 0).astype(np.uint32))


# ---- tensor maps rewritten on the device (grouped GEMMs) ----------------------------------------

TMAP_KERNEL = """
.version 8.7
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 tmap[128], .param .u64 second, .param .u64 scratch, .param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<32>;
  .shared .align 128 .b8 tm[128];
  .shared .align 1024 .b8 tile[1024];
  .shared .align 8 .b64 bar;
  mov.u32 %r0, %tid.x;
  setp.eq.u32 %p1, %r0, 0;
  // each lane copies 4 bytes of the param map into shared memory
  mov.u64 %rd1, tmap;
  cvta.param.u64 %rd1, %rd1;
  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.u32 %r1, [%rd3];
  mov.u32 %r2, tm;
  shl.b32 %r3, %r0, 2;
  add.u32 %r4, %r2, %r3;
  st.shared.u32 [%r4], %r1;
  bar.sync 0;
  ld.param.u64 %rd4, [second];
  cvta.to.global.u64 %rd4, %rd4;
  @%p1 tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r2], %rd4;
  @%p1 tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%r2], 1, 8;
  @%p1 tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%r2], 0, 64;
  bar.sync 0;
  ld.param.u64 %rd5, [scratch];
  cvta.to.global.u64 %rd5, %rd5;
  tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd5], [%r2], 128;
  fence.proxy.tensormap::generic.acquire.gpu [%rd5], 128;
  mov.u32 %r5, bar;
  mov.u32 %r6, tile;
  @%p1 mbarrier.init.shared::cta.b64 [%r5], 1;
  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r5], 256;
  @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r6], [%rd5, {0, 4}], [%r5];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
  @!%p2 bra WAIT;
  // the 4 x 16 u32 box: rows 4..7 of the second tensor (8 rows now), lanes take one word each
  add.u32 %r7, %r6, %r3;
  ld.shared.u32 %r8, [%r7];
  ld.shared.u32 %r9, [%r7+128];
  ld.param.u64 %rd6, [out];
  cvta.to.global.u64 %rd6, %rd6;
  add.s64 %rd7, %rd6, %rd2;
  st.global.u32 [%rd7], %r8;
  st.global.u32 [%rd7+128], %r9;
  ret;
}
"""


def test_tensormap_replace_retargets_a_tma_map_published_by_cp_fenceproxy():
    from porter.runtime.tensormap import TensorMapParams

    first = np.arange(4 * 16, dtype=np.uint32).reshape(4, 16)              # 4 rows, 64-byte rows
    second = (np.arange(8 * 16, dtype=np.uint32) + 1000).reshape(8, 16)    # 8 rows
    p = TensorMapParams("t", "UINT32", dims=(16, 4), strides=(64,), box=(16, 4), swizzle="NONE")
    out = np.zeros(64, np.uint32)
    res = emu.launch(TMAP_KERNEL, "k", grid=1, block=32,
                     args=[emu.tensor_map(p, first), second, np.zeros(32, np.uint32), out])
    got = res.outputs[3]
    np.testing.assert_array_equal(got, second[4:8].reshape(-1))          # rows 4..7 exist only in `second`


def test_tensormap_replace_of_a_driver_map_is_one_clear_error():
    bad = TMAP_KERNEL.replace("st.shared.u32 [%r4], %r1;", "st.shared.u32 [%r4], 0;")
    from porter.runtime.tensormap import TensorMapParams

    p = TensorMapParams("t", "UINT32", dims=(16, 4), strides=(64,), box=(16, 4), swizzle="NONE")
    with pytest.raises(emu.EmuError, match="not a map from porter's emulated host"):
        emu.launch(bad, "k", grid=1, block=32, args=[emu.tensor_map(p, np.zeros((4, 16), np.uint32)),
                                                     np.zeros((8, 16), np.uint32), np.zeros(32, np.uint32),
                                                     np.zeros(64, np.uint32)])


# ---- 8-bit stmatrix / ldmatrix (sm_100, sm_120) -------------------------------------------------

def test_stmatrix_m16n8_trans_b8_stores_the_accumulator_fragment_transposed():
    # each lane holds e0, e1 = M[g, 2t], M[g, 2t+1] and e2, e3 = the same columns of row g + 8
    # (g = lane / 4, t = lane % 4) of two 16 x 8 byte matrices; .trans writes column c of
    # matrix j as the 16-byte row at thread 8j + c's address
    m = RNG.integers(0, 256, (2, 16, 8), dtype=np.uint8)
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    regs = np.zeros((2, 32), np.uint32)
    for j in range(2):
        e = [m[j, g, 2 * t], m[j, g, 2 * t + 1], m[j, g + 8, 2 * t], m[j, g + 8, 2 * t + 1]]
        regs[j] = sum(x.astype(np.uint32) << (8 * k) for k, x in enumerate(e))
    body = """
    ld.global.u32 %r1, [%rd4];
    ld.global.u32 %r5, [%rd4+128];
    mov.u32 %r10, buf;
    and.b32 %r11, %r0, 15;
    shl.b32 %r11, %r11, 4;
    add.u32 %r12, %r10, %r11;
    stmatrix.sync.aligned.m16n8.x2.trans.shared.b8 [%r12], {%r1, %r5};
    bar.sync 0;
    shl.b32 %r13, %r0, 2;
    add.u32 %r14, %r10, %r13;
    ld.shared.u32 %r2, [%r14];
    ld.shared.u32 %r6, [%r14+128];
    st.global.u32 [%rd3], %r2;
    st.global.u32 [%rd3+128], %r6;
    """
    got = run(body, regs.reshape(-1), n=64, target="sm_100a", pre=CLUSTER).view(np.uint8).reshape(2, 8, 16)
    np.testing.assert_array_equal(got, m.transpose(0, 2, 1))


def test_ldmatrix_m16n16_trans_b8_reads_back_what_two_stmatrix_wrote():
    # the ldmatrix.m16n16.x1 fragment is that of stmatrix.m16n8.x2 (CuTe's U8x8 LDSM_T / STSM_T
    # layouts agree), with row R supplied by thread (R%2) + 2*(R//8) + 4*((R%8)//2)
    vals = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    body = """
    ld.global.u32 %r1, [%rd4];
    ld.global.u32 %r5, [%rd4+128];
    mov.u32 %r10, buf;
    and.b32 %r11, %r0, 15;
    shl.b32 %r11, %r11, 4;
    add.u32 %r12, %r10, %r11;
    stmatrix.sync.aligned.m16n8.x2.trans.shared.b8 [%r12], {%r1, %r5};
    bar.sync 0;
    and.b32 %r20, %r0, 1;
    shr.u32 %r21, %r0, 1;
    and.b32 %r21, %r21, 1;
    shl.b32 %r21, %r21, 3;
    shr.u32 %r22, %r0, 2;
    and.b32 %r22, %r22, 3;
    shl.b32 %r22, %r22, 1;
    add.u32 %r20, %r20, %r21;
    add.u32 %r20, %r20, %r22;
    shl.b32 %r20, %r20, 4;
    add.u32 %r23, %r10, %r20;
    ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r2, %r6}, [%r23];
    st.global.u32 [%rd3], %r2;
    st.global.u32 [%rd3+128], %r6;
    """
    got = run(body, vals, n=64, target="sm_100a", pre=CLUSTER)
    np.testing.assert_array_equal(got, vals)


def test_an_8bit_ldmatrix_form_outside_the_isa_is_refused_in_one_line():
    # (the decompressing .b8x16.b6x16_p32 / .b4x16_p64 forms run: tests/test_emu_forms_matrix.py)
    body = "mov.u32 %r10, buf;\nldmatrix.sync.aligned.m16n16.x1.shared.b8x16.b6x16_p32 {%r2, %r3}, [%r10];\n"
    with pytest.raises(emu.Unsupported, match="ldmatrix.sync.aligned.m16n16.x1.shared.b8x16.b6x16_p32.*needs .trans"):
        run(body, target="sm_100a", pre=CLUSTER)


# ---- f32 .sat and directed rounding, 16x2 SIMD, vector atomics, pmevent --------------------------

def test_f32_directed_rounding_and_saturation():
    # 1 + 2^-24 lies halfway between 1 and the next float: rz/rn give 1, rp the next float up;
    # -(1 + 2^-24) with rm goes down to -(1 + 2^-23); .sat clamps 3 to 1 and -2 to 0
    body = ("mov.f32 %f1, 0f3F800000;\nmov.f32 %f2, 0f33800000;\nneg.f32 %f3, %f1;\n"
            "fma.rz.f32 %f4, %f1, %f1, %f2;\nfma.rp.f32 %f5, %f1, %f1, %f2;\nfma.rm.f32 %f6, %f3, %f1, %f2;\n"
            "neg.f32 %f7, %f2;\nfma.rm.f32 %f6, %f3, %f1, %f7;\nadd.rn.f32 %f8, %f1, %f2;\n"
            "mov.f32 %f9, 0f40400000;\nmul.rn.sat.f32 %f10, %f9, %f1;\nmov.f32 %f11, 0fC0000000;\n"
            "fma.rn.sat.f32 %f12, %f11, %f1, %f1;\n"
            "mov.b32 %r2, %f4;\nst.global.u32 [%rd3], %r2;\nmov.b32 %r2, %f5;\nst.global.u32 [%rd3+128], %r2;\n"
            "mov.b32 %r2, %f6;\nst.global.u32 [%rd3+256], %r2;\nmov.b32 %r2, %f8;\nst.global.u32 [%rd3+384], %r2;\n"
            "mov.b32 %r2, %f10;\nst.global.u32 [%rd3+512], %r2;\nmov.b32 %r2, %f12;\nst.global.u32 [%rd3+640], %r2;\n")
    got = run(body, n=192)[::32]
    assert list(got) == [0x3F800000, 0x3F800001, 0xBF800001, 0x3F800000, 0x3F800000, 0x00000000]


def test_simd_16x2_integer_lanes():
    body = ("mov.b32 %r1, 0x7fff0003;\nmov.b32 %r5, 0x0001fffe;\nadd.s16x2 %r2, %r1, %r5;\n" + STORE +
            "min.s16x2 %r6, %r1, %r5;\nst.global.u32 [%rd3+128], %r6;\nmax.u16x2 %r7, %r1, %r5;\n"
            "st.global.u32 [%rd3+256], %r7;\nmax.relu.s16x2 %r8, %r5, 0xfff0fff0;\nst.global.u32 [%rd3+384], %r8;\n")
    got = run(body, n=128)[::32]
    assert list(got) == [0x80000001, 0x0001fffe, 0x7ffffffe, 0x00010000]


def test_vector_red_and_atom_add_each_element():
    body = ("cvt.rn.f32.u32 %f1, %r0;\nmov.f32 %f2, 0f3F800000;\n"
            "red.global.add.v2.f32 [%rd1], {%f1, %f2};\npmevent 3;\n")
    out = np.zeros(32, np.float32)
    res = emu.launch(kernel(body), "k", grid=1, block=32, args=[out, np.zeros(32, np.uint32)])
    assert res.outputs[0][0] == sum(range(32)) and res.outputs[0][1] == 32.0


# ---- cvt rounding (floorf & co., directed narrowing, bf16 beside non-f32 types) ------------------

def test_cvt_integral_rounding_of_floats():
    v = np.array([2.5, -2.5, 1.7, -1.2, 3.5, -0.4, 7.0, 0.5] * 4, np.float32)
    body = ("ld.global.f32 %f1, [%rd4];\ncvt.rni.f32.f32 %f2, %f1;\ncvt.rmi.f32.f32 %f3, %f1;\n"
            "cvt.rpi.f32.f32 %f4, %f1;\ncvt.rzi.f32.f32 %f5, %f1;\n"
            "st.global.f32 [%rd3], %f2;\nst.global.f32 [%rd3+128], %f3;\nst.global.f32 [%rd3+256], %f4;\n"
            "st.global.f32 [%rd3+384], %f5;\n")
    got = run(body, v, n=128).view(np.float32).reshape(4, 32)
    np.testing.assert_array_equal(got, [np.rint(v), np.floor(v), np.ceil(v), np.trunc(v)])


def test_cvt_directed_narrowing_and_bf16_pairs():
    # 0x3f80ffff = 1 + (2^16 - 1) * 2^-23: bf16 rz 0x3f80, rp 0x3f81; f16 rz 0x3c07, rp 0x3c08
    # 16777217 = 2^24 + 1 -> f32: rz 2^24 (0x4b800000), rp 2^24 + 2 (0x4b800001)
    # 1.5 as f16 0x3e00 <-> bf16 0x3fc0; bf16 2.5 (0x4020) -> s32 rzi 2; s32 3 -> bf16 0x4040
    body = ("mov.b32 %f1, 0x3f80ffff;\ncvt.rz.bf16.f32 %rs1, %f1;\ncvt.rp.bf16.f32 %rs2, %f1;\n"
            "cvt.rz.f16.f32 %rs3, %f1;\ncvt.rp.f16.f32 %rs4, %f1;\n"
            "cvt.u32.u16 %r2, %rs1;\nst.global.u32 [%rd3], %r2;\ncvt.u32.u16 %r2, %rs2;\nst.global.u32 [%rd3+128], %r2;\n"
            "cvt.u32.u16 %r2, %rs3;\nst.global.u32 [%rd3+256], %r2;\ncvt.u32.u16 %r2, %rs4;\nst.global.u32 [%rd3+384], %r2;\n"
            "mov.u32 %r5, 16777217;\ncvt.rz.f32.s32 %f2, %r5;\ncvt.rp.f32.u32 %f3, %r5;\n"
            "mov.b32 %r2, %f2;\nst.global.u32 [%rd3+512], %r2;\nmov.b32 %r2, %f3;\nst.global.u32 [%rd3+640], %r2;\n"
            "mov.b16 %rs5, 0x3e00;\ncvt.rn.bf16.f16 %rs6, %rs5;\ncvt.u32.u16 %r2, %rs6;\nst.global.u32 [%rd3+768], %r2;\n"
            "mov.b16 %rs5, 0x4020;\ncvt.rzi.s32.bf16 %r2, %rs5;\nst.global.u32 [%rd3+896], %r2;\n"
            "mov.u32 %r6, 3;\ncvt.rn.bf16.s32 %rs7, %r6;\ncvt.u32.u16 %r2, %rs7;\nst.global.u32 [%rd3+1024], %r2;\n"
            "mov.u32 %r7, 0x7fffffff;\nadd.sat.s32 %r2, %r7, 5;\nst.global.u32 [%rd3+1152], %r2;\n")
    got = run(body, n=320)[::32]
    assert [hex(int(x)) for x in got] == ["0x3f80", "0x3f81", "0x3c07", "0x3c08", "0x4b800000", "0x4b800001",
                                          "0x3fc0", "0x2", "0x4040", "0x7fffffff"]


def test_b128_registers_load_store_pack_and_unpack():
    v = RNG.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32)
    body = """
    mov.u32 %r10, buf;
    shl.b32 %r11, %r0, 2;
    add.u32 %r12, %r10, %r11;
    ld.global.u32 %r1, [%rd4];
    st.shared.u32 [%r12], %r1;
    bar.sync 0;
    and.b32 %r13, %r0, 7;
    shl.b32 %r13, %r13, 4;
    add.u32 %r14, %r10, %r13;
    {
    .reg .b128 q;
    .reg .b128 q2;
    ld.shared.b128 q, [%r14];
    mov.b128 {%rd6, %rd7}, q;
    mov.b128 q2, {%rd7, %rd6};
    mov.b128 {%r20, %r21, %r22, %r23}, q2;
    }
    st.global.u32 [%rd3], %r20;
    st.global.u32 [%rd3+128], %r23;
    """
    got = run(body, v, n=64, target="sm_100a", pre=CLUSTER)
    words = v[:32].reshape(8, 4)[np.arange(32) % 8]             # lane l reads 16 bytes of row l % 8
    np.testing.assert_array_equal(got[:32], words[:, 2])         # q2 = {hi64, lo64}: word 0 is q's word 2
    np.testing.assert_array_equal(got[32:], words[:, 1])


@pytest.mark.parametrize("fence", ["fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;",
                                   "fence.proxy.async.shared::cta;", None])
def test_the_uni_directional_proxy_fence_before_a_bulk_store(fence):
    body = f"""
    mov.u32 %r10, buf;
    shl.b32 %r11, %r0, 2;
    add.u32 %r12, %r10, %r11;
    add.u32 %r13, %r0, 3;
    st.shared.u32 [%r12], %r13;
    {fence or ''}
    bar.sync 0;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r10], 128;
    @%p1 cp.async.bulk.commit_group;
    @%p1 cp.async.bulk.wait_group.read 0;
    """
    if fence is None:
        with pytest.raises(emu.CheckFailed, match="no fence.proxy.async since"):
            run(body, pre=CLUSTER)
        return
    np.testing.assert_array_equal(run(body, pre=CLUSTER), np.arange(3, 35))


# ---- integer mma.sync (int8 / int4 GEMMs) --------------------------------------------------------

def _frag(mat, shape, operand, width):
    from porter.emu.units import mma_sync as unit

    rows, cols = unit.fragment_layout(shape, operand)
    vals = mat[rows, cols].astype(np.int64) & ((1 << width) - 1)       # (32, regs, per)
    return (vals << (width * np.arange(vals.shape[2]))).sum(axis=2).astype(np.uint32)


@pytest.mark.parametrize("shape,width,atype,sat", [("m16n8k32", 8, "s8", False), ("m16n8k32", 8, "u8", True),
                                                   ("m16n8k64", 4, "s4", False)])
def test_integer_mma_sync(shape, width, atype, sat):
    # A, B, C chosen so the saturating form saturates: D = A B + C computed exactly in numpy
    k = 32 if shape == "m16n8k32" else 64
    lo, hi = (-(1 << (width - 1)), 1 << (width - 1)) if atype[0] == "s" else (0, 1 << width)
    a = RNG.integers(lo, hi, (16, k))
    b = RNG.integers(lo, hi, (k, 8))
    c = RNG.integers(-1000, 1000, (16, 8))
    if sat:
        c[0, 0] = 2 ** 31 - 10
    from porter.emu.units import mma_sync as unit

    crow, ccol = unit.fragment_layout(shape, "c")
    inp = np.concatenate([_frag(a, shape, "a", width).T.reshape(-1), _frag(b, shape, "b", width).T.reshape(-1),
                          c[crow[:, :, 0], ccol[:, :, 0]].astype(np.int32).view(np.uint32).T.reshape(-1)])
    ty = f"{'.satfinite' if sat else ''}.s32.{atype}.{atype}.s32"
    body = "".join(f"ld.global.u32 %r{10 + j}, [%rd4+{128 * j}];\n" for j in range(10)) + \
        f"mma.sync.aligned.{shape}.row.col{ty} {{%r20,%r21,%r22,%r23}}, {{%r10,%r11,%r12,%r13}}, " \
        "{%r14,%r15}, {%r16,%r17,%r18,%r19};\n" + \
        "".join(f"st.global.u32 [%rd3+{128 * j}], %r{20 + j};\n" for j in range(4))
    got = run(body, inp, n=128, target="sm_90a").view(np.int32).reshape(4, 32).T
    want = a @ b + c
    want = np.clip(want, -2 ** 31, 2 ** 31 - 1) if sat else want
    np.testing.assert_array_equal(got, want[crow[:, :, 0], ccol[:, :, 0]].astype(np.int32))
