"""Operand forms public kernels use that porter's own kernels do not (issue 18 item 2): a
negated predicate source ``!%p`` wherever ptxas reads a .pred source, and ``brx.idx`` over a
``.branchtargets`` list. Each a small kernel written here, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import CheckFailed, Unsupported

DECLS = ".reg .pred %p<10>;\n.reg .b32 %r<32>;\n.reg .b64 %rd<16>;\n"


def kernel(body: str, target: str = "sm_90a") -> str:
    """Entry ``k(out, inp)``: %rd3 = &out[tid], %rd4 = &inp[tid] (u32 each), %r0 = tid."""
    return (f".version 8.7\n.target {target}\n.address_size 64\n"
            f".visible .entry k(.param .u64 out, .param .u64 inp)\n{{\n{DECLS}"
            "ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n"
            "ld.param.u64 %rd5, [inp];\ncvta.to.global.u64 %rd5, %rd5;\nmov.u32 %r0, %tid.x;\n"
            "mul.wide.u32 %rd2, %r0, 4;\nadd.s64 %rd3, %rd1, %rd2;\nadd.s64 %rd4, %rd5, %rd2;\n"
            f"{body}\nret;\n}}\n")


def run(body: str, inp=None, n: int = 32, threads: int = 32, **kw) -> np.ndarray:
    inp = np.zeros(max(n, threads), np.uint32) if inp is None else np.ascontiguousarray(inp, np.uint32)
    out = np.zeros(n, np.uint32)
    res = emu.launch(kernel(body, kw.pop("target", "sm_90a")), "k", grid=1, block=threads, args=[out, inp],
                     budget=200_000, **kw)
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
