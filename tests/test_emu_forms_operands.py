"""Operand forms public kernels use that porter's own kernels do not (issue 18 item 2): a
negated predicate source ``!%p`` wherever ptxas reads a .pred source, and ``brx.idx`` over a
``.branchtargets`` list. Each a small kernel written here, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import CheckFailed, Unsupported

DECLS = ".reg .pred %p<10>;\n.reg .b32 %r<32>;\n.reg .b64 %rd<16>;\n"


def kernel(body: str, target: str = "sm_90a", pre: str = "", directives: str = "") -> str:
    """Entry ``k(out, inp)``: %rd3 = &out[tid], %rd4 = &inp[tid] (u32 each), %r0 = tid."""
    return (f".version 8.7\n.target {target}\n.address_size 64\n{pre}"
            f".visible .entry k(.param .u64 out, .param .u64 inp){directives}\n{{\n{DECLS}"
            "ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n"
            "ld.param.u64 %rd5, [inp];\ncvta.to.global.u64 %rd5, %rd5;\nmov.u32 %r0, %tid.x;\n"
            "mul.wide.u32 %rd2, %r0, 4;\nadd.s64 %rd3, %rd1, %rd2;\nadd.s64 %rd4, %rd5, %rd2;\n"
            f"{body}\nret;\n}}\n")


def run(body: str, inp=None, n: int = 32, threads: int = 32, grid: int = 1, **kw) -> np.ndarray:
    inp = np.zeros(max(n, threads), np.uint32) if inp is None else np.ascontiguousarray(inp, np.uint32)
    out = np.zeros(n, np.uint32)
    src = kernel(body, kw.pop("target", "sm_90a"), kw.pop("pre", ""), kw.pop("directives", ""))
    res = emu.launch(src, "k", grid=grid, block=threads, args=[out, inp], budget=200_000, **kw)
    return res.outputs[0]


T = np.arange(32, dtype=np.int64)


def test_negated_predicate_sources_in_every_reading_position():
    # p1 = t < 5, p2 = t < 9; each result column is a 0/1 word per thread
    body = ("setp.lt.u32 %p1, %r0, 5;\nsetp.lt.u32 %p2, %r0, 9;\n"
            "selp.b32 %r2, 1, 0, !%p1;\nst.global.u32 [%rd3], %r2;\n"
            "and.pred %p3, !%p1, %p2;\nselp.b32 %r2, 1, 0, %p3;\nst.global.u32 [%rd3+128], %r2;\n"
            "or.pred %p3, %p1, !%p2;\nselp.b32 %r2, 1, 0, %p3;\nst.global.u32 [%rd3+256], %r2;\n"
            "xor.pred %p3, !%p1, !%p2;\nselp.b32 %r2, 1, 0, %p3;\nst.global.u32 [%rd3+384], %r2;\n"
            "not.pred %p3, !%p1;\nselp.b32 %r2, 1, 0, %p3;\nst.global.u32 [%rd3+512], %r2;\n"
            "mov.pred %p3, !%p2;\nselp.b32 %r2, 1, 0, %p3;\nst.global.u32 [%rd3+640], %r2;\n"
            "setp.lt.and.u32 %p3|%p4, %r0, 3, !%p2;\nselp.b32 %r2, 1, 0, %p3;\nst.global.u32 [%rd3+768], %r2;\n"
            "selp.b32 %r2, 1, 0, %p4;\nst.global.u32 [%rd3+896], %r2;\n"
            "vote.sync.ballot.b32 %r2, !%p1, -1;\nst.global.u32 [%rd3+1024], %r2;\n"
            "vote.sync.all.pred %p5, !%p1, -1;\nselp.b32 %r2, 1, 0, %p5;\nst.global.u32 [%rd3+1152], %r2;\n"
            "bar.red.popc.u32 %r2, 0, !%p2;\nst.global.u32 [%rd3+1280], %r2;\n")
    got = run(body, n=32 * 11).reshape(11, 32).astype(np.int64)
    p1, p2 = T < 5, T < 9
    want = [~p1, ~p1 & p2, p1 | ~p2, ~p1 ^ ~p2, p1, ~p2, (T < 3) & ~p2, (T >= 3) & ~p2]
    for row, w in enumerate(want):
        np.testing.assert_array_equal(got[row], w.astype(np.int64), err_msg=f"row {row}")
    ballot = int(sum(1 << i for i in range(32) if not p1[i]))
    assert (got[8] == ballot).all()
    assert (got[9] == 0).all()                               # not every lane has t >= 5
    assert (got[10] == int((~p2).sum())).all()


def test_negated_predicate_in_a_diverged_warp_merges_with_the_register():
    # lanes 16.. skip the selp: their %r2 keeps its value (a negation never writes %p1)
    body = ("setp.lt.u32 %p1, %r0, 5;\nmov.u32 %r2, 7;\nsetp.ge.u32 %p6, %r0, 16;\n@%p6 bra SKIP;\n"
            "selp.b32 %r2, 1, 0, !%p1;\nSKIP:\nselp.b32 %r3, 1, 0, %p1;\nshl.b32 %r3, %r3, 4;\n"
            "or.b32 %r2, %r2, %r3;\nst.global.u32 [%rd3], %r2;\n")
    got = run(body).astype(np.int64)
    want = np.where(T >= 16, 7, (T >= 5).astype(np.int64)) | ((T < 5).astype(np.int64) << 4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("line,what", [
    ("add.u32 %r1, !%r0, 1;", "must be a declared predicate register|read as a .u32"),
    ("and.pred !%p6, %p1, %p2;", "as a destination"),
])
def test_a_negation_ptxas_refuses_is_one_clear_line(line, what):
    import re
    with pytest.raises(Unsupported) as e:
        run(line)
    msg = str(e.value)
    assert "\n" not in msg and ":" in msg and re.search(what, msg), msg


# ---- brx.idx over a .branchtargets list (PTX ISA 9.7.12.4) --------------------------------------

SWITCH = """and.b32 %r5, %r0, 3;
setp.eq.u32 %p7, %r0, 31;
{
.reg .b32 %q;
mov.u32 %q, 1000;
ts: .branchtargets CASE0, CASE1, CASE2, CASE3;
@%p7 bra DONE;
brx.idx%s %r5, ts;
CASE0: mul.lo.u32 %q, %r0, 3;
bra DONE;
CASE1: add.u32 %q, %r0, 100;
bra DONE;
CASE2: xor.b32 %q, %r0, 0x55;
bra DONE;
CASE3: mov.u32 %q, 7;
DONE:
mov.u32 %r6, %q;
}
st.global.u32 [%rd3], %r6;
"""


def _switch_ref():
    case = [T * 3, T + 100, T ^ 0x55, np.full(32, 7)]
    want = np.choose(T & 3, case)
    want[31] = 1000                                # lane 31 skips the switch
    return want


def test_brx_idx_divergent_indices_each_lane_takes_its_target_and_reconverges():
    got = run(SWITCH.replace("%s", "")).astype(np.int64)
    np.testing.assert_array_equal(got, _switch_ref())


def test_brx_idx_guarded_and_uniform():
    # a guarded brx.idx: lanes with the guard false fall through to CASE0
    body = SWITCH.replace("%s", "").replace("brx.idx %r5, ts;", "setp.lt.u32 %p8, %r0, 8;\n@%p8 brx.idx %r5, ts;")
    got = run(body).astype(np.int64)
    want = _switch_ref()
    want[8:31] = T[8:31] * 3
    np.testing.assert_array_equal(got, want)
    # .uni with one index for the whole warp
    uni = SWITCH.replace("%s", ".uni").replace("and.b32 %r5, %r0, 3;", "mov.u32 %r5, 2;").replace(
        "setp.eq.u32 %p7, %r0, 31;", "setp.eq.u32 %p7, %r0, 99;")
    np.testing.assert_array_equal(run(uni).astype(np.int64), T ^ 0x55)


def test_brx_idx_errors_name_the_isa_section():
    with pytest.raises(CheckFailed, match=r"index 5 in lane 0 is past the end of its 4-entry.*PTX ISA 9\.7\.12\.4"):
        run(SWITCH.replace("%s", "").replace("and.b32 %r5, %r0, 3;", "add.u32 %r5, %r0, 5;"))
    with pytest.raises(CheckFailed, match=r"brx\.idx\.uni.*differs.*PTX ISA 9\.7\.12\.4"):
        run(SWITCH.replace("%s", ".uni"))
    with pytest.raises(Unsupported, match=r"'NOWHERE' is not a label of kernel k"):
        run(SWITCH.replace("%s", "").replace("CASE3;", "NOWHERE;"))


# ---- generic mapa / getctarank (PTX ISA 9.7.9 "mapa", "getctarank") -----------------------------

PAIR = dict(pre=".shared .align 16 .b8 buf[256];\n", grid=4, n=128, directives=" .reqnctapercluster 2, 1, 1")

# each CTA writes rank*1000 + t into buf[t] through a generic pointer, then reads its peer's
# buf[t] and writes 5000 + its rank*100 + t into the peer's buf[32 + t], both through mapa.u64
GENERIC_PEER = """
mov.u32 %r1, %cluster_ctarank;
mov.u64 %rd6, buf;
cvta.shared.u64 %rd7, %rd6;
shl.b32 %r2, %r0, 2;
cvt.u64.u32 %rd8, %r2;
add.s64 %rd9, %rd7, %rd8;
mad.lo.u32 %r3, %r1, 1000, %r0;
st.u32 [%rd9], %r3;
barrier.cluster.arrive.aligned;
barrier.cluster.wait.aligned;
xor.b32 %r4, %r1, 1;
mapa.u64 %rd10, %rd9, %r4;
ld.u32 %r5, [%rd10];
getctarank.u64 %r6, %rd10;
getctarank.u64 %r9, %rd9;
mad.lo.u32 %r7, %r1, 100, %r0;
add.u32 %r7, %r7, 5000;
st.u32 [%rd10+128], %r7;
barrier.cluster.arrive.aligned;
barrier.cluster.wait.aligned;
ld.u32 %r8, [%rd9+128];
shl.b32 %r6, %r6, 16;
shl.b32 %r9, %r9, 17;
or.b32 %r5, %r5, %r6;
or.b32 %r5, %r5, %r9;
mov.u32 %r10, %ctaid.x;
mad.lo.u32 %r11, %r10, 32, %r0;
mul.wide.u32 %rd11, %r11, 4;
add.s64 %rd12, %rd1, %rd11;
st.global.u32 [%rd12], %r5;
st.global.u32 [%rd12+512], %r8;
"""


def test_generic_mapa_reads_and_writes_the_peer_ctas_shared_memory():
    got = run(GENERIC_PEER, **{**PAIR, "n": 256}).astype(np.int64).reshape(2, 4, 32)
    for cta in range(4):
        rank, peer = cta % 2, (cta % 2) ^ 1
        np.testing.assert_array_equal(got[0, cta], (peer * 1000 + T) | (peer << 16) | (rank << 17))
        np.testing.assert_array_equal(got[1, cta], 5000 + peer * 100 + T)


def test_generic_mapa_errors_name_the_isa_section():
    bad_addr = GENERIC_PEER.replace("mapa.u64 %rd10, %rd9, %r4;", "mapa.u64 %rd10, %rd3, %r4;")
    with pytest.raises(CheckFailed, match=r"mapa of generic address 0x[0-9a-f]+ \(lane 0\), which is not in the "
                                          r"shared window.*PTX ISA 9\.7\.9 \"mapa\""):
        run(bad_addr, **{**PAIR, "n": 256})
    bad_rank = GENERIC_PEER.replace("xor.b32 %r4, %r1, 1;", "add.u32 %r4, %r1, 2;")
    with pytest.raises(CheckFailed, match=r"mapa to CTA rank \d of a 2-CTA cluster"):
        run(bad_rank, **{**PAIR, "n": 256})
    with pytest.raises(Unsupported, match=r"mapa\.u32.*use \.u64"):
        run("mapa.u32 %r2, %r0, 0;")


# ---- mbarrier.pending_count (PTX ISA 9.7.13.15.17), shared-memory size registers ---------------

MBAR = dict(pre=".shared .align 8 .b64 bar;\n")

PENDING = """
mov.u32 %r10, bar;
setp.eq.u32 %p1, %r0, 0;
@%p1 mbarrier.init.shared::cta.b64 [%r10], 4;
bar.sync 0;
setp.lt.u32 %p2, %r0, 3;
mov.u64 %rd6, 0;
@%p2 mbarrier.arrive.noComplete.shared::cta.b64 %rd6, [%r10], 1;
mov.u32 %r2, 99;
@%p2 mbarrier.pending_count.b64 %r2, %rd6;
mbarrier.test_wait.shared::cta.b64 %p3, [%r10], %rd6;
selp.b32 %r3, 1, 0, %p3;
bar.sync 0;
setp.eq.u32 %p4, %r0, 3;
@%p4 mbarrier.arrive.shared::cta.b64 _, [%r10];
bar.sync 0;
mbarrier.test_wait.shared::cta.b64 %p3, [%r10], %rd6;
selp.b32 %r4, 2, 0, %p3;
or.b32 %r3, %r3, %r4;
st.global.u32 [%rd3], %r2;
st.global.u32 [%rd3+128], %r3;
"""


def test_pending_count_reads_the_count_before_each_noComplete_arrive():
    got = run(PENDING, n=64, **MBAR).astype(np.int64)
    assert sorted(got[:3]) == [2, 3, 4] and (got[3:32] == 99).all()
    # before the fourth arrival the phase is open (test_wait false); after it, complete
    assert (got[32:] == 2).all()


def test_pending_count_errors_name_the_isa_section():
    with pytest.raises(CheckFailed, match=r"noComplete completed phase 0.*PTX ISA 9\.7\.13\.15\.13"):
        run(PENDING.replace("setp.lt.u32 %p2, %r0, 3;", "setp.lt.u32 %p2, %r0, 4;"), n=64, **MBAR)
    with pytest.raises(CheckFailed, match=r"pending_count of state .* \(lane 0\).*PTX ISA 9\.7\.13\.15\.17"):
        run(PENDING.replace(".noComplete", ""), n=64, **MBAR)


def test_shared_memory_size_registers():
    body = ("mov.u32 %r2, %total_smem_size;\nst.global.u32 [%rd3], %r2;\n"
            "mov.u32 %r2, %aggr_smem_size;\nst.global.u32 [%rd3+128], %r2;\n"
            "mov.u32 %r2, %dynamic_smem_size;\nst.global.u32 [%rd3+256], %r2;\n"
            "mov.u64 %rd6, %current_graph_exec;\ncvt.u32.u64 %r2, %rd6;\nst.global.u32 [%rd3+384], %r2;\n"
            "mov.u32 %r2, WARP_SZ;\nst.global.u32 [%rd3+512], %r2;\n")
    pre = ".shared .align 16 .b8 sbuf[256];\n.extern .shared .align 16 .b8 dyn[];\n"
    got = run(body, n=160, pre=pre, smem=100).reshape(5, 32)
    # 256 static + 100 dynamic bytes, in 128-byte allocation units: 384; plus the 1 KB reserved
    assert (got[0] == 384).all() and (got[1] == 384 + 1024).all() and (got[2] == 100).all()
    assert (got[3] == 0).all() and (got[4] == 32).all()


# ---- device assert: call of __assertfail -------------------------------------------------------

def _cstr(name: str, text: str) -> str:
    data = ", ".join(str(b) for b in text.encode() + b"\0")
    return f".global .align 1 .b8 {name}[{len(text) + 1}] = {{{data}}};\n"


ASSERT_PRE = (".extern .func __assertfail\n(\n.param .b64 p0,\n.param .b64 p1,\n.param .b32 p2,\n.param .b64 p3,\n"
              ".param .b64 p4\n)\n;\n" + _cstr("$msg", "t < 40") + _cstr("$file", "kernel.cu") + _cstr("$fn", "k"))
ASSERT = """
setp.lt.u32 %p1, %r0, LIMIT;
@%p1 bra OK;
mov.u64 %rd6, $msg;
cvta.global.u64 %rd7, %rd6;
mov.u64 %rd8, $file;
cvta.global.u64 %rd9, %rd8;
mov.u64 %rd10, $fn;
cvta.global.u64 %rd11, %rd10;
{
.param .b64 param0;
st.param.b64 [param0+0], %rd7;
.param .b64 param1;
st.param.b64 [param1+0], %rd9;
.param .b32 param2;
st.param.b32 [param2+0], 17;
.param .b64 param3;
st.param.b64 [param3+0], %rd11;
.param .b64 param4;
st.param.b64 [param4+0], 1;
call.uni __assertfail, (param0, param1, param2, param3, param4);
}
OK:
st.global.u32 [%rd3], %r0;
"""


def test_a_device_assert_that_holds_runs_and_one_that_fails_stops_naming_it():
    np.testing.assert_array_equal(run(ASSERT.replace("LIMIT", "40"), pre=ASSERT_PRE), T)
    with pytest.raises(CheckFailed, match=r"lane 20: device assertion failed: `t < 40` at kernel\.cu:17 in k .*"
                                          r"PTX ISA 9\.7\.19\.4 \"trap\""):
        run(ASSERT.replace("LIMIT", "20"), pre=ASSERT_PRE)


# ---- local memory: a thread's __local_depot frame (PTX ISA 5.1.5) -----------------------------

LOCAL = """
{
.local .align 16 .b8 __local_depot0[80];
.reg .b64 %SP;
.reg .b64 %SPL;
mov.u64 %SPL, __local_depot0;
cvta.local.u64 %SP, %SPL;
mov.u32 %r5, 0;
FILL:
mad.lo.u32 %r6, %r0, 100, %r5;
mul.wide.u32 %rd6, %r5, 4;
add.s64 %rd7, %SPL, %rd6;
st.local.u32 [%rd7], %r6;
add.u32 %r5, %r5, 1;
setp.lt.u32 %p1, %r5, 16;
@%p1 bra FILL;
mul.lo.u32 %r7, %r0, 7;
and.b32 %r7, %r7, 15;
mul.wide.u32 %rd8, %r7, 4;
add.s64 %rd9, %SPL, %rd8;
ld.local.u32 %r2, [%rd9];
st.global.u32 [%rd3], %r2;
st.local.v2.u32 [__local_depot0+64], {%r0, %r7};
ld.local.v4.u32 {%r10, %r11, %r12, %r13}, [__local_depot0+64];
add.u32 %r14, %r10, %r11;
st.global.u32 [%rd3+128], %r14;
ld.local.u8 %r15, [%SPL+1];
st.global.u32 [%rd3+256], %r15;
cvta.to.local.u64 %rd10, %SP;
sub.s64 %rd11, %rd10, %SPL;
cvt.u32.u64 %r16, %rd11;
st.global.u32 [%rd3+384], %r16;
}
"""


def test_local_arrays_are_each_threads_own():
    got = run(LOCAL, n=128).reshape(4, 32).astype(np.int64)
    k = (T * 7) % 16
    np.testing.assert_array_equal(got[0], T * 100 + k)
    np.testing.assert_array_equal(got[1], T + k)                 # {tid, k} then two unwritten words
    np.testing.assert_array_equal(got[2], (T * 100) >> 8 & 0xFF)  # byte 1 of buf[0] = tid*100
    np.testing.assert_array_equal(got[3], 0)                     # cvta.to.local inverts cvta.local


def test_a_local_access_outside_the_threads_frame_names_the_isa():
    with pytest.raises(CheckFailed, match=r"not inside that thread's own local frame.*PTX ISA 5\.1\.5"):
        run(LOCAL.replace("ld.local.u8 %r15, [%SPL+1];", "ld.local.u8 %r15, [%SPL+80];"), n=128)


def test_brkpt_decodes_and_stops_the_warp_that_reaches_it():
    body = "setp.lt.u32 %p1, %r0, 40;\n@%p1 bra OK;\nbrkpt;\nOK:\nst.global.u32 [%rd3], %r0;\n"
    np.testing.assert_array_equal(run(body), T)
    with pytest.raises(CheckFailed, match=r"warp 0 executed brkpt.*PTX ISA 9\.7\.19\.1"):
        run(body.replace("40", "4"))


def test_generic_loads_and_stores_through_a_cvta_local_pointer():
    # %SP (generic) + 4*k: a store and a load through the generic window reach the same frame
    body = LOCAL.replace("ld.local.u8 %r15, [%SPL+1];", "add.s64 %rd12, %SP, 72;\nst.u32 [%rd12], %r7;\n"
                         "ld.local.u32 %r15, [%SPL+72];\nld.u32 %r17, [%SP+4];\nadd.u32 %r15, %r15, %r17;")
    got = run(body, n=128).reshape(4, 32).astype(np.int64)
    k = (T * 7) % 16
    np.testing.assert_array_equal(got[2], k + T * 100 + 1)          # buf[1] = tid*100 + 1
