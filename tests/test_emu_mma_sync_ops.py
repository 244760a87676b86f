"""porter.emu.ops.mma_sync and porter.emu.ops.cp_async: hand-written PTX run in the simulator.

The expected values are computed here from the PTX ISA's statements, written out
independently of porter.emu.units.mma_sync: the fragment formulas of 9.7.14.5.8/.10/.11
(groupID = %laneid >> 2, threadID_in_group = %laneid % 4), the block-scaling selectors of
9.7.14.3 (a thread pair of every quad supplies SF_A, one thread SF_B; byte-id picks the
bytes), the ldmatrix figure (four lanes hold one 8 x 8 row), and cp.async's visibility
rule (its writes are visible only after the wait_group that covers its group).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter.emu.launch import launch as emu_launch
from porter.emu.errors import CheckFailed, EmuError, Unsupported
from porter.emu.units import mma_sync as unit
from porter.emu.units.tcgen05 import decode

RNG = np.random.default_rng(11)
LANE = np.arange(32)
G, T = LANE >> 2, LANE % 4

HEAD = """.version 8.7
.target sm_120a
.address_size 64
"""


def mma_kernel(opcode: str, scales: str = "") -> str:
    """Each lane loads its a (4), b (2), c (4) and scale words (2) from a 64-byte record of
    ``inp``, runs the mma and stores its d (4) to ``out``."""
    extra = f", %r8, {scales.split('|')[0]}, %r9, {scales.split('|')[1]}" if scales else ""
    return HEAD + f"""
.visible .entry k(.param .u64 p_in, .param .u64 p_out)
{{
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
    {opcode} {{%f5, %f6, %f7, %f8}}, {{%r2, %r3, %r4, %r5}}, {{%r6, %r7}}, {{%f1, %f2, %f3, %f4}}{extra};
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd6, %rd2, %rd5;
    st.global.v4.f32 [%rd6], {{%f5, %f6, %f7, %f8}};
    ret;
}}
"""


def run_mma(opcode, a_regs, b_regs, c_regs, sfa=None, sfb=None, scales=""):
    rec = np.zeros((32, 16), np.uint32)
    rec[:, 0:4], rec[:, 4:6], rec[:, 8:12] = a_regs, b_regs, c_regs.view(np.uint32)
    if sfa is not None:
        rec[:, 12], rec[:, 13] = sfa, sfb
    out = np.zeros((32, 4), np.float32)
    res = emu_launch(mma_kernel(opcode, scales), "k", grid=1, block=32, args=[rec, out])
    return res.outputs[1]


# ---- the ISA's fragment formulas, spelled out ---------------------------------------------

def c_pos(i):            # C/D, every shape: c0..c3
    return np.where(i < 2, G, G + 8), T * 2 + (i & 1)


def pack_c(cmat):
    return np.stack([cmat[c_pos(i)] for i in range(4)], axis=1).astype(np.float32)


def unpack_d(regs):
    out = np.zeros((16, 8), np.float32)
    for i in range(4):
        out[c_pos(i)] = regs[:, i]
    return out


def pack(codes_of, nregs, per, bits):
    """registers: element e of register j = codes_of(i = j * per + e) (low bits first)."""
    regs = np.zeros((32, nregs), np.uint64)
    for j in range(nregs):
        for e in range(per):
            regs[:, j] |= codes_of(j * per + e).astype(np.uint64) << np.uint64(bits * e)
    return regs.astype(np.uint32)


def a16_pos(i):          # m16n8k16 A, 9.7.14.5.8
    row = np.where((i < 2) | ((i >= 4) & (i < 6)), G, G + 8)
    col = T * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def b16_pos(i):
    return T * 2 + (i & 1) + (8 if i >= 2 else 0), G


def a32_pos(i):          # m16n8k32 8-bit A, 9.7.14.5.10
    row = G if (i < 4 or 8 <= i < 12) else G + 8
    return row, T * 4 + (i & 3) + (16 if i >= 8 else 0)


def b32_pos(i):
    return T * 4 + (i & 3) + (16 if i >= 4 else 0), G


def a64_pos(i):          # m16n8k64 4-bit A, 9.7.14.5.11
    row = G if (i < 8 or 16 <= i < 24) else G + 8
    return row, T * 8 + (i & 7) + (32 if i >= 16 else 0)


def b64_pos(i):
    return T * 8 + (i & 7) + (32 if i >= 8 else 0), G


def bf16_codes(shape):
    x = RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)
    return x.view(np.uint16), x.astype(np.float64)


def fp8_codes(shape):
    codes = RNG.integers(0, 256, size=shape).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3C          # no NaNs
    return codes, decode(codes, "e4m3")


def e2m1_codes(shape):
    codes = RNG.integers(0, 16, size=shape).astype(np.uint8)
    return codes, decode(codes, "e2m1")


def close(got, want, rel=1e-5):
    np.testing.assert_allclose(got, want, rtol=rel, atol=rel * np.abs(want).max())


# ---- mma.sync ------------------------------------------------------------------------------

def test_mma_m16n8k16_bf16():
    a_c, a = bf16_codes((16, 16))
    b_c, b = bf16_codes((16, 8))
    c = RNG.standard_normal((16, 8)).astype(np.float32)
    a_regs = pack(lambda i: a_c[a16_pos(i)], 4, 2, 16)
    b_regs = pack(lambda i: b_c[b16_pos(i)], 2, 2, 16)
    got = run_mma("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", a_regs, b_regs, pack_c(c))
    close(unpack_d(got), a @ b + c)


def test_mma_m16n8k16_f16_and_the_result_is_not_the_transpose():
    a = RNG.standard_normal((16, 16)).astype(np.float16)
    b = RNG.standard_normal((16, 8)).astype(np.float16)
    a_regs = pack(lambda i: a.view(np.uint16)[a16_pos(i)], 4, 2, 16)
    b_regs = pack(lambda i: b.view(np.uint16)[b16_pos(i)], 2, 2, 16)
    got = unpack_d(run_mma("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", a_regs, b_regs,
                           np.zeros((32, 4), np.float32)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    close(got, want)
    assert not np.allclose(got[:8], want[8:])


@pytest.mark.parametrize("op", ["mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e4m3.f32",
                                "mma.sync.aligned.kind::f8f6f4.m16n8k32.row.col.f32.e4m3.e4m3.f32",
                                "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"])
def test_mma_m16n8k32_e4m3(op):
    a_c, a = fp8_codes((16, 32))
    b_c, b = fp8_codes((32, 8))
    c = RNG.standard_normal((16, 8)).astype(np.float32)
    a_regs = pack(lambda i: a_c[a32_pos(i)], 4, 4, 8)
    b_regs = pack(lambda i: b_c[b32_pos(i)], 2, 4, 8)
    close(unpack_d(run_mma(op, a_regs, b_regs, pack_c(c))), a @ b + c)


def test_mma_m16n8k32_e5m2_times_e4m3():
    a_c = RNG.integers(0, 256, size=(16, 32)).astype(np.uint8)
    a_c[(a_c & 0x7C) == 0x7C] = 0x3C               # e5m2: no inf / NaN
    a = decode(a_c, "e5m2")
    b_c, b = fp8_codes((32, 8))
    got = run_mma("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e5m2.e4m3.f32",
                  pack(lambda i: a_c[a32_pos(i)], 4, 4, 8), pack(lambda i: b_c[b32_pos(i)], 2, 4, 8),
                  np.zeros((32, 4), np.float32))
    close(unpack_d(got), a @ b)


def test_mma_f8f6f4_e2m1_sits_in_the_central_bits_of_its_byte():
    a_c, a = e2m1_codes((16, 32))
    b_c, b = e2m1_codes((32, 8))
    # ISA: "resides in central 4 bits of the 8-bit container with padding in the upper 2 bits
    # and lower 2 bits": put garbage in the padding, it must not matter
    pad = lambda shape: (RNG.integers(0, 4, shape) | RNG.integers(0, 4, shape) << 6).astype(np.uint8)  # noqa: E731
    a8 = (a_c << 2) | pad(a_c.shape)
    b8 = (b_c << 2) | pad(b_c.shape)
    a_regs = pack(lambda i: a8[a32_pos(i)], 4, 4, 8)
    b_regs = pack(lambda i: b8[b32_pos(i)], 2, 4, 8)
    got = run_mma("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32", a_regs, b_regs,
                  np.zeros((32, 4), np.float32))
    close(unpack_d(got), a @ b)


def sf_lane_a(row, thread_id):
    """9.7.14.3: thread-id-a picks the quad's thread pair {2t, 2t+1}; of the pair, the lower
    lane holds the scale of row groupID and the upper of row groupID + 8 (A's own rows)."""
    return 4 * (row % 8) + 2 * thread_id + row // 8


def sf_lane_b(col, thread_id):
    return 4 * col + thread_id


@pytest.mark.parametrize("byte_a,thread_a,byte_b,thread_b", [(0, 0, 0, 0), (3, 1, 2, 3), (1, 0, 3, 2)])
def test_mma_mxf8f6f4_block_scale_1x(byte_a, thread_a, byte_b, thread_b):
    a_c, a = fp8_codes((16, 32))
    b_c, b = fp8_codes((32, 8))
    c = RNG.standard_normal((16, 8)).astype(np.float32)
    sfa = RNG.integers(120, 134, size=(32, 4)).astype(np.uint8)       # ue8m0: 2^(e - 127)
    sfb = RNG.integers(120, 134, size=(32, 4)).astype(np.uint8)
    sa = np.array([2.0 ** (int(sfa[sf_lane_a(r, thread_a), byte_a]) - 127) for r in range(16)])
    sb = np.array([2.0 ** (int(sfb[sf_lane_b(n, thread_b), byte_b]) - 127) for n in range(8)])
    want = (a * sa[:, None]) @ (b * sb[None, :]) + c
    got = run_mma("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e4m3.e4m3.f32.ue8m0",
                  pack(lambda i: a_c[a32_pos(i)], 4, 4, 8), pack(lambda i: b_c[b32_pos(i)], 2, 4, 8), pack_c(c),
                  sfa.view("<u4").reshape(32), sfb.view("<u4").reshape(32),
                  scales=f"{{{byte_a}, {thread_a}}}|{{{byte_b}, {thread_b}}}")
    close(unpack_d(got), want)


@pytest.mark.parametrize("scale_vec,stype,byte_id", [("4X", "ue4m3", 0), ("2X", "ue8m0", 0), ("2X", "ue8m0", 2)])
def test_mma_mxf4nvf4_block_scale(scale_vec, stype, byte_id):
    a_c, a = e2m1_codes((16, 64))
    b_c, b = e2m1_codes((64, 8))
    v = int(scale_vec[0])
    if stype == "ue4m3":
        sf_codes = lambda: RNG.integers(0x30, 0x48, size=(32, 4)).astype(np.uint8)  # noqa: E731
        val = lambda code: decode(np.array([code]), "ue4m3")[0]  # noqa: E731
    else:
        sf_codes = lambda: RNG.integers(124, 131, size=(32, 4)).astype(np.uint8)  # noqa: E731
        val = lambda code: 2.0 ** (int(code) - 127)  # noqa: E731
    sfa, sfb = sf_codes(), sf_codes()
    ta, tb = 1, 2
    # K block j (64 / V elements) of row m is scaled by byte byte_id + j of the supplier's word
    sa = np.array([[val(sfa[sf_lane_a(r, ta), byte_id + j]) for j in range(v)] for r in range(16)])
    sb = np.array([[val(sfb[sf_lane_b(n, tb), byte_id + j]) for j in range(v)] for n in range(8)])
    want = (a * np.repeat(sa, 64 // v, axis=1)) @ (b * np.repeat(sb, 64 // v, axis=1).T)
    # no padding: eight e2m1 per register, element i at bits 4i
    got = run_mma(f"mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::{scale_vec}.f32.e2m1.e2m1.f32.{stype}",
                  pack(lambda i: a_c[a64_pos(i)], 4, 8, 4), pack(lambda i: b_c[b64_pos(i)], 2, 8, 4),
                  np.zeros((32, 4), np.float32), sfa.view("<u4").reshape(32), sfb.view("<u4").reshape(32),
                  scales=f"{{{byte_id}, {ta}}}|{{{byte_id}, {tb}}}")
    close(unpack_d(got), want)


def test_block_scale_selector_outside_table_37_is_an_error():
    op = "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3"
    z = np.zeros((32, 4), np.uint32)
    with pytest.raises(CheckFailed, match=r"<ptx>:\d+: .*byte-id-a = 1"):
        run_mma(op, z, z[:, :2], z.view(np.float32), z[:, 0], z[:, 0], scales="{1, 0}|{0, 0}")
    with pytest.raises(CheckFailed, match="thread-id-a = 2"):
        run_mma(op.replace("4X", "2X").replace("ue4m3", "ue8m0"), z, z[:, :2], z.view(np.float32), z[:, 0],
                z[:, 0], scales="{0, 2}|{0, 0}")


def test_unsupported_mma_forms_are_named():
    z = np.zeros((32, 4), np.uint32)
    with pytest.raises(Unsupported, match=r"<ptx>:\d+: PTX form `mma.sync.aligned.m16n8k8"):
        run_mma("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32", z, z[:, :2], z.view(np.float32))
    with pytest.raises(Unsupported, match="Table 36"):
        run_mma("mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue8m0",
                z, z[:, :2], z.view(np.float32), z[:, 0], z[:, 0], scales="{0, 0}|{0, 0}")


def test_mma_needs_the_whole_warp():
    ptx = HEAD + """
.visible .entry k(.param .u64 p)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<8>;
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 16;
    @%p1 bra DONE;
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r2, %r3, %r4, %r5}, {%r6, %r7}, {%f1, %f2, %f3, %f4};
DONE:
    ret;
}
"""
    with pytest.raises(CheckFailed, match=r"<ptx>(:\d+ `mma)?.*(diverged|only 16 of the warp's 32)"):
        emu_launch(ptx, "k", grid=1, block=32, args=[np.zeros(4, np.uint8)])


def test_unit_rejects_bad_operands():
    with pytest.raises(EmuError, match="m16n8k8"):
        unit.operand_values(np.zeros((32, 4), np.uint32), "m16n8k8", "a", "bf16")
    with pytest.raises(EmuError, match="format"):
        unit.operand_values(np.zeros((32, 4), np.uint32), "m16n8k64", "a", "e4m3")


# ---- ldmatrix / stmatrix ---------------------------------------------------------------------

LD_KERNEL = HEAD + """
.visible .entry k(.param .u64 p_in, .param .u64 p_addr, .param .u64 p_out)
{
    .shared .align 16 .b8 smem[2048];
    .reg .b32 %r<16>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [p_in];
    ld.param.u64 %rd2, [p_addr];
    ld.param.u64 %rd3, [p_out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, smem;
    // copy 2048 bytes into shared: 32 lanes x 4 x 16 B, with cp.async (one group, waited)
    mul.wide.u32 %rd4, %r1, 16;
    add.s64 %rd5, %rd1, %rd4;
    shl.b32 %r3, %r1, 4;
    add.u32 %r4, %r2, %r3;
    cp.async.cg.shared.global [%r4], [%rd5], 16;
    cp.async.cg.shared.global [%r4+512], [%rd5+512], 16;
    cp.async.cg.shared.global [%r4+1024], [%rd5+1024], 16;
    cp.async.cg.shared.global [%r4+1536], [%rd5+1536], 16;
    cp.async.commit_group;
    cp.async.wait_group 0;
    bar.sync 0;
    // lane l's row address: smem + addr[l]
    mul.wide.u32 %rd6, %r1, 4;
    add.s64 %rd7, %rd2, %rd6;
    ld.global.u32 %r5, [%rd7];
    add.u32 %r6, %r2, %r5;
    OPCODE {%r8, %r9, %r10, %r11}, [%r6];
    mul.wide.u32 %rd8, %r1, 16;
    add.s64 %rd9, %rd3, %rd8;
    st.global.v4.b32 [%rd9], {%r8, %r9, %r10, %r11};
    STORE
    ret;
}
"""


def run_ldmatrix(trans: bool, addr, store: str = "", smem=None):
    smem = RNG.integers(0, 2**16, size=1024, dtype=np.uint16) if smem is None else smem
    out = np.zeros((32, 4), np.uint32)
    op = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if trans else ''}.shared.b16"
    ptx = LD_KERNEL.replace("OPCODE", op).replace("STORE", store)
    res = emu_launch(ptx, "k", grid=1, block=32, args=[smem, np.asarray(addr, np.uint32), out])
    return smem, res.outputs[2]


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_x4(trans):
    # matrix j's rows at scattered, 16-byte aligned places (rows need not be contiguous)
    addr = (RNG.permutation(128)[:32] * 16).astype(np.uint32)
    smem, got = run_ldmatrix(trans, addr)
    for j in range(4):
        rows = np.stack([smem[addr[8 * j + r] // 2: addr[8 * j + r] // 2 + 8] for r in range(8)])   # (8, 8)
        mat = rows.T if trans else rows
        # Figure 104: lane l holds row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (low half first)
        want = mat[G, 2 * T].astype(np.uint32) | (mat[G, 2 * T + 1].astype(np.uint32) << 16)
        assert (got[:, j] == want).all(), f"matrix {j}"


def test_stmatrix_inverts_ldmatrix():
    addr = (RNG.permutation(64)[:32] * 16).astype(np.uint32)
    store = """
    add.u32 %r12, %r6, 0;
    stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%r12], {%r8, %r9, %r10, %r11};
    ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%r8, %r9, %r10, %r11}, [%r12];
    st.global.v4.b32 [%rd9], {%r8, %r9, %r10, %r11};
"""
    smem, plain = run_ldmatrix(True, addr)
    _, again = run_ldmatrix(True, addr, store, smem)
    assert (plain == again).all()


def test_ldmatrix_misaligned_row_is_an_error():
    addr = np.arange(32, dtype=np.uint32) * 16
    addr[9] += 4
    with pytest.raises(CheckFailed, match=r"<ptx>:\d+ `ldmatrix.*misaligned ldmatrix.x4 row address.*lane 9"):
        run_ldmatrix(False, addr)


# ---- cp.async ----------------------------------------------------------------------------------

CP_KERNEL = HEAD + """
.visible .entry k(.param .u64 p_src, .param .u64 p_out)
{
    .shared .align 16 .b8 buf[2048];
    .shared .align 8 .b64 bar;
    .reg .pred %p<4>;
    .reg .b32 %r<24>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [p_src];
    ld.param.u64 %rd2, [p_out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, buf;
    shl.b32 %r3, %r1, 4;
    add.u32 %r4, %r2, %r3;                  // this lane's 16 bytes at buf + 16 lane
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd4, %rd1, %rd3;               // src + 16 lane
    mov.u32 %r5, 0xdeadbeef;
    st.shared.u32 [%r4], %r5;               // old contents
    st.shared.u32 [%r4+512], %r5;
    mul.wide.u32 %rd5, %r1, 16;
    add.s64 %rd6, %rd2, %rd5;               // out + 16 lane: 4 words of observations
BODY
    ret;
}
"""


def run_cp(body: str, src=None):
    src = np.arange(32 * 64, dtype=np.uint32) + 1 if src is None else src
    out = np.zeros((32, 4), np.uint32)
    res = emu_launch(CP_KERNEL.replace("BODY", body), "k", grid=1, block=32, args=[src, out])
    return src.reshape(-1, 4), res.outputs[1]


def test_cp_async_lands_at_the_wait_not_before():
    src, out = run_cp("""
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    ld.shared.u32 %r6, [%r4];               // before the wait: the old bytes
    cp.async.wait_group 0;
    ld.shared.u32 %r7, [%r4];               // after it: the copy
    st.global.v2.u32 [%rd6], {%r6, %r7};
""")
    assert (out[:, 0] == 0xDEADBEEF).all()
    assert (out[:, 1] == src[:32, 0]).all()


def test_cp_async_wait_group_n_leaves_the_newest_groups_pending():
    src, out = run_cp("""
    cp.async.ca.shared.global [%r4], [%rd4], 4;
    cp.async.commit_group;
    cp.async.ca.shared.global [%r4+512], [%rd4+512], 8;
    cp.async.commit_group;
    cp.async.wait_group 1;                  // the first group only
    ld.shared.u32 %r6, [%r4];
    ld.shared.u32 %r7, [%r4+512];
    cp.async.wait_all;
    ld.shared.u32 %r8, [%r4+512];
    ld.shared.u32 %r9, [%r4+516];
    st.global.v4.u32 [%rd6], {%r6, %r7, %r8, %r9};
""")
    assert (out[:, 0] == src[:32, 0]).all()
    assert (out[:, 1] == 0xDEADBEEF).all()
    assert (out[:, 2] == src[32:64, 0]).all() and (out[:, 3] == src[32:64, 1]).all()


def test_cp_async_uncommitted_copies_are_not_covered_by_wait_group():
    _, out = run_cp("""
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.wait_group 0;                  // nothing committed yet: the copy is not in a group
    ld.shared.u32 %r6, [%r4];
    cp.async.commit_group;
    cp.async.wait_group 0;
    ld.shared.u32 %r7, [%r4];
    st.global.v2.u32 [%rd6], {%r6, %r7};
""")
    assert (out[:, 0] == 0xDEADBEEF).all() and (out[:, 1] != 0xDEADBEEF).all()


def test_cp_async_groups_are_per_thread():
    src, out = run_cp("""
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    setp.lt.u32 %p1, %r1, 16;
    @%p1 cp.async.commit_group;             // only lanes 0-15 close their group
    cp.async.wait_group 0;
    ld.shared.u32 %r6, [%r4];
    st.global.u32 [%rd6], %r6;
""")
    assert (out[:16, 0] == src[:16, 0]).all() and (out[16:, 0] == 0xDEADBEEF).all()


def test_cp_async_src_size_and_ignore_src_fill_zeros():
    src, out = run_cp("""
    mov.u32 %r10, 6;
    cp.async.ca.shared.global [%r4], [%rd4], 8, %r10;
    setp.ge.u32 %p2, %r1, 8;
    cp.async.cg.shared.global [%r4+512], [%rd4+512], 16, %p2;
    cp.async.wait_all;
    ld.shared.u32 %r6, [%r4];
    ld.shared.u32 %r7, [%r4+4];
    ld.shared.u32 %r8, [%r4+512];
    st.global.v4.u32 [%rd6], {%r6, %r7, %r8, %r8};
""")
    assert (out[:, 0] == src[:32, 0]).all()
    assert (out[:, 1] == src[:32, 1] & 0xFFFF).all()          # 2 of its 4 bytes copied, 2 zero-filled
    assert (out[:8, 2] == src[32:40, 0]).all() and (out[8:, 2] == 0).all()


def test_cp_async_mbarrier_arrive_noinc_tracks_the_copies():
    src, out = run_cp("""
    mov.u32 %r11, bar;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r11], 32;
    bar.sync 0;
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r11];
WAIT:
    mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 %p3, [%r11], 0;
    @!%p3 bra WAIT;
    ld.shared.u32 %r6, [%r4];
    st.global.u32 [%rd6], %r6;
""")
    assert (out[:, 0] == src[:32, 0]).all()


def test_cp_async_source_out_of_bounds_is_an_error():
    with pytest.raises(CheckFailed, match=r"<ptx>:\d+ `cp.async.*global cp.async of 16 B source"):
        run_cp("""
    cp.async.cg.shared.global [%r4], [%rd4+8192], 16;
""", src=np.zeros(32 * 4, np.uint32))


def test_cp_async_misaligned_destination_is_an_error():
    with pytest.raises(CheckFailed, match="misaligned cp.async of 16 B destination"):
        run_cp("""
    cp.async.cg.shared.global [%r4+8], [%rd4], 16;
""")


def test_cp_async_cg_needs_16_bytes():
    with pytest.raises(Unsupported, match="cp-size 16"):
        run_cp("""
    cp.async.cg.shared.global [%r4], [%rd4], 8;
""")


def test_copies_still_pending_at_exit_are_landed_harmlessly():
    _, out = run_cp("""
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    st.global.u32 [%rd6], %r5;
""")
    assert (out[:, 0] == 0xDEADBEEF).all()


def test_ldmatrix_of_rows_a_cp_async_still_writes_is_a_race():
    body = """
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r6, %r7, %r8, %r9}, [%r4];
    cp.async.wait_group 0;
"""
    with pytest.raises(CheckFailed, match=r"<ptx>:\d+ `ldmatrix.*still writing by CTA 0 warp 0 lane 0 \(the cp.async "
                                          r"at <ptx>:\d+\), not yet covered by its cp.async.wait_group"):
        run_cp(body)
    # after the wait the same ldmatrix is fine
    run_cp(body.replace("    cp.async.wait_group 0;\n", "").replace("cp.async.commit_group;",
                                                                       "cp.async.commit_group;\n    cp.async.wait_group 0;"))


def test_another_warps_ldmatrix_before_the_barrier_is_a_race():
    # warp 1 copies its rows; warp 0 reads them right away (no wait, no barrier in between)
    prologue = """    mov.u32 %r5, 0xdeadbeef;
    st.shared.u32 [%r4], %r5;               // old contents
    st.shared.u32 [%r4+512], %r5;
"""
    assert CP_KERNEL.count(prologue) == 1
    ptx = CP_KERNEL.replace(prologue, "").replace("BODY", """
    setp.ge.u32 %p1, %r1, 32;
    @!%p1 bra READ;
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    bar.sync 0;
    bar.sync 1;                             // warp 0 has read by now
    cp.async.wait_group 0;
    bra.uni DONE;
READ:
    bar.sync 0;
    add.u32 %r12, %r4, 512;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r6, %r7, %r8, %r9}, [%r12];
    bar.sync 1;
DONE:
""")
    src = np.arange(64 * 64, dtype=np.uint32)
    with pytest.raises(CheckFailed, match="by CTA 0 warp 1 .*before that thread's cp.async.wait_group and a barrier"):
        emu_launch(ptx, "k", grid=1, block=64, args=[src, np.zeros((64, 4), np.uint32)])


def test_a_store_into_a_copy_in_flight_is_a_race():
    with pytest.raises(CheckFailed, match=r"<ptx>:\d+ `cp.async.wait_group`.*written by something else while the "
                                          r"copy was in flight"):
        run_cp("""
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    st.shared.u32 [%r4+4], %r5;
    st.shared.u32 [%r4+4], %r1;
    cp.async.wait_group 0;
""")


def test_with_the_race_detector_a_landed_copy_still_needs_a_barrier(monkeypatch):
    """Warp 1 waits for its copy, warp 0 then reads the bytes with no barrier in between: the
    read meets the copy either in flight or landed but unordered (the race detector)."""
    import functools
    import importlib

    from porter.emu.machine import Scheduler

    launch_mod = importlib.import_module("porter.emu.launch")

    monkeypatch.setattr(launch_mod, "Scheduler", functools.partial(Scheduler, check_races=True))
    prologue = """    mov.u32 %r5, 0xdeadbeef;
    st.shared.u32 [%r4], %r5;               // old contents
    st.shared.u32 [%r4+512], %r5;
"""
    assert CP_KERNEL.count(prologue) == 1
    ptx = CP_KERNEL.replace(prologue, "").replace("BODY", """
    setp.ge.u32 %p1, %r1, 32;
    @!%p1 bra READ;
    cp.async.cg.shared.global [%r4], [%rd4], 16;
    cp.async.commit_group;
    cp.async.wait_group 0;
    bra.uni DONE;
READ:
    nanosleep.u32 1000;
    add.u32 %r12, %r4, 512;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r6, %r7, %r8, %r9}, [%r12];
DONE:
""")
    src = np.arange(64 * 64, dtype=np.uint32)
    with pytest.raises(CheckFailed, match=r"ldmatrix.*(shared-memory race in CTA 0 .* read \(ldmatrix.x4\) by CTA 0 "
                                          r"warp 0 .* earlier write by CTA 0 warp 1|still writing)"):
        emu_launch(ptx, "k", grid=1, block=64, args=[src, np.zeros((64, 4), np.uint32)])
    # with a barrier after the wait it is fine
    fixed = ptx.replace("    cp.async.wait_group 0;\n    bra.uni DONE;", "    cp.async.wait_group 0;\n    bar.sync 0;\n"
                        "    bra.uni DONE;").replace("    nanosleep.u32 1000;\n", "    bar.sync 0;\n")
    emu_launch(fixed, "k", grid=1, block=64, args=[src, np.zeros((64, 4), np.uint32)])


def test_m16n8k64_fragments_cover_the_matrix_once_and_match_the_figure_formulas():
    for operand, dims, regs in (("a", (16, 64), 4), ("b", (64, 8), 2)):
        rows, cols = unit.fragment_layout("m16n8k64", operand)
        assert rows.shape == (32, regs, 8)
        assert np.unique(rows * dims[1] + cols).size == dims[0] * dims[1]
        pos = a64_pos if operand == "a" else b64_pos
        for i in range(regs * 8):
            r, c = pos(i)
            assert (rows[:, i // 8, i % 8] == r).all() and (cols[:, i // 8, i % 8] == c).all()
    rows, cols = unit.fragment_layout("m16n8k64", "a")
    # T5 (groupID 1, threadID_in_group 1): a16 at row 1, column 8 + 32
    assert (rows[5, 2, 0], cols[5, 2, 0]) == (1, 40)


def test_scale_lanes_from_the_selector_text():
    # thread-id-a = 1: lanes %4 in {2, 3}; the lower one row groupID, the upper groupID + 8
    assert unit.scale_lanes("a", 1)[[0, 8, 1, 15]].tolist() == [2, 3, 6, 31]
    # thread-id-b = 3: lane 4 n + 3 for column n
    assert unit.scale_lanes("b", 3).tolist() == [3, 7, 11, 15, 19, 23, 27, 31]
