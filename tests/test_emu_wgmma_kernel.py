"""A hand-written wgmma kernel end to end in porter's PTX simulator: operands staged into
shared memory with generic stores, a K-major no-swizzle m64n8k16 bf16 MMA, accumulators
read back by the fragment layout the PTX ISA states (row 16*warp + lane/4 (+8), column
2*(lane%4) + {0,1}). Without ``fence.proxy.async`` between the generic stores and the
MMA, the simulator reports the missing proxy fence."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter import emu

LBO, SBO, B_AT = 128, 256, 2048

PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 src, .param .u64 out)
{
.reg .pred %p<8>; .reg .b32 %r<32>; .reg .f32 %f<8>; .reg .b64 %rd<16>;
.shared .align 1024 .b8 sm[4096];
ld.param.u64 %rd1, [src]; cvta.to.global.u64 %rd1, %rd1;
ld.param.u64 %rd2, [out]; cvta.to.global.u64 %rd2, %rd2;
mov.u32 %r0, %tid.x;
mov.u32 %r1, sm;
COPY
FENCE
bar.sync 0;
shr.u32 %r20, %r1, 4;
cvt.u64.u32 %rd5, %r20;
or.b64 %rd6, %rd5, DESC;
add.u32 %r21, %r1, 2048;
shr.u32 %r22, %r21, 4;
cvt.u64.u32 %rd7, %r22;
or.b64 %rd8, %rd7, DESC;
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


def _copy_lines() -> str:
    out = []
    for i in range(5):                        # 576 words over 128 threads
        out += [f"add.u32 %r2, %r0, {128 * i};", "setp.lt.u32 %p2, %r2, 576;", "shl.b32 %r3, %r2, 2;",
                "cvt.u64.u32 %rd3, %r3;", "add.s64 %rd4, %rd1, %rd3;", "@%p2 ld.global.u32 %r4, [%rd4];",
                "add.u32 %r5, %r1, %r3;", "@%p2 st.shared.u32 [%r5], %r4;"]
    return "\n".join(out)


def _core_matrix_bytes(mat: np.ndarray) -> np.ndarray:
    """K-major, no swizzle, written from the ISA's wording: 8-row x 16-byte core matrices,
    the next one along K LBO bytes on, the next 8 rows SBO bytes on."""
    rows, k = mat.shape
    out = np.zeros((rows // 8) * SBO, dtype=np.uint8)
    raw = mat.astype(ml_dtypes.bfloat16).view(np.uint8).reshape(rows, k * 2)
    for r in range(rows):
        for kc in range(k // 8):
            at = (r // 8) * SBO + kc * LBO + (r % 8) * 16
            out[at:at + 16] = raw[r, 16 * kc:16 * kc + 16]
    return out


def _run(fence: bool):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 16)).astype(ml_dtypes.bfloat16).astype(np.float64)
    b = rng.standard_normal((8, 16)).astype(ml_dtypes.bfloat16).astype(np.float64)
    src = np.zeros(576 * 4, dtype=np.uint8)
    src[:2048] = _core_matrix_bytes(a)
    src[B_AT:B_AT + 256] = _core_matrix_bytes(b)
    desc = (LBO >> 4) << 16 | (SBO >> 4) << 32
    text = (PTX.replace("COPY", _copy_lines()).replace("DESC", str(desc))
            .replace("FENCE", "fence.proxy.async.shared::cta;" if fence else ""))
    out = np.zeros((128, 4), dtype=np.float32)
    res = emu.launch(text, "k", grid=1, block=128, args=[src, out])
    return a, b, res.outputs[1]


def test_wgmma_kernel_matches_the_isa_fragment_layout():
    a, b, acc = _run(fence=True)
    d = np.zeros((64, 8))
    for t in range(128):
        warp, lane = divmod(t, 32)
        for j in range(4):
            d[16 * warp + lane // 4 + 8 * (j // 2), 2 * (lane % 4) + j % 2] = acc[t, j]
    np.testing.assert_allclose(d, a @ b.T, rtol=1e-6, atol=1e-6)


def test_generic_stores_need_fence_proxy_async_before_the_mma():
    with pytest.raises(emu.CheckFailed, match="no fence.proxy.async since"):
        _run(fence=False)


def test_a_warp_that_skips_the_warpgroup_mma_is_reported():
    rng = np.random.default_rng(5)
    src = np.zeros(576 * 4, dtype=np.uint8)
    src[:2048] = _core_matrix_bytes(rng.standard_normal((64, 16)))
    desc = (LBO >> 4) << 16 | (SBO >> 4) << 32
    text = (PTX.replace("COPY", _copy_lines()).replace("DESC", str(desc))
            .replace("FENCE", "fence.proxy.async.shared::cta;")
            .replace("wgmma.fence.sync.aligned;", "setp.ge.u32 %p3, %r0, 96;\n@%p3 bra $skip;\nwgmma.fence.sync.aligned;")
            .replace("mul.wide.u32 %rd9", "$skip:\nmul.wide.u32 %rd9"))
    with pytest.raises(emu.CheckFailed, match=r"warpgroup 0 issued \[1, 1, 1, 0\] wgmma.mma_async"):
        emu.launch(text, "k", grid=1, block=128, args=[src, np.zeros((128, 4), np.float32)])
