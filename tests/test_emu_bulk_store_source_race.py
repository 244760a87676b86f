"""A bulk store's shared-memory source is read until the ``cp.async.bulk.wait_group.read``
that covers its group (PTX ISA 9.7.9.25.4.2 "cp.reduce.async.bulk" and
"cp.async.bulk.wait_group": ``.read`` waits until the bulk operations in the groups have
finished reading their source, so only then may it be reused). Another warp may
rewrite the source only when its write is ordered after that wait, not merely after the
issue. FlashAttention-3's backward pass hands its dQ staging buffer between warps this way
(the dQ writer warp waits ``wait_group.read``, then arrives on the named barrier the MMA warps
sync on before they refill it).

The kernels are written here: warp 0 stages 32 floats in shared memory, lane 0 adds them
into global memory with ``cp.reduce.async.bulk ... .add.f32``, and warp 1 rewrites the buffer
after ``bar.sync`` on a named barrier warp 0 arrives on. Ordered: warp 0 waits
``wait_group.read 0`` and then arrives. Broken: it arrives first and waits after, so warp 1's
rewrite is ordered only after the issue. Before the fix the broken kernel ran clean in all 8
warp orders here: only the source snapshot check could catch it, and only where warp 1's write
happened to run before warp 0's wait. The race detector now records the source read again at
the wait that completes it, so the write races with it in every order.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import launch
from porter.emu.errors import CheckFailed


def _kernel(arrive_before_wait: bool) -> str:
    wait = "  @%p1 cp.async.bulk.wait_group.read 0;\n"
    arrive = "  bar.arrive 1, 64;\n"
    handoff = arrive + wait if arrive_before_wait else wait + arrive
    return """.version 8.0
.target sm_90a
.address_size 64

.visible .entry k(.param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<4>;
  .shared .align 128 .b8 buf[128];
  ld.param.u64 %rd1, [out];
  mov.u32 %r0, %tid.x;
  mov.u32 %r10, buf;
  and.b32 %r1, %r0, 31;
  shl.b32 %r2, %r1, 2;
  add.u32 %r3, %r10, %r2;
  setp.ge.u32 %p2, %r0, 32;
  @%p2 bra REFILL;
  // warp 0: stage, fence, bulk-reduce into out, hand the buffer to warp 1
  cvt.rn.f32.u32 %f1, %r0;
  st.shared.f32 [%r3], %f1;
  fence.proxy.async.shared::cta;
  bar.warp.sync 0xffffffff;
  setp.eq.u32 %p1, %r0, 0;
  @%p1 cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1], [%r10], 128;
  @%p1 cp.async.bulk.commit_group;
""" + handoff + """  ret;
REFILL:
  // warp 1: wait for the buffer, then refill it
  bar.sync 1, 64;
  mov.f32 %f2, 0f42c80000;
  st.shared.f32 [%r3], %f2;
  ret;
}
"""


SEEDS = [None, 0, 1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("seed", SEEDS)
def test_bulk_reduce_source_reused_after_wait_group_read_runs_and_adds(seed):
    out = np.full(32, 0.5, np.float32)
    res = launch(_kernel(arrive_before_wait=False), "k", 1, 64, [out], seed=seed)
    np.testing.assert_array_equal(res.outputs[0], np.arange(32, dtype=np.float32) + 0.5)


@pytest.mark.parametrize("seed", SEEDS)
def test_bulk_reduce_source_rewritten_by_a_warp_ordered_only_after_the_issue_is_a_race(seed):
    out = np.full(32, 0.5, np.float32)
    with pytest.raises(CheckFailed, match="race|rewritten before the cp.async.bulk.wait_group.read"):
        launch(_kernel(arrive_before_wait=True), "k", 1, 64, [out], seed=seed)
