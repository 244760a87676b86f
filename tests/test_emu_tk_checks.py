"""The three simulator checks a public Blackwell bf16 GEMM stopped on (issue 18: an error only
where the PTX ISA states the rule, naming its section; else a warning with the reason).

1. A tcgen05.ld after waiting on the mbarrier a tcgen05.commit arrives on, with no
   tcgen05.fence::after_thread_sync in between: the ISA states it (9.7.16.6.4.2 / .4.4, "As
   tcgen05.ld is an asynchronous operation, the instruction tcgen05.fence::after_thread_sync is
   needed"), so an error naming that section.
2. A tcgen05.ld destination read (here converted to bf16) before tcgen05.wait::ld: the ISA
   states no such rule (unlike wgmma.wait_group's), so a warning, and the run completes.
3. A CTA exits while an arrive from the peer CTA on its mbarrier is ordered before nothing: the
   error names that arrive (its warp and line), not merely the peer's last access.

The kernels are written here.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import CheckFailed

from emu_tcgen05_ptx import HEAD, tmem_setup, tmem_teardown
from test_emu_tcgen05_ops import _mma


def test_tcgen05_ld_after_the_commit_wait_without_the_fence_is_an_error_naming_the_section():
    with pytest.raises(CheckFailed) as info:
        _mma(FENCE="")
    text = str(info.value)
    assert "without tcgen05.fence::after_thread_sync" in text
    assert "PTX ISA 9.7.16.6.4.2" in text and "9.7.16.6.4.4" in text and "is needed" in text, text


_LD_CVT = HEAD + """.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<40>;
  .reg .b64 %rd<8>;
  .reg .pred %p<4>;
  .shared .align 16 .b8 bars[16];
""" + tmem_setup(32, 1) + """  shl.b32 %r4, %r2, 21;
  add.u32 %r21, %r20, %r4;
  cvt.rn.f32.u32 %r5, %r1;
  add.f32 %r6, %r5, 0f3F000000;
  tcgen05.st.sync.aligned.32x32b.x2.b32 [%r21], {%r5, %r6};
  tcgen05.wait::st.sync.aligned;
  tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r7, %r8}, [%r21];
  cvt.rn.bf16x2.f32 %r9, %r8, %r7;
  tcgen05.wait::ld.sync.aligned;
  ld.param.u64 %rd1, [out];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.b32 [%rd3], %r9;
""" + tmem_teardown(32) + "}\n"
# the PTX line of the tcgen05.ld the warning names
_LD_LINE = next(i for i, ln in enumerate(_LD_CVT.splitlines(), 1) if ln.strip().startswith("tcgen05.ld."))


def test_tcgen05_ld_destination_converted_before_wait_ld_is_a_warning_and_the_run_completes():
    out = np.zeros(128, dtype=np.uint32)
    res = emu.launch(_LD_CVT, "k", grid=1, block=128, args=[out], seed=1, file="t.ptx")
    hits = [w for w in res.warnings if "before the tcgen05.wait::ld that covers it" in w]
    assert hits, res.warnings
    assert all("`cvt.rn.bf16x2.f32`" in w and f"the destination of the tcgen05.ld at line {_LD_LINE}" in w
               and "(a warning: the PTX ISA" in w and "states no rule" in w for w in hits), hits
    # the warning is no error: the registers hold the loaded values and the run goes on
    tid = np.arange(128, dtype=np.float32)
    lo = (tid.view(np.uint32) >> 16).astype(np.uint32)                  # exact in bf16: small integers
    hi = ((tid + 0.5).view(np.uint32) >> 16).astype(np.uint32)
    assert (res.outputs[0] == (hi << 16 | lo)).all()


def test_reading_it_after_wait_ld_gives_no_warning():
    fixed = _LD_CVT.replace("  cvt.rn.bf16x2.f32 %r9, %r8, %r7;\n  tcgen05.wait::ld.sync.aligned;\n",
                            "  tcgen05.wait::ld.sync.aligned;\n  cvt.rn.bf16x2.f32 %r9, %r8, %r7;\n")
    assert fixed != _LD_CVT
    res = emu.launch(fixed, "k", grid=1, block=128, args=[np.zeros(128, np.uint32)], seed=1, file="t.ptx")
    assert not [w for w in res.warnings if "tcgen05.wait::ld" in w], res.warnings


# A 2-CTA cluster, two warps each, two mbarriers (count 1) per CTA. In CTA 0, warp 1's lane 0
# arrives at once on CTA 1's barrier B (which nobody waits on); warp 0 spins, then its lane 0
# arrives on CTA 1's barrier A, the last remote access. CTA 1's threads wait on A, then exit:
# A's arrive is ordered before that exit, B's is not.
_PAIR = HEAD + """.visible .entry pair(.param .u64 out) .reqnctapercluster 2, 1, 1
{
  .reg .pred %p<6>;
  .reg .b32 %r<20>;
  .reg .b64 %rd<4>;
  .shared .align 8 .b64 bars[2];
  mov.u32 %r1, %tid.x;
  shr.u32 %r7, %r1, 5;
  and.b32 %r8, %r1, 31;
  mov.u32 %r2, %cluster_ctarank;
  mov.u32 %r3, bars;
  add.u32 %r9, %r3, 8;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INIT_DONE;
  mbarrier.init.shared::cta.b64 [%r3], 1;
  mbarrier.init.shared::cta.b64 [%r9], 1;
  fence.mbarrier_init.release.cluster;
INIT_DONE:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  setp.ne.u32 %p2, %r2, 0;
  @%p2 bra RANK1;
  setp.ne.u32 %p4, %r8, 0;
  setp.eq.u32 %p5, %r7, 0;
  @%p5 bra WARP0;
  @%p4 bra END;
  mapa.shared::cluster.u32 %r4, %r9, 1;
  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];
  bra END;
WARP0:
  mov.u32 %r5, 0;
SPIN:
  add.u32 %r5, %r5, 1;
  setp.lt.u32 %p3, %r5, 200;
  @%p3 bra SPIN;
  @%p4 bra END;
  mapa.shared::cluster.u32 %r4, %r3, 1;
  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];
  bra END;
RANK1:
WAIT:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra WAIT;
END:
  ret;
}
"""


def test_the_exit_check_names_the_unordered_peer_arrive_not_the_peers_last_access():
    with pytest.raises(CheckFailed) as info:
        emu.launch(_PAIR, "pair", grid=2, block=64, args=[np.zeros(1, np.uint32)], cluster=(2, 1, 1), seed=None,
                   file="t.ptx")
    text = str(info.value)
    assert "missing cluster barrier before exit" in text
    # the arrive on barrier B (line 31, warp 1), which nothing orders before CTA 1's exit
    assert "CTA 1 exits while CTA 0" in text, text
    assert "(t.ptx:31: CTA 0 warp 1, which nothing orders before this exit)" in text, text
    assert "t.ptx:41" not in text and "warp 0" not in text, text        # not warp 0's (ordered, last) arrive
