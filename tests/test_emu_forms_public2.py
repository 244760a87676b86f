"""Forms met running CUTLASS and DeepGEMM kernels end to end in the simulator (third survey).
Each test kernel is written here; the numbers are checked against numpy.

- ``wgmma.mma_async ... .f16.f16.f16``: an f16 accumulator (CuTe's ``SM90_64x64x16_F16F16F16_SS``,
  the Hopper wgmma tutorial). PTX ISA 9.7.15 (the D register fragment figures): D holds the f32 layout's elements two to a
  32-bit register (N/4 registers), the even element in the low half; the result is rounded to
  f16 after each wgmma.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import launch
from porter.emu.errors import EmuError

from emu_tma_ptx import tma_load_and_wait
from emu_wgmma_ptx import OPERANDS_TO_SHARED, core_layout


def _f16_ptx(types: str = "f16.f16.f16") -> str:
    return """.version 8.0
.target sm_90a
.address_size 64

.visible .entry wg16(.param .u64 a_ptr, .param .u64 b_ptr, .param .u64 out_ptr)
{
  .reg .pred %p<4>;
  .reg .b32 %r<40>;
  .reg .b64 %rd<20>;
""" + OPERANDS_TO_SHARED + f"""  ld.param.u64 %rd3, [out_ptr];
  mov.b32 %r20, 0;
  mov.b32 %r21, 0;
  setp.ne.u32 %p2, %r1, 999;
  wgmma.fence.sync.aligned;
  // D = A B^T, rounded to f16
  wgmma.mma_async.sync.aligned.m64n8k16.{types} {{%r20, %r21}}, %rd11, %rd12, 0, 1, 1, 0, 0;
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  mov.b32 %r22, %r20;
  mov.b32 %r23, %r21;
  // D = D - A B^T: the first rounding's error, rounded to f16 (D read back as f16)
  wgmma.fence.sync.aligned;
  wgmma.mma_async.sync.aligned.m64n8k16.{types} {{%r20, %r21}}, %rd11, %rd12, %p2, -1, 1, 0, 0;
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  mul.wide.u32 %rd7, %r1, 16;
  add.u64 %rd8, %rd3, %rd7;
  st.global.v4.u32 [%rd8], {{%r22, %r23, %r20, %r21}};
  ret;
}}
"""


def _unfragment_f16(regs: np.ndarray) -> np.ndarray:
    """D (64 x 8) f16 from each thread's two registers: register r holds the f32 layout's
    elements 2r (low half) and 2r+1 (high half); element j is row 16w + l/4 + 8 (j // 2),
    column 2 (l % 4) + j % 2."""
    halves = regs.astype(np.uint32)
    d = np.zeros((64, 8), np.float16)
    for t in range(128):
        w, lane = divmod(t, 32)
        for j in range(4):
            bits = (halves[t, j // 2] >> (16 * (j % 2))) & 0xFFFF
            d[16 * w + lane // 4 + 8 * (j // 2), 2 * (lane % 4) + j % 2] = np.uint16(bits).view(np.float16)
    return d


@pytest.mark.parametrize("seed", [None, 1])
def test_wgmma_f16_accumulator_packs_two_elements_a_register_and_rounds_each_mma(seed):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((8, 16)).astype(np.float16)
    out = np.zeros((128, 4), np.uint32)
    res = launch(_f16_ptx(), "wg16", 1, 128, [core_layout(a), core_layout(b), out], seed=seed)
    exact = a.astype(np.float64) @ b.astype(np.float64).T
    first = exact.astype(np.float16)
    second = (first.astype(np.float64) - exact).astype(np.float16)
    assert np.array_equal(_unfragment_f16(res.outputs[2][:, :2]), first)
    got2 = _unfragment_f16(res.outputs[2][:, 2:])
    assert np.array_equal(got2, second)
    assert np.count_nonzero(second) > 100          # the rounding error is there to be seen


def test_wgmma_f16_accumulator_with_bf16_inputs_is_refused():
    with pytest.raises(EmuError, match=r"\.f16 accumulator with \.bf16 inputs"):
        launch(_f16_ptx("f16.bf16.bf16"), "wg16", 1, 128,
               [np.zeros(2048, np.uint8), np.zeros(256, np.uint8), np.zeros((128, 4), np.uint32)])


_ELECT_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry el(.param .u64 out_ptr)
{
  .reg .pred %p<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out_ptr];
  mov.u32 %r1, %tid.x;
  elect.sync %r2|%p1, -1;
  @!%p1 bra DONE;
  shr.u32 %r3, %r1, 5;
  mul.wide.u32 %rd2, %r3, 4;
  add.u64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r2;
DONE:
  ret;
}
"""


def test_elect_elects_lane_zero_in_a_seeded_run_unless_asked_for_random(monkeypatch):
    """CUTLASS's sm90 pipelines arm the full barrier from thread 0 while the lane elect.sync
    picks issues the TMA: a seeded (shuffled) run still elects the lowest lane, as they
    assume; PORTER_EMU_ELECT=random elects random leaders (the ISA promises only a fixed
    choice per member mask) to find kernels that depend on it."""
    for seed in range(3):
        out = np.full(4, 99, np.uint32)
        assert launch(_ELECT_PTX, "el", 1, 128, [out], seed=seed).outputs[0].tolist() == [0, 0, 0, 0]
    monkeypatch.setenv("PORTER_EMU_ELECT", "random")
    picks = set()
    for seed in range(6):
        out = np.full(4, 99, np.uint32)
        picks.update(launch(_ELECT_PTX, "el", 1, 128, [out], seed=seed).outputs[0].tolist())
    assert picks - {0}


_ELECT_TWICE_PTX = """.version 8.0
.target sm_90a
.address_size 64

.visible .entry el2(.param .u64 out_ptr)
{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [out_ptr];
  mov.u32 %r1, %tid.x;
  shr.u32 %r3, %r1, 5;
  mul.wide.u32 %rd2, %r3, 12;
  add.u64 %rd3, %rd1, %rd2;
  elect.sync %r2|%p1, -1;
  elect.sync %r4|%p2, -1;
  // a third election over the low half only: its own leader, inside the half
  setp.lt.u32 %p3, %r1, 999;
  and.b32 %r6, %r1, 31;
  setp.lt.u32 %p3, %r6, 16;
  @!%p3 bra SKIP;
  elect.sync %r5|%p3, 0xffff;
  st.global.u32 [%rd3+8], %r5;
SKIP:
  @!%p1 bra DONE;
  st.global.u32 [%rd3], %r2;
  st.global.u32 [%rd3+4], %r4;
DONE:
  ret;
}
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_elect_elects_the_same_leader_for_the_same_membermask(seed, monkeypatch):
    """PTX ISA elect.sync: "the same leader thread is elected for the same membermask every
    time". DeepGEMM's sm100 GEMM issues tcgen05.mma under one elect_one_sync and the
    tcgen05.commit under another; a fresh random choice per call made the commit's thread
    one that issued no MMA."""
    monkeypatch.setenv("PORTER_EMU_ELECT", "random")
    out = np.full((4, 3), 99, np.uint32)
    got = launch(_ELECT_TWICE_PTX, "el2", 1, 128, [out], seed=seed).outputs[0]
    assert (got[:, 0] == got[:, 1]).all() and (got[:, 0] == got[0, 0]).all()   # every warp, every call
    assert (got[:, 2] < 16).all() and (got[:, 2] == got[0, 2]).all()


_CLC_MULTICAST_PTX = """.version 8.7
.target sm_100a
.address_size 64

.visible .entry clc2(.param .u64 out_ptr)
{
  .reg .pred %p<6>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  .reg .b128 %q<2>;
  .shared .align 16 .b8 resp[16];
  .shared .align 8 .b64 bar;
  ld.param.u64 %rd1, [out_ptr];
  mov.u32 %r0, %tid.x;
  mov.u32 %r9, %cluster_ctarank;
  mov.u32 %r1, bar;
  mov.u32 %r2, resp;
  setp.ne.u32 %p1, %r0, 0;
  @%p1 bra INITED;
  mbarrier.init.shared::cta.b64 [%r1], 1;
  fence.mbarrier_init.release.cluster;
INITED:
  barrier.cluster.arrive.relaxed.aligned;
  barrier.cluster.wait.aligned;
  @%p1 bra DONE;
  // each CTA arms its own barrier for the 16-byte response; CTA 0 asks for both
  mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r1], 16;
  setp.ne.u32 %p2, %r9, 0;
  @%p2 bra WAIT;
  clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128 [%r2], [%r1];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r1], 0;
  @!%p3 bra WAIT;
  ld.shared.b128 %q1, [%r2];
  clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p4, %q1;
  selp.u32 %r5, 7, 1, %p4;
  mul.wide.u32 %rd2, %r9, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;
  @%p2 bra DONE;
  // CTA 0 runs on after CTA 1 (which only waited for the response) has exited
  mov.u32 %r6, 0;
SPIN:
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p5, %r6, 200;
  @%p5 bra SPIN;
DONE:
  ret;
}
"""


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_clc_multicast_response_orders_the_issue_before_the_peers_exit(seed):
    """clusterlaunchcontrol.try_cancel ... .multicast::cluster::all writes the response into every
    CTA of the cluster and completes each CTA's mbarrier (PTX ISA clusterlaunchcontrol.try_cancel);
    a CTA that waited on it has seen the issuer's write, so it may exit while the issuer runs on
    (CUTLASS's sm100 CLC scheduler, example 70). The issue's clock now travels with the response,
    as a TMA's does; before, the exit was reported as an unordered peer access."""
    out = np.zeros(2, np.uint32)
    res = launch(_CLC_MULTICAST_PTX, "clc2", 2, 32, [out], cluster=2, seed=seed)
    assert res.outputs[0].tolist() == [1, 1]            # nothing left to cancel: one cluster only


_SWIZZLE32_PTX = """.version 8.7
.target sm_100a
.address_size 64
.visible .entry sw32(.param .align 64 .b8 map_in[128], .param .align 64 .b8 map_out[128], .param .u64 raw_ptr)
{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<12>;
  .shared .align 8 .b64 bar;
  .shared .align 1024 .b8 tile[1024];
  ld.param.u64 %rd6, [raw_ptr];
""" + tma_load_and_wait(1024, "0, 0", tmap="map_in") + """  mov.u64 %rd7, map_out;
  cvta.param.u64 %rd7, %rd7;
  // the landed bytes as they lie in shared memory: 32 B per thread
  shl.b32 %r3, %r0, 5;
  add.u32 %r4, %r1, %r3;
  ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r4];
  cvt.u64.u32 %rd3, %r3;
  add.s64 %rd4, %rd6, %rd3;
  st.global.v4.u32 [%rd4], {%r10, %r11, %r12, %r13};
  ld.shared.v4.u32 {%r10, %r11, %r12, %r13}, [%r4+16];
  st.global.v4.u32 [%rd4+16], {%r10, %r11, %r12, %r13};
  // and stored back through a map of the same swizzle: the round trip is the identity
  @%p1 cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd7, {0, 0}], [%r1];
  @%p1 cp.async.bulk.commit_group;
  @%p1 cp.async.bulk.wait_group.read 0;
  ret;
}
"""


def test_tma_128b_swizzle_with_32_byte_atomicity_moves_32_byte_units():
    """CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B (CUTLASS's sm100 fp32 epilogue maps, example 70): in
    each 128-byte row the four 32-byte units trade places by the row's address bits 7-8
    (unit u lands at u ^ (row % 4)), CuTe's Swizzle<2,5,2>; a load then a store through such
    maps returns the tensor unchanged."""
    from porter.emu import tensor_map
    from porter.runtime.tensormap import TensorMapParams

    src = (np.arange(8 * 32, dtype=np.float32).reshape(8, 32) * 0.5 + 1).astype(np.float32)
    dst = np.zeros_like(src)
    raw = np.zeros(1024, np.uint8)
    pin = TensorMapParams("in", "FLOAT32", dims=(32, 8), strides=(128,), box=(32, 8), swizzle="128B_ATOM_32B")
    pout = TensorMapParams("out", "FLOAT32", dims=(32, 8), strides=(128,), box=(32, 8), swizzle="128B_ATOM_32B")
    res = launch(_SWIZZLE32_PTX, "sw32", 1, 32, [tensor_map(pin, src), tensor_map(pout, dst), raw])
    want = np.zeros(1024, np.uint8)
    flat = src.view(np.uint8).reshape(8, 128)
    for row in range(8):
        for unit in range(4):
            at = row * 128 + (unit ^ (row % 4)) * 32
            want[at:at + 32] = flat[row, unit * 32:(unit + 1) * 32]
    assert np.array_equal(res.outputs[2], want)
    assert not np.array_equal(want, src.view(np.uint8).reshape(-1))     # the pattern is not the identity
    assert np.array_equal(res.outputs[1], src)


def test_tensormap_replace_swizzle_atomicity_32b_pairs_with_the_128b_swizzle():
    """tensormap.replace .swizzle_atomicity (Table 33: 1 = 32 bytes) turns a 128B-swizzled map
    into the 32-byte-atomicity one and 0 back; a later .swizzle_mode 128B keeps the atomicity;
    the other atomicities (and 32 bytes with a narrower swizzle) stop in one line."""
    from porter.emu.ops import tensormap as tm
    from porter.emu.units import tma as tma_unit
    from porter.runtime.tensormap import TensorMapParams

    raw = tma_unit.encode(TensorMapParams("m", "FLOAT32", dims=(32, 8), strides=(128,), box=(32, 8),
                                          swizzle="128B"), 0x1000)
    f = tm._unpack(raw, "t")
    name = lambda fields: tma_unit.SWIZZLES[fields[3]]         # noqa: E731
    f = tm._replace(f, "swizzle_atomicity", None, 1, "t")
    assert name(f) == "128B_ATOM_32B"
    f = tm._replace(f, "swizzle_mode", None, 3, "t")
    assert name(f) == "128B_ATOM_32B"
    assert tma_unit.decode(tm._pack(f)).swizzle == "128B_ATOM_32B"
    with pytest.raises(EmuError, match="only the 128B swizzle with 32-byte atomicity is in the simulator"):
        tm._replace(list(f), "swizzle_mode", None, 2, "t")
    f = tm._replace(f, "swizzle_atomicity", None, 0, "t")
    assert name(f) == "128B"
    with pytest.raises(EmuError, match="swizzle_atomicity 3"):
        tm._replace(f, "swizzle_atomicity", None, 3, "t")
    f = tm._replace(f, "swizzle_mode", None, 2, "t")
    with pytest.raises(EmuError, match="swizzle_atomicity 1 with the 64B swizzle"):
        tm._replace(f, "swizzle_atomicity", None, 1, "t")


_NIBBLE_PTX = """.version 8.7
.target sm_120a
.address_size 64
.visible .entry u4(.param .align 64 .b8 tmap[128], .param .u64 out_ptr, .param .u32 x0)
{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  .shared .align 8 .b64 bar;
  .shared .align 128 .b8 tile[128];
  ld.param.u64 %rd6, [out_ptr];
  ld.param.u32 %r8, [x0];
""" + tma_load_and_wait(128, "%r8, 1") + """  shl.b32 %r3, %r0, 2;
  add.u32 %r4, %r1, %r3;
  ld.shared.u32 %r6, [%r4];
  cvt.u64.u32 %rd3, %r3;
  add.s64 %rd4, %rd6, %rd3;
  st.global.u32 [%rd4], %r6;
  ret;
}
"""


def test_tma_16u4_align8b_counts_4_bit_elements_and_lands_packed():
    """CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B (CUTLASS's sm120 nvfp4 GEMM, example 79a): dims, box and
    coordinates count 4-bit elements, packed two to a byte in global and shared memory alike;
    a box of 64 x 4 elements at x = 64, y = 1 is bytes 32..63 of rows 1..4 (128 bytes). Before,
    the byte view a harness had to give made x = 64 land a byte tile further, out of bounds."""
    from porter.emu import tensor_map
    from porter.runtime.tensormap import TensorMapParams

    src = np.arange(6 * 64, dtype=np.uint32).astype(np.uint8).reshape(6, 64)      # 128 nibbles a row
    p = TensorMapParams("q", "16U4_ALIGN8B", dims=(128, 6), strides=(64,), box=(64, 4))
    out = np.zeros(128, np.uint8)
    got = launch(_NIBBLE_PTX, "u4", 1, 32, [tensor_map(p, src), out, np.uint32(64)]).outputs[1]
    assert np.array_equal(got.reshape(4, 32), src[1:5, 32:64])
    with pytest.raises(EmuError, match="16U4_ALIGN8B tensor coordinate 3 is odd"):
        launch(_NIBBLE_PTX, "u4", 1, 32, [tensor_map(p, src), out, np.uint32(3)])
