"""The async-proxy checker's marks (PTX ISA "Memory Consistency Model: Proxies"): shared bytes
written through the generic proxy (st.shared, a cp.async landing) and read by the async proxy
(a wgmma operand) with no fence.proxy.async between are an error. The simulator keeps a CTA
flag beside the per-byte marks so a fence with nothing marked, and an async read with nothing
marked, skip their pass over shared memory; these kernels check that the flag follows every
way a mark is set and cleared. The kernel is test_emu_wgmma_int's (an integer m64n8k32 whose A
and B are copied into shared memory by the CTA)."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import launch
from porter.emu.errors import CheckFailed

from emu_wgmma_ptx import core_layout
from test_emu_wgmma_int import _PTX, _fragment

COPY = """  ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd5];
  add.u32 %r5, %r2, %r4;
  st.shared.v4.u32 [%r5], {%r10, %r11, %r12, %r13};"""
CP_ASYNC = """  add.u32 %r5, %r2, %r4;
  cp.async.cg.shared.global [%r5], [%rd5], 16;
  cp.async.wait_all;"""
FENCE = "  fence.proxy.async.shared::cta;\n  bar.sync 0;\n"
# after the fence: thread 0 writes A's first word again, then the CTA synchronises
REWRITE = FENCE + "  setp.eq.u32 %p3, %r1, 0;\n  @%p3 st.shared.u32 [%r2], 7;\n  bar.sync 0;\n"


def _launch(copy: str, fence: str):
    text = _PTX.replace("FORM", ".s32.u8.u8").replace(COPY, copy).replace(FENCE, fence)
    assert (copy == COPY or CP_ASYNC in text) and (fence == FENCE or fence in text)
    a, b = np.ones((64, 32), np.uint8), np.ones((8, 32), np.uint8)
    out = np.zeros((128, 4), np.int32)
    return launch(text, "wgi", 1, 128, [core_layout(a), core_layout(b), _fragment(np.zeros((64, 8), np.int32)), out])


@pytest.mark.parametrize("copy", [COPY, CP_ASYNC], ids=["st.shared", "cp.async"])
def test_generic_writes_fenced_before_the_wgmma_pass(copy):
    res = _launch(copy, FENCE)
    assert (res.outputs[3] == 32).all()


@pytest.mark.parametrize("copy", [COPY, CP_ASYNC], ids=["st.shared", "cp.async"])
def test_generic_writes_with_no_fence_before_the_wgmma_are_reported(copy):
    with pytest.raises(CheckFailed, match="written by generic stores with no fence.proxy.async since"):
        _launch(copy, "  bar.sync 0;\n")


def test_a_generic_write_after_the_fence_marks_again():
    with pytest.raises(CheckFailed, match="written by generic stores with no fence.proxy.async since"):
        _launch(COPY, REWRITE)
