"""A cp.async ring whose stages are signalled by cp.async.mbarrier.arrive.noinc (the
CUTLASS blockwise-scaling producer's idiom, example 81): the producer issues the next stage
before the previous stage's asynchronous arrive has run, so the simulator's engine may
complete the later arrive first, landing the earlier copy with it. The earlier copy is still
ordered before the earlier arrive's phase (PTX ISA "cp.async.mbarrier.arrive": the
arrive-on is triggered once all prior cp.async operations of the thread completed), so no
warp order may report a race, and every order reads the copied values."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import launch

ROUNDS = 6

_PTX = """.version 8.0
.target sm_80
.address_size 64

.visible .entry ring(.param .u64 src_ptr, .param .u64 out_ptr)
{
  .reg .pred %p<4>;
  .reg .b32 %r<24>;
  .reg .f32 %f<2>;
  .reg .b64 %rd<8>;
  .shared .align 8 .b64 full[2];
  .shared .align 8 .b64 empty[2];
  .shared .align 16 .b8 buf[256];
  ld.param.u64 %rd1, [src_ptr];
  ld.param.u64 %rd2, [out_ptr];
  mov.u32 %r1, %tid.x;
  and.b32 %r2, %r1, 31;
  mov.u32 %r3, full;
  mov.u32 %r4, empty;
  mov.u32 %r5, buf;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INITED;
  mbarrier.init.shared.b64 [%r3], 64;
  mbarrier.init.shared.b64 [%r3+8], 64;
  mbarrier.init.shared.b64 [%r4], 32;
  mbarrier.init.shared.b64 [%r4+8], 32;
INITED:
  bar.sync 0;
  mov.u32 %r6, 0;
  setp.ge.u32 %p2, %r1, 32;
ROUND:
  // round r6: stage r7, its full / empty barriers r12 / r11, its slot r15, element r16
  and.b32 %r7, %r6, 1;
  shr.u32 %r8, %r6, 1;
  and.b32 %r8, %r8, 1;
  shl.b32 %r10, %r7, 3;
  add.u32 %r11, %r4, %r10;
  add.u32 %r12, %r3, %r10;
  shl.b32 %r13, %r7, 7;
  shl.b32 %r14, %r2, 2;
  add.u32 %r15, %r13, %r14;
  add.u32 %r15, %r5, %r15;
  shl.b32 %r16, %r6, 5;
  add.u32 %r16, %r16, %r2;
  mul.wide.u32 %rd3, %r16, 4;
  @%p2 bra CONSUME;
  xor.b32 %r9, %r8, 1;
PWAIT:
  mbarrier.try_wait.parity.shared.b64 %p3, [%r11], %r9;
  @!%p3 bra PWAIT;
  add.u64 %rd4, %rd1, %rd3;
  cp.async.ca.shared.global [%r15], [%rd4], 4;
  cp.async.mbarrier.arrive.noinc.shared.b64 [%r12];
  mbarrier.arrive.shared.b64 _, [%r12];
  bra NEXT;
CONSUME:
CWAIT:
  mbarrier.try_wait.parity.shared.b64 %p3, [%r12], %r8;
  @!%p3 bra CWAIT;
  ld.shared.f32 %f1, [%r15];
  mbarrier.arrive.shared.b64 _, [%r11];
  add.u64 %rd4, %rd2, %rd3;
  st.global.f32 [%rd4], %f1;
NEXT:
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p3, %r6, %ROUNDS;
  @%p3 bra ROUND;
DONE:
  ret;
}
""".replace("%ROUNDS", str(ROUNDS))


@pytest.mark.parametrize("seed", range(8))
def test_noinc_ring_reads_every_stage_in_any_warp_order(seed):
    src = np.arange(ROUNDS * 32, dtype=np.float32) + 0.5
    out = np.zeros_like(src)
    res = launch(_PTX, "ring", 1, 64, [src, out], seed=seed)
    assert np.array_equal(res.outputs[1], src)
