"""``porter.emu.launch`` as a library (issue 20 item 5): bad arguments are one EmuError naming
the parameter, grids are bounded, 0-size outputs work, finished CTAs release their state,
and the race detector is on unless ``races=False``."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu import launch_args

PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out, .param .u32 n)
{
.reg .pred %p<2>;
.reg .b32 %r<8>;
.reg .b64 %rd<8>;
ld.param.u64 %rd1, [out];
ld.param.u32 %r1, [n];
mov.u32 %r0, %tid.x;
setp.ge.u32 %p1, %r0, %r1;
@%p1 bra $done;
mul.wide.u32 %rd2, %r0, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r1;
$done:
ret;
}
"""


def go(grid=1, block=32, args=None, **kw):
    return emu.launch(PTX, "k", grid=grid, block=block, args=args or [np.zeros(32, np.uint32), 5], **kw)


@pytest.mark.parametrize("kw,match", [
    ({"grid": 0}, r"grid\[x\] = 0 is outside 1\.\."),
    ({"grid": -3}, r"grid\[x\] = -3"),
    ({"grid": (2, 0)}, r"grid\[y\] = 0"),
    ({"grid": 1.5}, r"grid must be an int"),
    ({"grid": "4"}, r"grid\[x\] must be an integer"),
    ({"grid": (1, 1, 1, 1)}, r"grid must have 1 to 3"),
    ({"grid": (1 << 17)}, r"at most 65,536 per launch"),
    ({"grid": 4097}, r"4,097 warps; the race detector runs up to 4,096"),
    ({"block": 0}, r"block\[x\] = 0"),
    ({"block": (64, 32)}, r"2048 threads; at most 1024"),
    ({"cluster": 0}, r"cluster\[x\] = 0"),
    ({"smem": -1}, r"smem = -1"),
    ({"smem": "big"}, r"smem must be an integer"),
    ({"seed": -2}, r"seed = -2"),
    ({"budget": 0}, r"budget = 0"),
    ({"args": "xyz"}, r"args must be a list"),
    ({"args": [np.zeros(32, np.uint32), 1 << 32]}, r"argument 1 for n \(\.u32\) = 4294967296 is outside"),
    ({"args": [np.zeros(32, np.uint32), -1]}, r"argument 1 for n \(\.u32\) = -1 is outside"),
    ({"args": [np.zeros(32, np.uint32), 2.5]}, r"integer parameter; got the float 2\.5"),
    ({"args": [np.array([object()]), 1]}, r"numpy array of object"),
    ({"args": [np.zeros(32, np.uint32), "5"]}, r"argument 1 for n is a str"),
])
def test_bad_arguments_are_one_emu_error_naming_the_parameter(kw, match):
    with pytest.raises(emu.EmuError, match=match):
        go(**kw)


def test_zero_size_output_array():
    res = go(args=[np.zeros(0, np.float32), 0])
    assert res.outputs[0].shape == (0,) and res.outputs[0].dtype == np.float32


def test_largest_u32_is_accepted():
    res = go(args=[np.zeros(32, np.uint32), (1 << 32) - 1])
    assert (res.outputs[0] == (1 << 32) - 1).all()


def test_finished_ctas_release_their_state():
    from porter.emu.machine import CTA

    seen = []
    orig = CTA.release

    def spy(self):
        orig(self)
        seen.append((self.smem.data.size, len(self.warps[0].r)))
    CTA.release = spy
    try:
        go(grid=8, block=64)
    finally:
        CTA.release = orig
    assert seen == [(0, 0)] * 8


def test_the_race_detector_runs_by_default():
    racy = PTX.replace("st.global.u32 [%rd3], %r1;", """st.global.u32 [%rd3], %r1;
.shared .align 4 .b32 cell;
mov.u32 %r2, cell;
st.shared.u32 [%r2], %r0;""")
    with pytest.raises(emu.CheckFailed, match="race"):
        emu.launch(racy, "k", grid=1, block=64, args=[np.zeros(64, np.uint32), 64])
    emu.launch(racy, "k", grid=1, block=64, args=[np.zeros(64, np.uint32), 64], races=False)


def test_grid_bound_is_documented():
    assert launch_args.MAX_CTAS == 1 << 16
    assert "MAX_CTAS" in (launch_args.__doc__ or "") and "MAX_RACE_WARPS" in (launch_args.__doc__ or "")


@pytest.mark.slow
def test_a_large_grid_without_the_race_detector_runs():
    res = go(grid=4097, block=32, races=False)          # ~4 s: beyond the race detector's bound
    assert res.summary.ctas == 4097
