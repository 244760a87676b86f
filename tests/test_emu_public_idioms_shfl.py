"""shfl.sync from a lane that does not execute it: gau-nernst's persistent sm_120 GEMM (its
matmul_v3) computes its tile index with a full-mask shfl.sync inside an elect.sync branch, so
only the elected lane executes it and reads lane 0's register. The PTX ISA (9.7.8.6) leaves
that value undefined; the hardware happens to elect lane 0. The simulator's seeded runs elect
any lane (the ISA names none), so the kernel gave wrong numbers with no word why; now the run
carries a warning naming the shuffle and the lanes. Kernel written here: lane 5 alone
shuffles from lane 0, which has exited; a whole warp's shuffle warns nothing."""

from __future__ import annotations

import numpy as np

from porter.emu import launch

_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry one(.param .u64 out_ptr, .param .u32 alone)
{
  .reg .pred %p<4>;
  .reg .b32 %r<10>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out_ptr];
  ld.param.u32 %r9, [alone];
  mov.u32 %r1, %laneid;
  add.u32 %r2, %r1, 100;
  setp.ne.u32 %p2, %r9, 0;
  @!%p2 bra ALL;
  setp.ne.u32 %p1, %r1, 5;
  @%p1 bra END;
ALL:
  shfl.sync.idx.b32 %r3, %r2, 0, 31, -1;
  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
END:
  ret;
}
"""


def test_a_lane_reading_an_exited_lane_is_warned():
    res = launch(_PTX, "one", 1, 32, [np.zeros(32, np.uint32), 1], seed=None)
    hits = [w for w in res.warnings if "shfl.sync lane 5 reads lane 0, which does not execute it" in w]
    assert len(hits) == 1 and "9.7.8.6" in hits[0], res.warnings


def test_a_whole_warps_shuffle_warns_nothing():
    res = launch(_PTX, "one", 1, 32, [np.zeros(32, np.uint32), 0], seed=None)
    assert not res.warnings
    assert (res.outputs[0] == 100).all()
