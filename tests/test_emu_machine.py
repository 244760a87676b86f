"""porter's PTX simulator on small hand-written PTX: instruction semantics from the PTX
ISA, divergence, warp collectives, barriers, and the reports for what it refuses
(forms outside its subset, deadlocks, runaway loops, out-of-bounds accesses)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter import emu
from porter.emu import ptx

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def kernel(body: str, params: str = ".param .u64 out", regs: str = "") -> str:
    decls = (".reg .pred %p<8>;\n.reg .b16 %rs<8>;\n.reg .b32 %r<64>;\n.reg .f32 %f<32>;\n"
             ".reg .b64 %rd<16>;\n" + regs)
    return HEAD + f".visible .entry k({params})\n{{\n{decls}\nld.param.u64 %rd1, [out];\n" \
                  f"cvta.to.global.u64 %rd1, %rd1;\nmov.u32 %r0, %tid.x;\nmul.wide.u32 %rd2, %r0, 4;\n" \
                  f"add.s64 %rd3, %rd1, %rd2;\n{body}\nret;\n}}\n"


def run(body: str, n: int = 32, dtype=np.uint32, threads: int = 32, **kw):
    out = np.zeros(n, dtype=dtype)
    res = emu.launch(kernel(body), "k", grid=1, block=threads, args=[out], **kw)
    return res.outputs[0], res.summary


def test_integer_ops_follow_the_isa():
    body = """
    mov.u32 %r1, -7;
    mov.u32 %r2, 2;
    div.s32 %r3, %r1, %r2;          // truncates toward zero: -3
    rem.s32 %r4, %r1, %r2;          // sign of the dividend: -1
    shr.s32 %r5, %r1, 40;           // shift amounts past the width clamp: sign fill
    shl.b32 %r6, %r2, 33;           // ... and zero for shl
    mul.hi.u32 %r7, %r1, %r2;       // high half of 0xFFFFFFF9 * 2
    clz.b32 %r8, %r2;               // 30
    st.global.u32 [%rd3], %r3;
    @%p0 bra $skip;
$skip:
    setp.eq.u32 %p1, %r0, 1;
    @%p1 st.global.u32 [%rd3], %r4;
    setp.eq.u32 %p1, %r0, 2;
    @%p1 st.global.u32 [%rd3], %r5;
    setp.eq.u32 %p1, %r0, 3;
    @%p1 st.global.u32 [%rd3], %r6;
    setp.eq.u32 %p1, %r0, 4;
    @%p1 st.global.u32 [%rd3], %r7;
    setp.eq.u32 %p1, %r0, 5;
    @%p1 st.global.u32 [%rd3], %r8;
    """
    out, _ = run(body, dtype=np.int32)
    assert list(out[:6]) == [-3, -1, -1, 0, 1, 30]


def test_float_ops_and_conversions():
    body = """
    cvt.rn.f32.u32 %f1, %r0;
    mov.f32 %f2, 0f3F000000;                 // 0.5
    fma.rn.f32 %f3, %f1, %f2, %f2;           // 0.5 * tid + 0.5
    mov.f32 %f4, 0f7FC00000;                 // NaN
    max.f32 %f5, %f4, %f3;                   // NaN-ignoring: %f3
    setp.neu.f32 %p1, %f4, %f4;              // unordered: true for NaN
    selp.f32 %f6, %f5, 0f00000000, %p1;
    cvt.rn.bf16x2.f32 %r1, %f6, %f2;         // first source -> upper half
    st.global.u32 [%rd3], %r1;
    """
    out, _ = run(body)
    hi = (out >> 16).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    lo = (out & 0xFFFF).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
    tid = np.arange(32)
    np.testing.assert_array_equal(hi, (0.5 * tid + 0.5).astype(ml_dtypes.bfloat16).astype(np.float32))
    assert (lo == 0.5).all()


def test_divergent_branches_reconverge():
    body = """
    and.b32 %r1, %r0, 3;
    setp.eq.u32 %p1, %r1, 0;
    mov.u32 %r2, 100;
    @%p1 bra $a;
    setp.eq.u32 %p2, %r1, 1;
    @%p2 bra $b;
    add.u32 %r2, %r2, 3;
    bra.uni $join;
$a:
    add.u32 %r2, %r2, 1;
    bra.uni $join;
$b:
    add.u32 %r2, %r2, 2;
$join:
    shfl.sync.idx.b32 %r3|%p3, %r2, 5, 31, -1;    // needs the whole warp back together
    add.u32 %r4, %r2, %r3;
    st.global.u32 [%rd3], %r4;
    """
    out, _ = run(body)
    own = 100 + np.array([1, 2, 3, 3])[np.arange(32) % 4]
    assert list(out) == list(own + 102)           # lane 5 holds 100 + 2


def test_shfl_bfly_sums_a_warp():
    body = """
    mov.u32 %r1, %r0;
    shfl.sync.bfly.b32 %r2|%p1, %r1, 16, 31, -1;
    add.u32 %r1, %r1, %r2;
    shfl.sync.bfly.b32 %r2|%p1, %r1, 8, 31, -1;
    add.u32 %r1, %r1, %r2;
    shfl.sync.bfly.b32 %r2|%p1, %r1, 4, 31, -1;
    add.u32 %r1, %r1, %r2;
    shfl.sync.bfly.b32 %r2|%p1, %r1, 2, 31, -1;
    add.u32 %r1, %r1, %r2;
    shfl.sync.bfly.b32 %r2|%p1, %r1, 1, 31, -1;
    add.u32 %r1, %r1, %r2;
    st.global.u32 [%rd3], %r1;
    """
    out, _ = run(body)
    assert (out == sum(range(32))).all()


def test_named_barrier_orders_shared_memory_between_warps():
    src = HEAD + """.visible .entry k(.param .u64 out)
{
.reg .pred %p<4>; .reg .b32 %r<16>; .reg .b64 %rd<8>;
.shared .align 4 .b8 buf[256];
ld.param.u64 %rd1, [out];
cvta.to.global.u64 %rd1, %rd1;
mov.u32 %r0, %tid.x;
mov.u32 %r1, buf;
shl.b32 %r2, %r0, 2;
add.u32 %r3, %r1, %r2;
mul.lo.u32 %r4, %r0, 3;
st.shared.u32 [%r3], %r4;
bar.sync 1, 64;
xor.b32 %r5, %r0, 32;                 // the other warp's element
shl.b32 %r6, %r5, 2;
add.u32 %r7, %r1, %r6;
ld.shared.u32 %r8, [%r7];
mul.wide.u32 %rd2, %r0, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r8;
ret;
}
"""
    out = np.zeros(64, np.uint32)
    res = emu.launch(src, "k", 1, 64, [out], seed=3)
    assert list(res.outputs[0]) == [3 * (i ^ 32) for i in range(64)]


MBAR = HEAD + """.visible .entry k(.param .u64 out)
{
.reg .pred %p<4>; .reg .b32 %r<16>; .reg .b64 %rd<8>;
.shared .align 8 .b8 bar[8];
mov.u32 %r0, %tid.x;
mov.u32 %r1, bar;
setp.ne.u32 %p1, %r0, 0;
@%p1 bra $wait;
mbarrier.init.shared::cta.b64 [%r1], COUNT;
$wait:
bar.sync 0;
ARRIVE
mov.u32 %r2, 0;
$spin:
mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r2;
@!%p2 bra $spin;
ret;
}
"""


def test_mbarrier_wait_that_can_never_complete_is_a_deadlock_report():
    src = MBAR.replace("COUNT", "2").replace("ARRIVE", "@!%p1 mbarrier.arrive.shared::cta.b64 _, [%r1];")
    with pytest.raises(emu.Deadlock) as exc:
        emu.launch(src, "k", 1, 32, [np.zeros(1, np.uint32)])
    text = str(exc.value)
    assert "deadlock" in text and "warp 0" in text
    assert "mbarrier.try_wait.parity on CTA 0 shared 0x" in text          # the barrier's address
    assert "parity 0" in text and "1 of 2 arrivals pending" in text and "tx-count 0" in text


def test_mbarrier_arrivals_beyond_the_count_are_reported():
    src = MBAR.replace("COUNT", "1").replace("ARRIVE", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r1], 16;")
    with pytest.raises(emu.CheckFailed, match="more arrivals than the barrier's count"):
        emu.launch(src, "k", 1, 32, [np.zeros(1, np.uint32)])


def test_mbarrier_use_before_init_is_reported():
    src = MBAR.replace("COUNT", "1").replace("@%p1 bra $wait;", "bra $wait;").replace(
        "ARRIVE", "mbarrier.arrive.shared::cta.b64 _, [%r1];")
    with pytest.raises(emu.CheckFailed, match="before mbarrier.init"):
        emu.launch(src, "k", 1, 32, [np.zeros(1, np.uint32)])


def test_runaway_loop_stops_at_the_budget():
    body = "$l:\nadd.u32 %r1, %r1, 1;\nbra.uni $l;"
    with pytest.raises(emu.Deadlock, match="instruction budget of 5,000 warp-instructions exhausted"):
        run(body, budget=5000)


def test_out_of_bounds_store_names_the_buffer():
    body = "st.global.u32 [%rd3+128], %r0;"     # one past the 32-element buffer for lanes >= 0
    with pytest.raises(emu.CheckFailed, match=r"outside every allocation \(nearest: argument 0"):
        run(body)


def test_misaligned_vector_access_is_reported():
    body = "st.global.v2.u32 [%rd3+4], {%r0, %r0};"
    with pytest.raises(emu.CheckFailed, match="misaligned store"):
        run(body, n=80)


def test_unsupported_form_names_file_line_and_form():
    src = kernel("tex.1d.v4.s32.s32 {%r1, %r2, %r3, %r4}, [%rd1, {%r0}];")
    with pytest.raises(emu.Unsupported) as exc:
        emu.launch(src, "k", 1, 32, [np.zeros(32, np.uint32)], file="tex.ptx")
    msg = str(exc.value)
    assert msg.startswith("tex.ptx:") and "`tex.1d.v4.s32.s32`" in msg and "outside the simulator's subset" in msg
    assert exc.value.exit_code == 2 and "\n" not in msg


def test_parser_renames_inline_asm_block_registers():
    src = kernel("{\n.reg .pred p;\nsetp.eq.u32 p, %r0, 0;\n@p st.global.u32 [%rd3], 7;\n}\n"
                 "{\n.reg .pred p;\nsetp.eq.u32 p, %r0, 1;\n@p st.global.u32 [%rd3], 9;\n}")
    k = ptx.parse(src).kernels["k"]
    assert sum(1 for r in k.regs if r.startswith("p#")) == 2
    out = emu.launch(src, "k", 1, 32, [np.zeros(32, np.uint32)]).outputs[0]
    assert list(out[:3]) == [7, 9, 0]


def test_launch_api_summary_and_scalars():
    src = HEAD + """.visible .entry k(.param .u64 out, .param .u32 n, .param .f32 s)
{
.reg .pred %p<2>; .reg .b32 %r<8>; .reg .f32 %f<4>; .reg .b64 %rd<6>;
ld.param.u64 %rd1, [out]; ld.param.u32 %r1, [n]; ld.param.f32 %f1, [s];
cvta.to.global.u64 %rd1, %rd1;
mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
mad.lo.s32 %r5, %r2, %r3, %r4;
setp.ge.u32 %p1, %r5, %r1;
@%p1 bra $done;
cvt.rn.f32.u32 %f2, %r5;
mul.f32 %f3, %f2, %f1;
mul.wide.u32 %rd2, %r5, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.f32 [%rd3], %f3;
$done:
ret;
}
"""
    out = np.full(100, -1, np.float32)
    res = emu.launch(src, "k", grid=4, block=32, args=[out, 90, 0.5])
    got = res.outputs[0]
    np.testing.assert_array_equal(got[:90], 0.5 * np.arange(90, dtype=np.float32))
    assert (got[90:] == -1).all()
    assert res.summary.ctas == 4 and res.summary.warps == 4 and res.summary.warp_instructions > 40
    with pytest.raises(emu.EmuError, match="takes 3 parameters, 2 arguments given"):
        emu.launch(src, "k", 1, 32, [out, 1])
