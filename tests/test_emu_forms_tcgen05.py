"""tcgen05.mma forms public kernels use (PTX ISA 9.7.16.10.9): the collector-buffer qualifiers
(.collector::a::{fill,use,lastuse,discard}; .ws .collector::bN::*), the disable-output-lane
vector, scale-input-d, and A in TMEM for .ws. Hand-written kernels: bf16 A (M x 16) and B
(N x 16) in shared memory in the ISA's canonical K-major no-swizzle layout (built by the .ws
test's helper), a few MMAs, D read back by the four warps and compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import Unsupported

from emu_tcgen05_ptx import HEAD, tmem_setup, tmem_teardown
from test_emu_tcgen05_ws import K, LBO, SBO, _kmajor_image

M, N = 128, 64


def _kernel(mmas: str, m: int = M, n: int = N, pre_mma: str = "") -> str:
    """A at buf, B after it, then a second copy region; %rd5 / %rd6 the A / B descriptors,
    %r21 the idesc, %p4 false and %p6 true (enable-input-d); ``mmas`` may commit and wait
    itself (bars: %r10 load, %r11 final commit, %r14 a third barrier); D (M=128: row r in
    lane r) is stored per thread."""
    a_bytes = m // 8 * SBO
    buf = a_bytes + n // 8 * SBO
    idesc = (1 << 4) | (1 << 7) | (1 << 10) | ((n >> 3) << 17) | ((m >> 4) << 24)
    desc = (1 << 46) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32)
    ncols = n
    regs = ", ".join(f"%r{100 + i}" for i in range(ncols))
    stores = "\n".join(f"  st.global.b32 [%rd9+{4 * i}], %r{100 + i};" for i in range(ncols))
    body = f"""
  .reg .b32 %r<200>;
  .reg .b64 %rd<16>;
  .reg .pred %p<8>;
  .shared .align 1024 .b8 buf[{buf}];
  .shared .align 16 .b8 bars[32];
{tmem_setup(128, 2)}  mov.u32 %r13, buf;
  add.u32 %r14, %r10, 24;
  @%p2 bra SKIP3;
  mbarrier.init.shared::cta.b64 [%r14], 1;
SKIP3:
  bar.sync 0;
{pre_mma}
  @%p2 bra WAIT;
  ld.param.u64 %rd1, [src];
  mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [%r10], {buf};
  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r13], [%rd1], {buf}, [%r10];
L1:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r10], 0;
  @!%p3 bra L1;
  tcgen05.fence::after_thread_sync;
  cvt.u64.u32 %rd3, %r13;
  shr.u64 %rd4, %rd3, 4;
  or.b64 %rd5, %rd4, {desc};
  add.s64 %rd6, %rd5, {a_bytes >> 4};
  mov.u32 %r21, {idesc};
  setp.ne.u32 %p4, %r1, %r1;
  setp.eq.u32 %p6, %r1, %r1;
  mov.u32 %r40, 0;
{mmas}
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
{tmem_teardown(128)}"""
    return HEAD + ".visible .entry k(.param .u64 src, .param .u64 out)\n{\n" + body + "\n}\n"


# thread 0 zeroes A's (or B's) shared bytes once the MMAs issued so far have completed: a
# later MMA that reads them from memory then sees zeros; one that reads a collector buffer
# does not
def _zero(first: int, nbytes: int, bar: str = "%r14") -> str:
    lines = [f"  tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [{bar}];",
             "Z1:", f"  mbarrier.try_wait.parity.shared::cta.b64 %p7, [{bar}], 0;", "  @!%p7 bra Z1;",
             "  tcgen05.fence::after_thread_sync;"]
    lines += [f"  st.shared.v4.u32 [%r13+{first + o}], {{%r40, %r40, %r40, %r40}};" for o in range(0, nbytes, 16)]
    lines += ["  fence.proxy.async.shared::cta;"]
    return "\n".join(lines)


def _operands(seed: int, m: int = M, n: int = N):
    rng = np.random.default_rng(seed)
    a16 = (rng.standard_normal((m, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b16 = (rng.standard_normal((n, K)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    src = np.concatenate([_kmajor_image(a16), _kmajor_image(b16)])
    a = (a16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    b = (b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return src, a, b, a16


def _launch(text: str, src: np.ndarray, n: int = N):
    out = np.zeros((128, n), dtype=np.float32)
    res = emu.launch(text, "k", grid=1, block=128, args=[src, out], file="t.ptx")
    return res.outputs[1], res


MMA = "tcgen05.mma.cta_group::1.kind::f16{q} [%r20], %rd5, %rd6, %r21, {rest};"
A_BYTES = M // 8 * SBO


def test_collector_a_use_and_lastuse_multiply_the_filled_a_not_memory():
    src, a, b, _ = _operands(1)
    mmas = "\n".join([MMA.format(q=".collector::a::fill", rest="%p4"), _zero(0, A_BYTES),
                      MMA.format(q=".collector::a::use", rest="%p6"),
                      MMA.format(q=".collector::a::lastuse", rest="%p6")])
    got, res = _launch(_kernel(mmas), src)
    np.testing.assert_allclose(got, 3 * (a @ b.T), rtol=1e-5, atol=1e-4)
    assert not res.warnings


def test_collector_discard_and_no_qualifier_read_memory():
    # after ::discard (the default usage) A is read from memory: the zeroed A adds nothing
    src, a, b, _ = _operands(2)
    mmas = "\n".join([MMA.format(q=".collector::a::discard", rest="%p4"), _zero(0, A_BYTES),
                      MMA.format(q="", rest="%p6"), MMA.format(q=".collector::a::fill", rest="%p6"),
                      MMA.format(q=".collector::a::lastuse", rest="%p6")])
    got, _ = _launch(_kernel(mmas), src)
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-5, atol=1e-4)


def test_collector_use_with_nothing_filled_is_a_warning_and_reads_memory():
    src, a, b, _ = _operands(3)
    got, res = _launch(_kernel(MMA.format(q=".collector::a::use", rest="%p4")), src)
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-5, atol=1e-4)
    assert any("with no collector buffer filled" in w for w in res.warnings)


def test_disable_output_lane_keeps_the_masked_lanes_and_zero_mask_writes_all():
    # lanes 0..31 (element 0 all ones) and lane 64 (element 2 bit 0) keep the first MMA's D
    src, a, b, _ = _operands(4)
    mmas = "\n".join(["  mov.u32 %r41, 0xffffffff;", "  mov.u32 %r42, 1;",
                      MMA.format(q="", rest="{%r40, %r40, %r40, %r40}, %p4"),
                      MMA.format(q="", rest="{%r41, %r40, %r42, %r40}, %p6")])
    got, _ = _launch(_kernel(mmas), src)
    want = 2 * (a @ b.T)
    keep = np.zeros(128, bool)
    keep[:32] = keep[64] = True
    want[keep] = (a @ b.T)[keep]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_scale_input_d_scales_the_accumulator_by_a_power_of_two():
    src, a, b, _ = _operands(5)
    mmas = "\n".join([MMA.format(q="", rest="%p4"), MMA.format(q="", rest="{%r40, %r40, %r40, %r40}, %p6, 2")])
    got, _ = _launch(_kernel(mmas), src)
    np.testing.assert_allclose(got, 1.25 * (a @ b.T), rtol=1e-5, atol=1e-4)


# ---- .ws: B collector buffers, A in TMEM ---------------------------------------------------------

# each thread t of the four warps writes row t of A (16 bf16 = 8 words, from the source image's
# own copy of A laid out row-major after A and B) into TMEM lane t, columns 64..71
A_TO_TMEM = """
  ld.param.u64 %rd10, [src];
  mul.wide.u32 %rd11, %r1, 32;
  add.s64 %rd12, %rd10, %rd11;
  add.s64 %rd12, %rd12, {rows_at};
  ld.global.v4.u32 {{%r50, %r51, %r52, %r53}}, [%rd12];
  ld.global.v4.u32 {{%r54, %r55, %r56, %r57}}, [%rd12+16];
  and.b32 %r58, %r2, 3;
  shl.b32 %r58, %r58, 21;
  add.u32 %r59, %r20, %r58;
  add.u32 %r59, %r59, 64;
  tcgen05.st.sync.aligned.32x32b.x8.b32 [%r59], {{%r50, %r51, %r52, %r53, %r54, %r55, %r56, %r57}};
  tcgen05.wait::st.sync.aligned;
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  tcgen05.fence::after_thread_sync;
  add.u32 %r60, %r20, 64;
"""
WS = "tcgen05.mma.ws.cta_group::1.kind::f16{q} [%r20], {a}, %rd6, %r21, {rest};"


def test_ws_with_a_in_tmem_and_b_collector_buffers():
    src, a, b, a16 = _operands(6)
    image = np.concatenate([src, a16.astype("<u2").view(np.uint8).reshape(-1)])
    pre = A_TO_TMEM.format(rows_at=src.size)
    b_at = A_BYTES
    mmas = "\n".join([WS.format(q=".collector::b2::fill", a="[%r60]", rest="%p4"), _zero(b_at, N // 8 * SBO),
                      WS.format(q=".collector::b2::lastuse", a="[%r60]", rest="%p6, 0"),
                      WS.format(q=".collector::b1::discard", a="%rd5", rest="%p6")])
    got, res = _launch(_kernel(mmas, pre_mma=pre), image)
    # the last MMA reads the zeroed B from memory: it adds nothing
    np.testing.assert_allclose(got, 2 * (a @ b.T), rtol=1e-5, atol=1e-4)
    assert not res.warnings


@pytest.mark.parametrize("line,what", [
    (MMA.format(q=".collector::b0::fill", rest="%p4"), r"takes \.collector::a::\{fill,use,lastuse,discard\}"),
    (WS.format(q=".collector::a::fill", a="%rd5", rest="%p4"), r"\.ws takes \.collector::b0\.\.b3"),
    (MMA.format(q="", rest="{%r40, %r40}, %p4"), r"the ISA's vector is 4 x \.b32 for \.cta_group::1"),
    (MMA.format(q="", rest="%p4, 16"), r"scale-input-d must be an immediate in 0\.\.15"),
])
def test_malformed_collector_mask_and_scale_forms_are_one_clear_line(line, what):
    src, *_ = _operands(7)
    with pytest.raises(Unsupported, match=what) as e:
        _launch(_kernel(line), src)
    assert "\n" not in str(e.value) and "t.ptx:" in str(e.value)


@pytest.mark.parametrize("kind,q,want", [("mxf4nvf4", "block16", "4X"), ("mxf4nvf4", "block32", "2X"),
                                          ("mxf4", "block32", "2X"), ("mxf8f6f4", "block32", "1X"),
                                          ("mxf4nvf4", "scale_vec::4X", "4X"), ("mxf8f6f4", None, None)])
def test_block_size_spellings_of_the_scale_vector(kind, q, want):
    from porter.emu.ops.tcgen05 import scale_vec_of
    parts = ["tcgen05", "mma", "cta_group::1", f"kind::{kind}", "block_scale"] + ([q] if q else [])
    assert scale_vec_of(parts, kind) == want
