"""A CTA may exit without a final cluster barrier once everything its peer did to its shared
memory happened before its exit: gau-nernst's 2-CTA tcgen05 GEMM (its v5) ends with the peer's
tcgen05.commit multicast, which this CTA waited on, and no barrier.cluster after it. The
simulator stopped it ("exits while CTA 0, which accessed its shared memory ... is still
running"); the check now asks the race detector whether the peer's last access is ordered
before the exit, and still fires when it is not (an arrive nobody waited for).

The kernel here (written for this test): a 2-CTA cluster, one warp each; both initialise an
mbarrier (count 1) and meet at a cluster barrier; CTA 0's thread 0 arrives on CTA 1's barrier
(mapa + a remote release arrive) and then keeps computing; CTA 1 waits on its barrier (acquire)
and exits at once, or (the planted hazard) exits without waiting.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import launch
from porter.emu.errors import CheckFailed

_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry pair(.param .u64 out_ptr) .reqnctapercluster 2, 1, 1
{{
  .reg .pred %p<4>;
  .reg .b32 %r<20>;
  .reg .b64 %rd<4>;
  .shared .align 8 .b64 bar;
  ld.param.u64 %rd1, [out_ptr];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %cluster_ctarank;
  mov.u32 %r3, bar;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INIT_DONE;
  mbarrier.init.shared::cta.b64 [%r3], 1;
  fence.mbarrier_init.release.cluster;
INIT_DONE:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  setp.ne.u32 %p2, %r2, 0;
  @%p2 bra RANK1;
  @%p1 bra WORK;
  mapa.shared::cluster.u32 %r4, %r3, 1;
  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];
WORK:
  mov.u32 %r5, 0;
  mov.u32 %r6, 0;
SPIN:
  add.u32 %r6, %r6, %r5;
  add.u32 %r5, %r5, 1;
  setp.lt.u32 %p3, %r5, 400;
  @%p3 bra SPIN;
  @%p1 bra END;
  st.global.u32 [%rd1], %r6;
  bra END;
RANK1:
{wait}
END:
  ret;
}}
"""

_WAIT = """WAIT:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra WAIT;
"""


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_exit_after_waiting_on_the_peers_last_access(seed):
    out = np.zeros(1, np.uint32)
    res = launch(_PTX.format(wait=_WAIT), "pair", 2, 32, [out], seed=seed)
    assert int(res.outputs[0][0]) == sum(range(400))


def test_exit_with_the_peers_arrive_unwaited_still_fails():
    with pytest.raises(CheckFailed, match="missing cluster barrier before exit"):
        launch(_PTX.format(wait=""), "pair", 2, 32, [np.zeros(1, np.uint32)], seed=None)


def test_without_the_race_detector_the_check_stays_conservative():
    with pytest.raises(CheckFailed, match="missing cluster barrier before exit"):
        launch(_PTX.format(wait=_WAIT), "pair", 2, 32, [np.zeros(1, np.uint32)], seed=None, races=False)
