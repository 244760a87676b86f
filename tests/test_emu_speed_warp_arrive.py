"""A warp's mbarrier.arrive on one barrier is applied as one update (ops/sync.py
``_arrive_once``) where its lanes' arrivals stay within the phase; each lane's state token must
still be the phase before its own arrive, as lane by lane (PTX ISA 9.7.13.15.13
"mbarrier.arrive": the state is that of the phase before the arrive). Checked here through
test_wait on each lane's own token, on the three ways 32 arrivals meet a barrier's count:
short of it, exactly (the last lane completes the phase) and past it (lane 23 completes
phase 0 and lanes 24-31 arrive in phase 1, which the one-update path hands back to the
lane-by-lane one)."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu

SRC = """.version 8.7
.target sm_90a
.address_size 64
.shared .align 8 .b64 bar;
.visible .entry k(.param .u64 out)
{
.reg .pred %p<4>;
.reg .b32 %r<8>;
.reg .b64 %rd<8>;
ld.param.u64 %rd1, [out];
cvta.to.global.u64 %rd1, %rd1;
mov.u32 %r0, %tid.x;
mul.wide.u32 %rd2, %r0, 4;
add.s64 %rd3, %rd1, %rd2;
mov.u32 %r1, bar;
setp.eq.u32 %p1, %r0, 0;
@%p1 mbarrier.init.shared::cta.b64 [%r1], COUNT;
bar.sync 0;
ARRIVE
mbarrier.test_wait.shared::cta.b64 %p2, [%r1], %rd4;
selp.b32 %r2, 1, 0, %p2;
st.global.u32 [%rd3], %r2;
ret;
}
"""

ARRIVES = {
    "plain": "mbarrier.arrive.shared::cta.b64 %rd4, [%r1];",
    "expect_tx 0": "mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r1], 0;",
    "count 1": "mbarrier.arrive.shared::cta.b64 %rd4, [%r1], 1;",
}


@pytest.mark.parametrize("form", sorted(ARRIVES))
@pytest.mark.parametrize("count, completed", [(64, 0), (32, 32), (24, 24)])
def test_each_lane_token_is_its_own_phase(form, count, completed):
    src = SRC.replace("COUNT", str(count)).replace("ARRIVE", ARRIVES[form])
    out = np.zeros(32, np.uint32)
    got = emu.launch(src, "k", grid=1, block=32, args=[out]).outputs[0]
    want = (np.arange(32) < completed).astype(np.uint32)
    assert got.tolist() == want.tolist()


def test_a_diverged_warp_arrives_lane_by_lane_the_same():
    # only the even lanes arrive: 16 arrivals on a count of 16 complete the phase at lane 30
    src = SRC.replace("COUNT", "16").replace(
        "ARRIVE", "mov.u64 %rd4, 0;\nand.b32 %r3, %r0, 1;\nsetp.eq.u32 %p3, %r3, 0;\n"
                  "@%p3 mbarrier.arrive.shared::cta.b64 %rd4, [%r1];")
    out = np.zeros(32, np.uint32)
    got = emu.launch(src, "k", grid=1, block=32, args=[out]).outputs[0]
    # even lanes: their phase 0 completed; odd lanes test the token 0, phase 0, complete too
    assert got.tolist() == [1] * 32
