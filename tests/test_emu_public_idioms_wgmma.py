"""wgmma.mma_async is the warpgroup's operation (PTX ISA 9.7.15): a thread that waited for
it may rewrite the operands at once, though its sibling warps have not reached their own
wait_group yet. fast.cu's kernels 2-3 do this: thread 0 reloads A and B by TMA right after
its own wgmma.wait_group 0, and the simulator (which ran the warps' shares independently)
reported a shared-memory race, or saw the operands change before the siblings' waits.

The kernel here (written for this test): one warpgroup copies a 64 x 16 A and an 8 x 16 B
(bf16, K-major, no swizzle, laid out by the test as the core-matrix layout) into shared
memory, runs one m64n8k16, waits, then thread 0 overwrites both operands; every thread
stores its four accumulators. Over several warp orders it must give A B^T and no finding.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter.emu import launch

from emu_wgmma_ptx import OPERANDS_TO_SHARED, core_layout


_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry wg(.param .u64 a_ptr, .param .u64 b_ptr, .param .u64 out_ptr)
{
  .reg .pred %p<4>;
  .reg .b32 %r<40>;
  .reg .f32 %f<8>;
  .reg .b64 %rd<20>;
""" + OPERANDS_TO_SHARED + """  ld.param.u64 %rd3, [out_ptr];
  mov.f32 %f0, 0f00000000;
  mov.f32 %f1, 0f00000000;
  mov.f32 %f2, 0f00000000;
  mov.f32 %f3, 0f00000000;
  wgmma.fence.sync.aligned;
  wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd11, %rd12, 1, 1, 1, 0, 0;
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  // thread 0 reuses the operands' memory at once (its warpgroup's MMA is complete)
  setp.ne.u32 %p2, %r1, 0;
  @%p2 bra STORE;
  mov.u32 %r20, 0;
  mov.u32 %r21, 0;
ZERO:
  add.u32 %r22, %r2, %r20;
  st.shared.u32 [%r22], 0;
  add.u32 %r20, %r20, 4;
  setp.lt.u32 %p3, %r20, 2048;
  @%p3 bra ZERO;
ZEROB:
  add.u32 %r22, %r3, %r21;
  st.shared.u32 [%r22], 0;
  add.u32 %r21, %r21, 4;
  setp.lt.u32 %p3, %r21, 256;
  @%p3 bra ZEROB;
STORE:
  mul.wide.u32 %rd7, %r1, 16;
  add.u64 %rd8, %rd3, %rd7;
  st.global.v4.f32 [%rd8], {%f0, %f1, %f2, %f3};
  ret;
}
"""


def _unfragment(out: np.ndarray) -> np.ndarray:
    """D (64 x 8) from each thread's four registers (warp w, lane l: rows 16w + l/4 (+8),
    columns 2 (l % 4) (+1))."""
    d = np.zeros((64, 8), np.float32)
    for t in range(128):
        w, l = divmod(t, 32)
        for j in range(4):
            d[16 * w + l // 4 + 8 * (j // 2), 2 * (l % 4) + j % 2] = out[t, j]
    return d


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3])
def test_a_waited_thread_rewrites_the_operands_its_siblings_read(seed):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    out = np.zeros((128, 4), np.float32)
    res = launch(_PTX, "wg", 1, 128, [core_layout(a), core_layout(b), out], seed=seed)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(_unfragment(res.outputs[2]), want, rtol=1e-5, atol=1e-5)
    assert res.summary.wgmma == 4
