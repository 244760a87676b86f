"""PTX forms Triton-generated kernels use (survey of Triton 3.9 output, /work/notes/triton_forms.md):
each a small kernel written here, its numbers checked against numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest

from porter import emu

# A tensor map built on the device from nothing, as Triton's tl.make_tensor_descriptor lowers:
# 128 zero bytes in shared memory (one word a lane), every field set by tensormap.replace,
# published to global memory by tensormap.cp_fenceproxy, then used by a TMA tile load.
# The tensor: ROWS x 16 u32 (64-byte rows); the box: 16 x 4 at row 2.
BLANK_MAP_KERNEL = """
.version 8.7
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 src, .param .u64 scratch, .param .u64 out, .param .u32 rows)
{
  .reg .pred %p<4>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<32>;
  .shared .align 128 .b8 tm[128];
  .shared .align 1024 .b8 tile[1024];
  .shared .align 8 .b64 bar;
  mov.u32 %r0, %tid.x;
  setp.eq.u32 %p1, %r0, 0;
  mov.u32 %r2, tm;
  shl.b32 %r3, %r0, 2;
  add.u32 %r4, %r2, %r3;
  st.shared.u32 [%r4], 0;
  bar.sync 0;
  ld.param.u64 %rd4, [src];
  cvta.to.global.u64 %rd4, %rd4;
  ld.param.u32 %r10, [rows];
  @%p1 tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r2], %rd4;
  @%p1 tensormap.replace.tile.rank.shared::cta.b1024.b32 [%r2], RANK;
  @%p1 tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%r2], 2;
  @%p1 tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%r2], 0, 16;
  @%p1 tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%r2], 1, 4;
  @%p1 tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%r2], 0, 16;
  @%p1 tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%r2], 1, %r10;
  @%p1 tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%r2], 0, 64;
  @%p1 tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%r2], 0, 1;
  @%p1 tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%r2], 1, 1;
  bar.sync 0;
  ld.param.u64 %rd5, [scratch];
  cvta.to.global.u64 %rd5, %rd5;
  tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd5], [%r2], 128;
  fence.proxy.tensormap::generic.acquire.gpu [%rd5], 128;
  mov.u32 %r5, bar;
  mov.u32 %r6, tile;
  @%p1 mbarrier.init.shared::cta.b64 [%r5], 1;
  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r5], 256;
  @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r6], [%rd5, {0, 2}], [%r5];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], 0;
  @!%p2 bra WAIT;
  add.u32 %r7, %r6, %r3;
  ld.shared.u32 %r8, [%r7];
  ld.shared.u32 %r9, [%r7+128];
  ld.param.u64 %rd6, [out];
  cvta.to.global.u64 %rd6, %rd6;
  mul.wide.u32 %rd2, %r0, 4;
  add.s64 %rd7, %rd6, %rd2;
  st.global.u32 [%rd7], %r8;
  st.global.u32 [%rd7+128], %r9;
  ret;
}
"""


def _blank_map_launch(kernel_text: str, rows: int):
    src = (np.arange(rows * 16, dtype=np.uint32) * 3 + 7).reshape(rows, 16)
    out = np.zeros(64, np.uint32)
    res = emu.launch(kernel_text, "k", grid=1, block=32,
                     args=[src, np.zeros(32, np.uint32), out, rows])
    return src, res.outputs[2]


def test_tensor_map_built_on_the_device_from_zero_bytes_drives_a_tma_load():
    src, got = _blank_map_launch(BLANK_MAP_KERNEL.replace("RANK", "1"), rows=6)     # .rank takes rank - 1
    np.testing.assert_array_equal(got, src[2:6].reshape(-1))


def test_tensor_map_built_from_zero_bytes_reads_out_of_bounds_rows_as_zero():
    # global_dim 1 = 4 rows: the box's rows 2..5 hang off the end, rows 4 and 5 read as zero
    src, got = _blank_map_launch(BLANK_MAP_KERNEL.replace("RANK", "1"), rows=4)
    want = np.zeros((4, 16), np.uint32)
    want[:2] = src[2:4]
    np.testing.assert_array_equal(got, want.reshape(-1))


def test_tensor_map_from_zero_bytes_without_rank_is_one_clear_error():
    text = BLANK_MAP_KERNEL.replace(
        "  @%p1 tensormap.replace.tile.rank.shared::cta.b1024.b32 [%r2], RANK;\n", "")
    with pytest.raises(emu.EmuError, match=r"never had tensormap.replace .rank \(rank 0\)"):
        _blank_map_launch(text, rows=6)


# Triton's warp-specialised preamble (tl.range(..., warp_specialize=True) on sm_100a): every thread
# of the default warpgroup stores the same captured scalars to the same shared words, no barrier
# between the warps' stores, then a barrier before the worker warps read them. Two warps here:
# each lane stores VALUE_A (warp 0) / VALUE_B (warp 1) to one word, bar.sync, thread 0 reads it.
SAME_WORD_KERNEL = """
.version 8.7
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  .shared .align 16 .b8 slot[16];
  mov.u32 %r0, %tid.x;
  shr.u32 %r1, %r0, 5;
  setp.eq.u32 %p1, %r1, 0;
  selp.b32 %r2, VALUE_A, VALUE_B, %p1;
  st.shared.b32 [slot+4], %r2;
  bar.sync 0;
  setp.ne.u32 %p2, %r0, 0;
  @%p2 bra DONE;
  ld.shared.b32 %r3, [slot+4];
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  st.global.b32 [%rd1], %r3;
DONE:
  ret;
}
"""


def _same_word(a: int, b: int, seed: int | None = None):
    text = SAME_WORD_KERNEL.replace("VALUE_A", str(a)).replace("VALUE_B", str(b))
    return emu.launch(text, "k", grid=1, block=64, args=[np.zeros(1, np.uint32)], seed=seed, file="t.ptx")


@pytest.mark.parametrize("seed", [None, 0, 1])        # None: plain warp order
def test_unordered_stores_of_the_same_bytes_are_a_warning_not_a_race(seed):
    # each read returns the value some write committed (PTX ISA 8): both wrote these bytes,
    # so no order of the two stores, nor any mix of their bytes, gives another value
    res = _same_word(33554689, 33554689, seed)
    assert res.outputs[0][0] == 33554689
    hits = [w for w in res.warnings if "the same bytes" in w]
    assert len(hits) == 1, res.warnings
    assert re.match(r"t.ptx:\d+ `st.shared.b32`: CTA 0 warp [01] stores the same bytes at 0x[0-9a-f]+ as the unordered "
                    r"earlier store by CTA 0 warp [01] at t.ptx:\d+ \(a warning: ", hits[0]), hits[0]


def test_unordered_stores_of_different_bytes_stay_a_race():
    with pytest.raises(emu.CheckFailed, match=r"shared-memory race in CTA 0 at 0x[0-9a-f]+: write \(store "
                                              r"\(st.shared.b32\)\) by CTA 0 warp [01]"):
        _same_word(33554689, 33554690)
