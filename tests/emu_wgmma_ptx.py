"""PTX text and operand layout the hand-written single-warpgroup wgmma tests share
(test_emu_forms_public2, test_emu_public_idioms_wgmma, test_emu_wgmma_int, test_emu_proxy_marks):
a 64 x 32-byte A and an 8 x 32-byte B (16 bf16/f16 or 32 8-bit elements of K), K-major with
no swizzle, copied from global into shared memory by the warpgroup, and their descriptors."""

from __future__ import annotations

import numpy as np

LBO, SBO = 128, 256          # K-direction core matrices 128 B apart, 8-row groups 256 B apart


def desc(addr_reg: str, out: str) -> str:
    """PTX computing into ``out`` the no-swizzle shared-memory descriptor of the address in
    ``addr_reg`` (PTX ISA 9.7.15.5.1: start address >> 4, LBO >> 4 at bit 16, SBO >> 4 at 32)."""
    return (f"  cvt.u64.u32 %rd10, {addr_reg};\n  shr.u64 %rd10, %rd10, 4;\n  and.b64 %rd10, %rd10, 16383;\n"
            f"  or.b64 {out}, %rd10, {(LBO >> 4) << 16 | (SBO >> 4) << 32};\n")


# After the entry's .reg lines: sa (A) and sb (B) in shared memory, %r1 = the thread, %r2 / %r3
# their addresses, %r4 = 16 x the thread, %rd1 / %rd2 the global operands (params a_ptr, b_ptr),
# %rd5 = this thread's 16 bytes of A; the operands copied, fenced for the async proxy, the CTA
# synchronised, and %rd11 / %rd12 their descriptors.
OPERANDS_TO_SHARED = """  .shared .align 1024 .b8 sa[2048];
  .shared .align 256 .b8 sb[256];
  ld.param.u64 %rd1, [a_ptr];
  ld.param.u64 %rd2, [b_ptr];
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, sa;
  mov.u32 %r3, sb;
  shl.b32 %r4, %r1, 4;
  cvt.u64.u32 %rd4, %r4;
  add.u64 %rd5, %rd1, %rd4;
  ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd5];
  add.u32 %r5, %r2, %r4;
  st.shared.v4.u32 [%r5], {%r10, %r11, %r12, %r13};
  setp.lt.u32 %p1, %r1, 16;
  @!%p1 bra COPIED;
  add.u64 %rd6, %rd2, %rd4;
  ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd6];
  add.u32 %r6, %r3, %r4;
  st.shared.v4.u32 [%r6], {%r10, %r11, %r12, %r13};
COPIED:
  fence.proxy.async.shared::cta;
  bar.sync 0;
""" + desc("%r2", "%rd11") + desc("%r3", "%rd12")


def core_layout(x: np.ndarray) -> np.ndarray:
    """An operand of rows x 32 bytes (any element type) as the no-swizzle K-major layout puts
    it in shared memory: byte kb of row r at (r % 8) * 16 + (kb % 16) + (kb // 16) * LBO +
    (r // 8) * SBO (8-row x 16-byte core matrices, PTX ISA 9.7.15.5.1)."""
    raw = np.ascontiguousarray(x).view(np.uint8).reshape(x.shape[0], -1)
    rows, width = raw.shape
    assert width == 32, "an operand row of 32 bytes"
    r, kb = np.meshgrid(np.arange(rows), np.arange(width), indexing="ij")
    out = np.zeros(max(rows // 8, 1) * SBO, np.uint8)
    out[(r % 8) * 16 + kb % 16 + (kb // 16) * LBO + (r // 8) * SBO] = raw
    return out
