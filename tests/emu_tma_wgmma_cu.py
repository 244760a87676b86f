"""CUDA helpers the hand-written TMA + wgmma race tests share (test_emu_wgmma_undefined,
test_emu_wgmma_release_hb): a tensor map passed by value, a TMA 2-D tile load, mbarrier
init / expect / parity wait, four m64n64k16 bf16 wgmmas over K = 64 from 128B-swizzled K-major
tiles, and the warpgroup's 64 x 64 fp32 D stored row-major. Prepend ``HELPERS`` to a kernel."""

HELPERS = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
struct alignas(64) Map { unsigned char b[128]; };

__device__ __forceinline__ u32 sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ u64 desc128(u32 a) {        // K-major, 128B swizzle, 1024-byte stride
    return (u64)((a >> 4) & 0x3FFF) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void wait_parity(u32 bar, u32 par) {
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n"
                 :: "r"(bar), "r"(par) : "memory");
}
__device__ __forceinline__ void tma2d(u32 dst, const Map* m, u32 bar, int x, int y) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" :: "r"(dst), "l"(m), "r"(bar), "r"(x), "r"(y) : "memory");
}
__device__ __forceinline__ void expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
#define A8(i) "+f"(d[i]), "+f"(d[i+1]), "+f"(d[i+2]), "+f"(d[i+3]), "+f"(d[i+4]), "+f"(d[i+5]), "+f"(d[i+6]), "+f"(d[i+7])

// D (+)= A B^T over K = 64: four k16 steps of 32 bytes; a, b: the tiles' shared addresses
__device__ __forceinline__ void wgmma_k64(float (&d)[32], u32 a, u32 b) {
    for (int k = 0; k < 4; ++k) {
        u64 da = desc128(a + 32 * k), db = desc128(b + 32 * k);
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : A8(0), A8(8), A8(16), A8(24) : "l"(da), "l"(db), "r"(k));
    }
}

// the warp's 16 rows of the 64 x 64 D fragment into row-major c
__device__ __forceinline__ void store_c64(float* c, const float (&d)[32], int warp, int lane) {
    const int r = warp * 16 + lane / 4, col = (lane % 4) * 2;
    for (int j = 0; j < 8; ++j) {
        c[r * 64 + j * 8 + col] = d[4 * j];           c[r * 64 + j * 8 + col + 1] = d[4 * j + 1];
        c[(r + 8) * 64 + j * 8 + col] = d[4 * j + 2]; c[(r + 8) * 64 + j * 8 + col + 1] = d[4 * j + 3];
    }
}
"""
