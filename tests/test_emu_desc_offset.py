"""A wgmma reading 128B-swizzled tiles that start off the 1024-byte pattern boundary, with the
matrix descriptor's base offset saying where the pattern starts (issue 18 item 3).

PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor Format": for a swizzled layout whose start is not on
the pattern's boundary, base offset = (pattern start address >> 7) & 7. Here each tile's
pattern starts at the tile (row r of the tile has its 16-byte chunks XOR-ed with r % 8), the
kernel copies the tiles' bytes into shared memory unchanged, and the product must be A.B^T."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.emu import launch

A_OFF, B_OFF = 384, 9856          # both off a 1024-byte boundary: base offsets 3 and 5


def _copy(reg_base: str, param: str, chunks: int, dst: int) -> str:
    """Each of the 128 threads copies chunks/128 16-byte chunks global -> shared, unchanged."""
    out = [f"  ld.param.u64 %rd2, [{param}];", "  cvta.to.global.u64 %rd2, %rd2;"]
    for k in range(chunks // 128):
        out += [f"  add.u32 %r3, %r0, {128 * k};", "  shl.b32 %r3, %r3, 4;",
                "  cvt.u64.u32 %rd3, %r3;", "  add.u64 %rd3, %rd2, %rd3;",
                "  ld.global.v4.u32 {%r4, %r5, %r6, %r7}, [%rd3];",
                f"  add.u32 %r8, {reg_base}, %r3;", f"  add.u32 %r8, %r8, {dst};",
                "  st.shared.v4.u32 [%r8], {%r4, %r5, %r6, %r7};"]
    return "\n".join(out)


def _desc(dst: int, reg: str) -> str:
    """%rd<reg> = the 128B-swizzle K-major descriptor of the tile at smem + dst, its base
    offset computed from the address as the ISA's formula says."""
    return "\n".join([
        f"  add.u32 %r9, %r1, {dst};",
        "  cvt.u64.u32 %rd4, %r9;",
        "  shr.u64 %rd5, %rd4, 4;", "  and.b64 %rd5, %rd5, 16383;",          # start address >> 4
        "  shr.u64 %rd6, %rd4, 7;", "  and.b64 %rd6, %rd6, 7;", "  shl.b64 %rd6, %rd6, 49;",  # base offset
        "  or.b64 %rd5, %rd5, %rd6;",
        "  or.b64 %rd5, %rd5, 65536;",                  # LBO 16 B (unused for a swizzled K-major operand)
        "  or.b64 %rd5, %rd5, 274877906944;",           # SBO 1024 B (64 << 32): the next 8 rows
        "  or.b64 %rd5, %rd5, 4611686018427387904;",    # 128B swizzle (1 << 62)
        f"  mov.b64 {reg}, %rd5;"])


PTX = f"""
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 a, .param .u64 b, .param .u64 out)
{{
  .reg .b32 %r<12>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<12>;
  .reg .pred %p<2>;
  .shared .align 1024 .b8 smem[16384];
  mov.u32 %r0, %tid.x;
  mov.u32 %r1, smem;
{_copy("%r1", "a", 512, A_OFF)}
{_copy("%r1", "b", 128, B_OFF)}
  bar.sync 0;
  fence.proxy.async.shared::cta;
{_desc(A_OFF, "%rd10")}
{_desc(B_OFF, "%rd11")}
  setp.ne.u32 %p1, 0, 0;
  wgmma.fence.sync.aligned;
  wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {{%f0, %f1, %f2, %f3}}, %rd10, %rd11, %p1, 1, 1, 0, 0;
  wgmma.commit_group.sync.aligned;
  wgmma.wait_group.sync.aligned 0;
  ld.param.u64 %rd2, [out];
  cvta.to.global.u64 %rd2, %rd2;
  shl.b32 %r3, %r0, 4;
  cvt.u64.u32 %rd3, %r3;
  add.u64 %rd3, %rd2, %rd3;
  st.global.v4.f32 [%rd3], {{%f0, %f1, %f2, %f3}};
  ret;
}}
"""


def _swizzled_image(tile: np.ndarray) -> np.ndarray:
    """rows x 16 bf16 -> rows x 128 bytes, the 128B swizzle pattern starting at row 0:
    row r's 16-byte chunk c lands at chunk c ^ (r % 8)."""
    raw = np.ascontiguousarray(tile.astype(ml_dtypes.bfloat16)).view(np.uint8).reshape(len(tile), 2, 16)
    img = np.zeros((len(tile), 8, 16), np.uint8)
    for r in range(len(tile)):
        for c in range(2):
            img[r, c ^ (r % 8)] = raw[r, c]
    return img.reshape(-1)


def test_wgmma_reads_a_swizzled_tile_off_the_pattern_boundary():
    rng = np.random.default_rng(7)
    a = rng.integers(-4, 5, (64, 16)).astype(np.float32)
    b = rng.integers(-4, 5, (8, 16)).astype(np.float32)
    out = np.zeros((128, 4), np.float32)
    b_img = np.concatenate([_swizzled_image(b), np.zeros(1024, np.uint8)])   # one chunk a thread
    res = launch(PTX, "k", 1, 128, [_swizzled_image(a), b_img, out], file="off.ptx")
    d = res.outputs[2]
    got = np.zeros((64, 8), np.float32)
    for t in range(128):               # the m64nNk16 f32 accumulator fragment (PTX ISA 9.7.15.5.1.1)
        for i in range(4):
            got[(t // 32) * 16 + (t % 32) // 4 + 8 * (i // 2), (t % 4) * 2 + i % 2] = d[t, i]
    np.testing.assert_array_equal(got, a @ b.T)


def test_tcgen05_descriptor_base_offset_counts_the_phase_from_the_pattern_start():
    # PTX ISA 9.7.16 "Shared memory descriptor": the same base-offset field (bits 49-51)
    from porter.emu.units.tcgen05 import operand_addresses

    start = 0x1000 + 0x280                     # 640 B past a 1024-byte boundary: base offset 5
    desc = ((start >> 4) | (1 << 16) | ((1024 >> 4) << 32) | (0b001 << 46) | (((start >> 7) & 7) << 49)
            | (2 << 61))                        # 128B swizzle, SBO 1024 B
    addr = operand_addresses(desc, rows=16, row_bytes=32, major="K", elem_bits=16)
    r = np.arange(16)[:, None]
    kb = np.arange(32)[None, :]
    want = start + (r % 8) * 128 + (r // 8) * 1024 + (((kb // 16) ^ (r % 8)) * 16) + kb % 16
    np.testing.assert_array_equal(addr, want)
    aligned = operand_addresses(desc & ~(7 << 49), rows=16, row_bytes=32, major="K", elem_bits=16)
    assert (aligned != want).any()             # base offset 0: the absolute address bits instead
