"""Two wgmma operand layouts the PTX ISA defines but states no rule about, run in a kernel
written here: operand elements that read the same shared bytes (a stride byte offset too
small) and a K slice that crosses its 128-byte swizzle row. The ISA's layout (9.7.15.5.1.2)
names an address for every element either way, so the simulator reads what the fields name
and records a warning with its reason, instead of stopping the kernel with an error. A clean
layout earns no warning and the product A.B^T.

The operands are placed on the host into a shared-memory image as the K-major 128B-swizzle
layout puts them (row r at (r % 8) * 128 + (r // 8) * SBO, byte b of its K slice next, then
bits [4, 7) ^= bits [7, 10) of the address), copied in with generic stores, fenced into the
async proxy, and multiplied by one m64n8k16 bf16 wgmma.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter import emu

IMAGE = 9216                 # bytes of shared memory staged from global
A_AT, B_AT = 0, 8192         # offsets of A (64 x k16: 8 atoms of 1024 B) and B (8 x k16) in the image
SW128 = 1 << 62              # swizzle mode 1: 128-byte

PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 src, .param .u64 out)
{
.reg .pred %p<8>; .reg .b32 %r<32>; .reg .f32 %f<8>; .reg .b64 %rd<16>;
.shared .align 1024 .b8 sm[9216];
ld.param.u64 %rd1, [src]; cvta.to.global.u64 %rd1, %rd1;
ld.param.u64 %rd2, [out]; cvta.to.global.u64 %rd2, %rd2;
mov.u32 %r0, %tid.x;
mov.u32 %r1, sm;
mov.u32 %r2, %r0;
$copy:
setp.ge.u32 %p2, %r2, 2304;
@%p2 bra $copied;
shl.b32 %r3, %r2, 2;
cvt.u64.u32 %rd3, %r3;
add.s64 %rd4, %rd1, %rd3;
ld.global.u32 %r4, [%rd4];
add.u32 %r5, %r1, %r3;
st.shared.u32 [%r5], %r4;
add.u32 %r2, %r2, 128;
bra $copy;
$copied:
fence.proxy.async.shared::cta;
bar.sync 0;
add.u32 %r20, %r1, A_START;
shr.u32 %r20, %r20, 4;
cvt.u64.u32 %rd5, %r20;
or.b64 %rd6, %rd5, A_DESC;
add.u32 %r21, %r1, B_START;
shr.u32 %r22, %r21, 4;
cvt.u64.u32 %rd7, %r22;
or.b64 %rd8, %rd7, B_DESC;
setp.ne.u32 %p1, %r0, %r0;
wgmma.fence.sync.aligned;
wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd6, %rd8, %p1, 1, 1, 0, 0;
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;
mul.wide.u32 %rd9, %r0, 16;
add.s64 %rd10, %rd2, %rd9;
st.global.v4.f32 [%rd10], {%f0, %f1, %f2, %f3};
ret;
}
"""


def _addresses(start: int, rows: int, sbo: int) -> np.ndarray:
    """K-major 128B-swizzle byte addresses (rows, 32) from the image's start (aligned to 1024)."""
    lin = start + (np.arange(rows)[:, None] % 8) * 128 + (np.arange(rows)[:, None] // 8) * sbo + np.arange(32)[None, :]
    return lin ^ (((lin >> 7) & 7) << 4)


def _run(a_sbo: int, a_shift: int = 0):
    """Place A (at A_AT + a_shift, stride byte offset a_sbo) and B into the image as the layout
    with SBO 1024 and no shift puts them, run, and return (A, B, what the layout names, D, result)."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((64, 16)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)
    # bytes outside the operands: other (finite) bf16 values, which a misread layout picks up
    image = rng.standard_normal(IMAGE // 2).astype(ml_dtypes.bfloat16).view(np.uint8).copy()
    image[_addresses(A_AT, 64, 1024)] = a.view(np.uint8).reshape(64, 32)
    image[_addresses(B_AT, 8, 1024)] = b.view(np.uint8).reshape(8, 32)
    # what the descriptor names: the image read by the layout the fields give
    named = image[_addresses(A_AT + a_shift, 64, a_sbo)].copy().view(ml_dtypes.bfloat16).astype(np.float64)
    a_desc = SW128 | (a_sbo >> 4) << 32 | 1 << 16
    b_desc = SW128 | (1024 >> 4) << 32 | 1 << 16
    text = (PTX.replace("A_START", str(A_AT + a_shift)).replace("B_START", str(B_AT))
            .replace("A_DESC", str(a_desc)).replace("B_DESC", str(b_desc)))
    res = emu.launch(text, "k", grid=1, block=128, args=[image, np.zeros((128, 4), np.float32)])
    acc = res.outputs[1]
    d = np.zeros((64, 8))
    for t in range(128):
        warp, lane = divmod(t, 32)
        for j in range(4):
            d[16 * warp + lane // 4 + 8 * (j // 2), 2 * (lane % 4) + j % 2] = acc[t, j]
    return a.astype(np.float64), b.astype(np.float64), named, d, res


def test_a_clean_swizzled_layout_has_no_warning_and_the_right_product():
    a, b, named, d, res = _run(1024)
    np.testing.assert_array_equal(named, a)
    np.testing.assert_allclose(d, a @ b.T, rtol=1e-6, atol=1e-6)
    assert not [w for w in res.warnings if "swizzle row" in w or "same shared bytes" in w], res.warnings


def test_aliasing_operand_elements_are_a_warning_and_read_what_the_fields_name():
    # SBO 512 instead of 1024: rows 8.. start halfway through the first 8 rows' atom
    a, b, named, d, res = _run(512)
    warn = [w for w in res.warnings if "read the same shared bytes" in w]
    assert warn and "SBO 512 B" in warn[0] and "a warning: the PTX ISA (9.7.15.5.1.2" in warn[0], res.warnings
    assert "wgmma.mma_async" in warn[0]                          # the place: the PTX line
    np.testing.assert_allclose(d, named @ b.T, rtol=1e-6, atol=1e-6)
    assert np.abs(d - a @ b.T).max() > 1e-3                      # the numbers are wrong, as on the GPU


def test_a_k_slice_crossing_its_swizzle_row_is_a_warning_and_reads_on():
    # a K step of 112 bytes: the 32-byte slice runs 16 bytes past its 128-byte row
    a, b, named, d, res = _run(1024, a_shift=112)
    warn = [w for w in res.warnings if "crosses its swizzle row" in w]
    assert warn and "offset 112 in its 128 B row" in warn[0] and "a warning: the PTX ISA" in warn[0], res.warnings
    np.testing.assert_allclose(d, named @ b.T, rtol=1e-6, atol=1e-6)


def test_operand_codes_decode_by_table_as_by_conversion():
    # the 8- and 16-bit formats are decoded by a table of every code's value; bit for bit what
    # the conversion gives (NaN payloads included)
    from porter.emu.units import wgmma

    raw = np.random.default_rng(1).integers(0, 256, (64, 64)).astype(np.uint8)
    for fmt in ("bf16", "f16", "e4m3", "e5m2", "tf32"):
        with np.errstate(invalid="ignore"):
            want = wgmma._convert(raw, fmt)
        got = wgmma.decode_values(raw, fmt)
        np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))
