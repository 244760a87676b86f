"""Idioms of public hand-written kernels that porter.emu refused or crashed on, each as a small
kernel written here:

* a ``const CUtensorMap*`` kernel parameter: the host encoded the map and copied it to device
  memory (cudaMalloc + cudaMemcpy), the kernel passes the global address to
  ``cp.async.bulk.tensor`` (fast.cu's kernels 2-6 do this);
* a rank-5 tensor map whose size-1 dims have stride 0 (fast.cu's kernel 7: the driver's only
  stride rules are a multiple of 16 below 2^40), given to ``porter emu run`` by the harness
  with ``h.tensor_map(..., dims=, strides=)`` as the host code spells it;
* a TMEM address whose lane field is 128 + the warp's quarter (gau-nernst's 2-CTA tcgen05
  GEMMs add ``cta_rank * 128`` to the lane): the unit reads the field modulo 128, and the
  hand-off / in-flight checkers now see the same lanes (they crashed on an empty region).
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.cli import main
from porter.emu import launch
from porter.runtime.emulated_harness import Harness

from emu_tcgen05_ptx import HEAD as TC_HEAD, tmem_setup, tmem_teardown

# A 5-D tile load through a map the kernel gets by pointer (%rd1) or by value (map param):
# thread 0 arms the mbarrier for the box's bytes and loads box {64, 8, 1, 1, 1} of bf16 at
# coordinates {0, row0, kb, 0, 0}; after the wait every thread copies 4 bytes to out.
_TMA_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry {name}({param}, .param .u64 out_ptr, .param .u32 row0, .param .u32 kb)
{{
  .reg .pred %p<4>;
  .reg .b32 %r<20>;
  .reg .b64 %rd<8>;
  .shared .align 1024 .b8 tile[1024];
  .shared .align 8 .b64 bar;
  {map_addr}
  ld.param.u64 %rd2, [out_ptr];
  ld.param.u32 %r5, [row0];
  ld.param.u32 %r6, [kb];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, tile;
  mov.u32 %r3, bar;
  mov.u32 %r7, 0;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra WAIT;
  mbarrier.init.shared::cta.b64 [%r3], 1;
  fence.mbarrier_init.release.cluster;
  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 1024;
  cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd1, {{%r7, %r5, %r6, %r7, %r7}}], [%r3];
WAIT:
  bar.sync 0;
LOOP:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra LOOP;
  shl.b32 %r8, %r1, 2;
  add.u32 %r9, %r2, %r8;
  ld.shared.u32 %r10, [%r9];
  cvt.u64.u32 %rd3, %r8;
  add.u64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r10;
  ret;
}}
"""


def _tma_kernel(by_pointer: bool) -> str:
    if by_pointer:
        return _TMA_PTX.format(name="k", param=".param .u64 map_ptr", map_addr="ld.param.u64 %rd1, [map_ptr];")
    return _TMA_PTX.format(name="k", param=".param .align 64 .b8 tmap[128]", map_addr="mov.b64 %rd5, tmap;\n  cvta.param.u64 %rd1, %rd5;")


def _fast_cu_map(h, x, rows, cols):
    """fast.cu kernel 7's map over a rows x cols bf16 matrix: {64, rows, cols / 64, 1, 1},
    strides {cols * 2, 128, 0, 0} bytes (a 128-byte column block per third-dim index)."""
    return h.tensor_map(x, box=(64, 8, 1, 1, 1), dims=(64, rows, cols // 64, 1, 1),
                        strides=(cols * 2, 128, 0, 0), name="A")


@pytest.mark.parametrize("by_pointer", [True, False], ids=["map-in-global-memory", "grid-constant-map"])
def test_rank5_map_with_zero_strides_by_pointer_or_value(by_pointer):
    h = Harness(0)
    rows, cols, row0, kb = 32, 256, 8, 2
    a = (np.arange(rows * cols) % 251).astype(np.float32).astype(h.bfloat16).reshape(rows, cols)
    out = np.zeros(1024 // 2, h.bfloat16)
    res = launch(_tma_kernel(by_pointer), "k", 1, 256, [_fast_cu_map(h, a, rows, cols), out, row0, kb])
    got = res.outputs[1].reshape(8, 64)
    np.testing.assert_array_equal(got.astype(np.float32), a[row0:row0 + 8, 64 * kb:64 * kb + 64].astype(np.float32))


def test_explicit_map_reaching_past_the_array_is_one_line():
    h = Harness(0)
    a = np.zeros((8, 64), h.bfloat16)
    with pytest.raises(Exception, match=r"h.tensor_map A: dims .* beyond the array's 1024 B"):
        h.tensor_map(a, box=(64, 8, 1), dims=(64, 8, 2), strides=(128, 1024), name="A")
    with pytest.raises(Exception, match="give both dims and strides"):
        h.tensor_map(a, box=(64, 8), dims=(64, 8))
    with pytest.raises(Exception, match="multiple of 16"):
        h.tensor_map(a, box=(64, 8, 1), dims=(64, 8, 1), strides=(128, 8))


def test_porter_emu_run_takes_the_host_codes_map(capsys, tmp_path):
    ptx = tmp_path / "k.ptx"
    ptx.write_text(_tma_kernel(True))
    harness = tmp_path / "h.py"
    harness.write_text(
        "import numpy as np\n"
        "def arguments(h):\n"
        "    a = h.rng.standard_normal((32, 256)).astype(h.bfloat16)\n"
        "    m = h.tensor_map(a, box=(64, 8, 1, 1, 1), dims=(64, 32, 4, 1, 1), strides=(512, 128, 0, 0))\n"
        "    return [m, np.zeros(512, h.bfloat16), 16, 3]\n"
        "def reference(args):\n"
        "    return {1: args[0][16:24, 192:256].astype(np.float64).reshape(-1)}\n")
    code = main(["emu", "run", str(ptx), "--harness", str(harness), "--block", "256"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "argument 1 (512 bfloat16): passed" in out


# tcgen05.st then tcgen05.ld of one warp at lane field 128 + 32 * quarter (warp 1: lanes 160..191
# -> its own quarter 32..63), 8 columns; the values come back through global memory.
_TC_BODY = """
.visible .entry lanes(.param .u64 out_ptr)
{
  .reg .pred %p<4>;
  .reg .b32 %r<60>;
  .reg .b64 %rd<8>;
  .shared .align 8 .b8 bars[16];
  ld.param.u64 %rd1, [out_ptr];
""" + tmem_setup(32, 1) + """
  and.b32 %r3, %r2, 3;
  mad.lo.u32 %r4, %r3, 32, 128;
  shl.b32 %r5, %r4, 16;
  add.u32 %r6, %r20, %r5;
  mad.lo.u32 %r30, %r1, 8, 1;
  add.u32 %r31, %r30, 1;
  add.u32 %r32, %r30, 2;
  add.u32 %r33, %r30, 3;
  add.u32 %r34, %r30, 4;
  add.u32 %r35, %r30, 5;
  add.u32 %r36, %r30, 6;
  add.u32 %r37, %r30, 7;
  tcgen05.st.sync.aligned.32x32b.x8.b32 [%r6], {%r30, %r31, %r32, %r33, %r34, %r35, %r36, %r37};
  tcgen05.wait::st.sync.aligned;
  tcgen05.ld.sync.aligned.32x32b.x8.b32 {%r40, %r41, %r42, %r43, %r44, %r45, %r46, %r47}, [%r6];
  tcgen05.wait::ld.sync.aligned;
  mul.wide.u32 %rd2, %r1, 32;
  add.u64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r40, %r41, %r42, %r43};
  st.global.v4.u32 [%rd3+16], {%r44, %r45, %r46, %r47};
""" + tmem_teardown(32) + "}\n"


def test_tmem_lane_field_above_127_reads_the_warps_quarter():
    out = np.zeros((128, 8), np.uint32)
    res = launch(TC_HEAD + _TC_BODY, "lanes", 1, 128, [out])
    want = (np.arange(128)[:, None] * 8 + 1 + np.arange(8)[None, :]).astype(np.uint32)
    np.testing.assert_array_equal(res.outputs[0], want)


def test_a_map_for_a_pointer_parameter_is_still_checked():
    h = Harness(0)
    with pytest.raises(Exception, match="box size 300"):
        h.tensor_map(np.zeros((8, 64), h.bfloat16), box=(300, 8), dims=(64, 8), strides=(128,))


# A by-value struct parameter as ThunderKittens / CUTLASS pass them: {map at 0, out pointer at
# 128, row0 at 136, kb at 140}; the kernel reads each field from the param space.
_STRUCT_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry ks(.param .align 128 .b8 g[192])
{
  .reg .pred %p<4>;
  .reg .b32 %r<20>;
  .reg .b64 %rd<8>;
  .shared .align 1024 .b8 tile[1024];
  .shared .align 8 .b64 bar;
  mov.b64 %rd5, g;
  cvta.param.u64 %rd1, %rd5;
  ld.param.u64 %rd2, [g+128];
  ld.param.u32 %r5, [g+136];
  ld.param.u32 %r6, [g+140];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, tile;
  mov.u32 %r3, bar;
  mov.u32 %r7, 0;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra WAIT;
  mbarrier.init.shared::cta.b64 [%r3], 1;
  fence.mbarrier_init.release.cluster;
  mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 1024;
  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r2], [%rd1, {%r6, %r5}], [%r3];
WAIT:
  bar.sync 0;
LOOP:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra LOOP;
  shl.b32 %r8, %r1, 2;
  add.u32 %r9, %r2, %r8;
  ld.shared.u32 %r10, [%r9];
  cvt.u64.u32 %rd3, %r8;
  add.u64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r10;
  ret;
}
"""


def test_a_struct_parameter_of_a_map_a_pointer_and_scalars(capsys, tmp_path):
    ptx = tmp_path / "ks.ptx"
    ptx.write_text(_STRUCT_PTX)
    harness = tmp_path / "hs.py"
    harness.write_text(
        "import numpy as np\n"
        "def arguments(h):\n"
        "    a = h.rng.standard_normal((32, 128)).astype(h.bfloat16)\n"
        "    out = np.zeros((8, 64), h.bfloat16)\n"
        "    return [h.struct(192, {0: h.tensor_map(a, box=(64, 8)), 128: out, 136: np.int32(16), 140: np.int32(64)})]\n"
        "def reference(args):\n"
        "    return {(0, 128): args[0][0][16:24, 64:128].astype(np.float64)}\n")
    code = main(["emu", "run", str(ptx), "--harness", str(harness), "--block", "256"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "argument 0+128 (8x64 bfloat16): passed" in out


def test_struct_fields_that_overlap_or_misalign_are_one_line():
    h = Harness(0)
    a = np.zeros((8, 64), h.bfloat16)
    bad = h.struct(192, {0: h.tensor_map(a, box=(64, 8)), 120: np.int64(1)})
    with pytest.raises(Exception, match="struct fields at offsets 0 and 120 overlap"):
        launch(_STRUCT_PTX, "ks", 1, 32, [bad])
    with pytest.raises(Exception, match="must be 8-byte aligned"):
        launch(_STRUCT_PTX, "ks", 1, 32, [h.struct(192, {132: np.zeros(4, np.uint32)})])


def test_a_struct_field_offset_that_is_not_a_byte_offset_is_one_line():
    from porter.errors import PorterError
    h = Harness(0)
    for bad in ("a", -8, 1.5):
        with pytest.raises(PorterError, match=r"^h\.struct: field offset .* is not a byte offset"):
            h.struct(16, {bad: np.int32(1)})
