"""TMEM hand-offs judged by happens-before (porter.emu.tmem_hb): a tcgen05.st by one warp
and a tcgen05.ld of the same cells by another warp with both tcgen05 fences but no
synchronisation between them is a race, whatever order the run took; with a named barrier
between them it is not. Hand-written sm_100a PTX (warps 0 and 4 share lane quarter 0)."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import CheckFailed
from porter.emu.launch import Memory
from porter.emu.machine import LaunchState, Scheduler

PTX = """\
.version 8.7
.target sm_100a
.address_size 64
.visible .entry k(.param .u64 k_out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .reg .pred %p<4>;
  .shared .align 16 .b32 taddr;
  ld.param.u64 %rd1, [k_out];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %tid.x;
  shr.u32 %r2, %r1, 5;
  setp.ne.u32 %p1, %r2, 0;
  setp.eq.u32 %p2, %r2, 4;
  mov.u32 %r3, taddr;
  @%p1 bra SKIP_ALLOC;
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r3], 32;
  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
SKIP_ALLOC:
  bar.sync 0;
  ld.shared.b32 %r4, [taddr];
  @%p2 bra READER;
  @%p1 bra DONE;
  tcgen05.st.sync.aligned.32x32b.x1.b32 [%r4], {%r1};
  tcgen05.wait::st.sync.aligned;
  tcgen05.fence::before_thread_sync;
  HANDOFF
  bra.uni DONE;
READER:
  nanosleep.u32 2000;
  HANDOFF
  tcgen05.fence::after_thread_sync;
  tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r5}, [%r4];
  tcgen05.wait::ld.sync.aligned;
  and.b32 %r6, %r1, 31;
  mul.wide.u32 %rd2, %r6, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
DONE:
  bar.sync 0;
  @%p1 bra END;
  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r4, 32;
END:
  ret;
}
"""


def _run(handoff: str, seed: int, races: bool = True):
    memory = Memory()
    prog = memory.program(PTX.replace("HANDOFF", handoff), "k", "handoff.ptx")
    out = memory.alloc(32 * 4)
    params = np.zeros(16, np.uint8)
    params[:8] = np.frombuffer(np.uint64(out.ptr).tobytes(), np.uint8)
    state = LaunchState(prog, (1, 1, 1), (160, 1, 1), (1, 1, 1), 0, params.tobytes(), memory.gmem, None, False)
    Scheduler(state, seed=seed, check_races=races).run()
    return out.to_host((32,), np.uint32)


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_an_unsynchronised_tmem_hand_off_is_a_race_in_every_order(seed):
    with pytest.raises(CheckFailed, match=r"TMEM hand-off race in CTA 0 at lane 0, column 0: read by CTA 0 warp 4 at "
                                          r"handoff\.ptx:\d+ and an earlier write by CTA 0 warp 0's tcgen05\.st at "
                                          r"handoff\.ptx:\d+, with no mbarrier phase"):
        _run("", seed)


def test_without_the_happens_before_check_the_same_run_passes_unseen():
    # the in-flight and fence checkers judge only this interleaving: the st landed first
    assert list(_run("", None, races=False)) == list(range(32))


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_a_barrier_between_the_fences_orders_the_hand_off(seed):
    assert list(_run("bar.sync 1, 64;", seed)) == list(range(32))
