"""Messages name a device buffer by the kernel argument that passes it. Before: buffers were
numbered in upload order ("argument 0" for the first array), so a kernel whose first parameter
is a scalar (a CuTe tutorial's shape tuple, a CUTLASS Params struct's fields) was told that an
out-of-bounds store missed "argument 0" when the buffer was argument 1 or a struct field. Also:
AXES may name a struct field as reference() keys it, (argument, offset)."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.cli import main

# Written here: parameter 0 a scalar, parameter 1 a buffer; lane 0 stores out[n].
PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u32 n, .param .u64 out)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .reg .pred %p<2>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  ld.param.u32 %r2, [n];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r2;
DONE:
  ret;
}
"""

# The same store through a struct { u32 n; u32 pad; u64 out; } passed by value.
PTX_STRUCT = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry ks(.param .align 8 .b8 p[16])
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .reg .pred %p<2>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  ld.param.u32 %r2, [p];
  ld.param.u64 %rd1, [p+8];
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r2, 4;
  add.u64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r2;
DONE:
  ret;
}
"""


def test_an_out_of_bounds_store_names_the_argument_not_the_upload_order():
    with pytest.raises(emu.CheckFailed, match=r"outside every allocation \(nearest: argument 1 at "):
        emu.launch(PTX, "k", 1, 32, [16, np.zeros(16, np.uint32)])


def test_in_bounds_the_same_kernel_runs():
    res = emu.launch(PTX, "k", 1, 32, [15, np.zeros(16, np.uint32)])
    assert res.outputs[1][15] == 15


def test_a_struct_field_buffer_is_named_by_argument_and_offset():
    from porter.emu.launch_struct import StructArg

    arg = StructArg(16, {0: np.uint32(16), 8: np.zeros(16, np.uint32)})
    with pytest.raises(emu.CheckFailed, match=r"nearest: argument 0\+8 at "):
        emu.launch(PTX_STRUCT, "ks", 1, 32, [arg])


def test_axes_may_name_a_struct_field(capsys, tmp_path):
    ptx = tmp_path / "ks.ptx"
    ptx.write_text(PTX_STRUCT)
    harness = tmp_path / "h.py"
    harness.write_text(
        "import numpy as np\n"
        "LAUNCH = {'entry': 'ks', 'block': 32}\n"
        "AXES = {(0, 8): ('row', 'col')}\n"
        "def arguments(h):\n"
        "    return [h.struct(16, {0: np.uint32(5), 8: np.zeros((4, 4), np.uint32)})]\n"
        "def reference(args):\n"
        "    want = np.zeros((4, 4)); want[1, 0] = 4.0   # the kernel wrote 5 at [1, 1]\n"
        "    return {(0, 8): want}\n")
    code = main(["emu", "run", str(ptx), "--harness", str(harness)])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "argument 0 (struct field at offset 8)[row 1, col 0]: expected 4, got 0" in out, out
