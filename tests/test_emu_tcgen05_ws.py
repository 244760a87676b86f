"""tcgen05.mma.ws (weight stationary: .cta_group::1, M 32 / 64 / 128) in porter's simulator,
on a small hand-written kernel: bf16 A and B in shared memory (the PTX ISA's canonical K-major,
no-swizzle layout, laid out here from the ISA text), one MMA committed to an mbarrier, D read
back by the four warps with tcgen05.ld and compared with numpy. D's place in TMEM for M=32 / 64
(N split over 4 / 2 lane groups) is the data-path layout porter's unit implements; the test
states it independently below. A non-zero zero-column mask is refused as Unsupported, naming
the form (collector buffers and A in TMEM: tests/test_emu_forms_tcgen05.py)."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import EmuError, Unsupported

from emu_tcgen05_ptx import HEAD, tmem_setup, tmem_teardown

K = 16
LBO, SBO = 128, 256          # K-major, no swizzle: K core matrices 128 B apart, 8-row groups 256 B


def _kmajor_image(mat_u16: np.ndarray) -> np.ndarray:
    """(rows, 16) bf16 codes in the canonical K-major no-swizzle layout: 8 rows x 16 bytes per
    core matrix, the next 8 K elements LBO bytes on, the next 8 rows SBO bytes on."""
    rows = mat_u16.shape[0]
    img = np.zeros(rows // 8 * SBO, dtype=np.uint8)
    raw = mat_u16.astype("<u2").view(np.uint8).reshape(rows, 32)
    r = np.arange(rows)[:, None]
    kb = np.arange(32)[None, :]
    img[(r % 8) * 16 + (r // 8) * SBO + (kb // 16) * LBO + kb % 16] = raw
    return img


def _kernel(m: int, n: int, mma_line: str) -> str:
    ncols = n * m // 128                 # D's columns: N split over 128 / M lane groups
    a_bytes = m // 8 * SBO
    buf = a_bytes + n // 8 * SBO
    idesc = (1 << 4) | (1 << 7) | (1 << 10) | ((n >> 3) << 17) | ((m >> 4) << 24)   # f32 D, bf16 A/B
    desc = (1 << 46) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32)                      # version 1
    regs = ", ".join(f"%r{100 + i}" for i in range(ncols))
    stores = "\n".join(f"  st.global.b32 [%rd9+{4 * i}], %r{100 + i};" for i in range(ncols))
    body = f"""
  .reg .b32 %r<200>;
  .reg .b64 %rd<16>;
  .reg .pred %p<8>;
  .shared .align 1024 .b8 buf[{buf}];
  .shared .align 16 .b8 bars[32];
{tmem_setup(64, 2)}  mov.u32 %r13, buf;
  @%p2 bra WAIT;
  ld.param.u64 %rd1, [src];
  mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [%r10], {buf};
  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r13], [%rd1], {buf}, [%r10];
L1:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r10], 0;
  @!%p3 bra L1;
  cvt.u64.u32 %rd3, %r13;
  shr.u64 %rd4, %rd3, 4;
  or.b64 %rd5, %rd4, {desc};
  add.s64 %rd6, %rd5, {a_bytes >> 4};
  mov.u32 %r21, {idesc};
  setp.ne.u32 %p4, %r1, %r1;
  {mma_line}
  tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r11];
WAIT:
L2:
  mbarrier.try_wait.parity.shared::cta.b64 %p5, [%r11], 0;
  @!%p5 bra L2;
  tcgen05.fence::after_thread_sync;
  and.b32 %r30, %r2, 3;
  shl.b32 %r31, %r30, 21;
  add.u32 %r32, %r20, %r31;
  tcgen05.ld.sync.aligned.32x32b.x{ncols}.b32 {{{regs}}}, [%r32];
  tcgen05.wait::ld.sync.aligned;
  ld.param.u64 %rd7, [out];
  mul.wide.u32 %rd8, %r1, {4 * ncols};
  add.s64 %rd9, %rd7, %rd8;
{stores}
{tmem_teardown(64)}"""
    return HEAD + ".visible .entry k(.param .u64 src, .param .u64 out)\n{\n" + body + "\n}\n"


MMA_WS = "tcgen05.mma.ws.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p4{mask};"


def _run(m: int, n: int, seed: int, mma_line: str | None = None):
    rng = np.random.default_rng(seed)
    a16 = (rng.standard_normal((m, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b16 = (rng.standard_normal((n, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    src = np.concatenate([_kmajor_image(a16), _kmajor_image(b16)])
    ref = ((a16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
           @ (b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64).T)
    ncols = n * m // 128
    out = np.zeros((128, ncols), dtype=np.float32)           # (TMEM lane, column)
    text = _kernel(m, n, mma_line or MMA_WS.format(mask=", 0"))
    res = emu.launch(text, "k", grid=1, block=128, args=[src, out], seed=seed, file="t.ptx")
    return res.outputs[1], ref


@pytest.mark.parametrize("m,n,seed", [(32, 64, 1), (64, 64, 2), (128, 64, 3), (32, 128, 4)])
def test_ws_mma_d_matches_numpy_in_its_data_path_layout(m, n, seed):
    tmem, ref = _run(m, n, seed)
    # D[r, c] sits in lane r + M * (c // (N*M/128)), column c % (N*M/128): the N columns are
    # split into 128 / M groups, group j in lanes M*j .. M*j + M-1
    width = n * m // 128
    r, c = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    got = tmem[r + m * (c // width), c % width]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-5)


def test_ws_mma_without_the_zero_column_mask_operand():
    tmem, ref = _run(128, 64, 5, MMA_WS.format(mask=""))
    np.testing.assert_allclose(tmem, ref, rtol=1e-6, atol=1e-5)


def test_ws_collector_outside_b0_b3_is_refused_naming_the_form():
    # (the .collector::bN usages run: tests/test_emu_forms_tcgen05.py)
    line = "tcgen05.mma.ws.cta_group::1.kind::f16.collector::b4::fill [%r20], %rd5, %rd6, %r21, %p4, 0;"
    with pytest.raises(Unsupported, match=r"collector::b4::fill: \.ws takes \.collector::b0\.\.b3"):
        _run(128, 64, 1, line)


def test_ws_nonzero_zero_column_mask_is_refused():
    with pytest.raises(Unsupported, match=r"non-zero zero-column-mask-desc \(0x5\)"):
        _run(128, 64, 1, MMA_WS.format(mask=", 5"))


def test_ws_n_outside_64_128_256_is_reported():
    # N = 32 is a valid non-.ws shape, but not with .ws (Table 39)
    with pytest.raises(EmuError, match=r"N = 32 is not valid with .ws"):
        _run(128, 32, 1)


def test_mma_then_shift_in_one_thread_are_ordered_by_the_pipeline():
    # PTX ISA 9.7.16.6.2: tcgen05.mma -> tcgen05.shift (same .cta_group) execute in issue order,
    # no wait between them; the shift (spelled as the ISA's own example, .down first) moves
    # D's rows 0..30 of lanes 0..31, columns 0..7, one lane down
    line = MMA_WS.format(mask=", 0") + "\n  tcgen05.shift.down.cta_group::1 [%r20];"
    tmem, ref = _run(128, 64, 6, line)
    want = ref.copy()
    want[1:32, 0:8] = ref[0:31, 0:8]
    np.testing.assert_allclose(tmem, want, rtol=1e-6, atol=1e-5)
