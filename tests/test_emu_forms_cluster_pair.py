"""Two idioms of 2-CTA Blackwell kernels (ThunderKittens' bf16 GEMM stopped on both):

* a cluster barrier completes only when every non-exited warp of the cluster has arrived
  (PTX ISA "barrier.cluster"). Idle warps that arrive and exit at once must not stand in for a
  warp that is still initialising its CTA's mbarriers: the simulator compared the number of
  arrivals (exited warps' included) with the warps still running, completed the phase early
  and then refused the peer's remote use of a barrier not yet initialised.
* ``cp.async.bulk.tensor ... .cta_group::2.multicast::cluster`` with the mbarrier of CTA 0:
  each CTA of the pair loads into its own shared memory and signals the barrier of the pair's
  CTA whose rank parity is that of the mbarrier's address (PTX ISA "cp.async.bulk.tensor"),
  so the leader counts both loads on one barrier. The simulator signalled each destination's
  own barrier instead (the leader's never completed: a deadlock).

Kernels written here, checked against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.runtime.tensormap import TensorMapParams

# 2 CTAs x 2 warps. Warp 1 arrives and exits. In CTA 1, warp 0 first spins, then thread 0
# initialises the barrier, then the warp arrives (the release arrive makes the init visible to
# the cluster) and waits; CTA 0's thread 0 then arrives on CTA 1's barrier, which CTA 1 waits on.
_LATE_INIT = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry late_init(.param .u64 out_ptr) .reqnctapercluster 2, 1, 1
{
  .reg .pred %p<6>;
  .reg .b32 %r<20>;
  .reg .b64 %rd<4>;
  .shared .align 8 .b64 bar;
  ld.param.u64 %rd1, [out_ptr];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %cluster_ctarank;
  mov.u32 %r3, bar;
  setp.ge.u32 %p4, %r1, 32;
  @%p4 bra IDLE;
  setp.eq.u32 %p5, %r2, 0;
  mov.u32 %r5, 0;
  @%p5 bra INIT;
SPIN:
  add.u32 %r5, %r5, 1;
  setp.lt.u32 %p3, %r5, 300;
  @%p3 bra SPIN;
INIT:
  setp.ne.u32 %p1, %r1, 0;
  @!%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  setp.ne.u32 %p2, %r2, 0;
  @%p2 bra RANK1;
  @%p1 bra END;
  mapa.shared::cluster.u32 %r4, %r3, 1;
  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];
  bra END;
RANK1:
WAIT:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra WAIT;
  @%p1 bra END;
  st.global.u32 [%rd1], %r5;
  bra END;
IDLE:
  barrier.cluster.arrive.release.aligned;
END:
  ret;
}
"""


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_cluster_barrier_waits_for_a_late_warp_while_idle_warps_have_exited(seed):
    out = np.zeros(1, np.uint32)
    res = emu.launch(_LATE_INIT, "late_init", grid=2, block=64, args=[out], seed=seed)
    assert int(res.outputs[0][0]) == 300


# 2 CTAs x 1 warp. CTA r loads rows 8r..8r+7 of a 16 x 32 u32 tensor into its own `tile`
# (multicast mask 1 << r) and signals CTA 0's barrier (mapa to rank 0). CTA 0 arms that barrier
# for both loads and waits; a cluster barrier then hands the result to CTA 1; each CTA copies
# its tile out.
_PAIR_TMA = """.version 8.7
.target sm_100a
.address_size 64

.visible .entry pair_tma(.param .align 64 .b8 tmap[128], .param .u64 out_ptr) .reqnctapercluster 2, 1, 1
{
  .reg .pred %p<6>;
  .reg .b16 %rs<2>;
  .reg .b32 %r<24>;
  .reg .b64 %rd<8>;
  .shared .align 8 .b64 bar;
  .shared .align 128 .b8 tile[1024];
  ld.param.u64 %rd1, [out_ptr];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u64 %rd2, tmap;
  cvta.param.u64 %rd2, %rd2;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %cluster_ctarank;
  mov.u32 %r3, bar;
  mov.u32 %r4, tile;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  @%p1 fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  setp.eq.u32 %p2, %r2, 0;
  and.pred %p3, %p1, %p2;
  @%p3 mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [%r3], 2048;
  mov.u32 %r5, 0;
  mapa.shared::cluster.u32 %r6, %r3, %r5;
  shl.b32 %r7, %r2, 3;
  mov.u32 %r8, 1;
  shl.b32 %r9, %r8, %r2;
  cvt.u16.u32 %rs1, %r9;
  @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2.multicast::cluster [%r4], [%rd2, {%r5, %r7}], [%r6], %rs1;
  @!%p2 bra SYNC;
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r3], 0;
  @!%p4 bra WAIT;
SYNC:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  mov.u32 %r10, 0;
COPY:
  shl.b32 %r11, %r10, 5;
  add.u32 %r11, %r11, %r1;
  shl.b32 %r12, %r11, 2;
  add.u32 %r13, %r4, %r12;
  ld.shared.u32 %r14, [%r13];
  shl.b32 %r15, %r2, 8;
  add.u32 %r15, %r15, %r11;
  mul.wide.u32 %rd4, %r15, 4;
  add.s64 %rd5, %rd1, %rd4;
  st.global.u32 [%rd5], %r14;
  add.u32 %r10, %r10, 1;
  setp.lt.u32 %p5, %r10, 8;
  @%p5 bra COPY;
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  ret;
}
"""


@pytest.mark.parametrize("seed", [None, 0, 3])
def test_pair_tma_loads_signal_the_leaders_barrier(seed):
    src = (np.arange(16 * 32, dtype=np.uint32) * 7 + 5).reshape(16, 32)
    p = TensorMapParams("g", "UINT32", dims=(32, 16), strides=(128,), box=(32, 8), swizzle="NONE")
    out = np.zeros(512, np.uint32)
    res = emu.launch(_PAIR_TMA, "pair_tma", grid=2, block=32, args=[emu.tensor_map(p, src), out], seed=seed)
    np.testing.assert_array_equal(res.outputs[1], src.reshape(-1))


# 2 CTAs x 2 warps: CTA 0's warp 1 arrives and exits; CTA 1's warp 1 never arrives (it waits on
# an mbarrier nobody completes); the warp 0s arrive and wait for ever.
_NEVER = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry never() .reqnctapercluster 2, 1, 1
{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .shared .align 8 .b64 bar;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %cluster_ctarank;
  mov.u32 %r3, bar;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  bar.sync 0;
  setp.lt.u32 %p2, %r1, 32;
  @%p2 bra ARRIVE;
  setp.eq.u32 %p3, %r2, 0;
  @%p3 bra IDLE;
STUCK:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra STUCK;
  bra END;
IDLE:
  barrier.cluster.arrive.release.aligned;
  bra END;
ARRIVE:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
END:
  ret;
}
"""


def test_a_cluster_barrier_missing_a_warp_deadlocks_counting_running_warps():
    from porter.emu.errors import Deadlock

    with pytest.raises(Deadlock) as e:
        emu.launch(_NEVER, "never", grid=2, block=64, args=[], seed=0)
    msg = str(e.value)
    assert "barrier.cluster.wait: 2 of 3 running warps of the cluster arrived" in msg, msg
