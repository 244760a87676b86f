// porter warp-level tensor-core primitives: ldmatrix and mma.sync (PTX ISA "Warp-level
// matrix instructions": ldmatrix, mma m16n8k16 / m16n8k32 / m16n8k64, and "Warp-level
// matrix multiply-accumulate with block scaling").
//
// Fragment layouts (PTX ISA "Matrix fragments for mma.m16n8k*"), per lane l with
// g = l / 4 (group) and t = l % 4 (thread in group). In BYTES of one 32-byte K step
// (16 bf16, 32 e4m3 or 64 packed e2m1 - the layout is the same in bytes for all three):
//   A (16 rows x 32 B, 4 regs): reg j holds row g + 8 * (j % 2), bytes 4t + 16 * (j / 2) .. +3
//   B (32 B x 8 cols, 2 regs) : reg j holds col g, bytes 4t + 16 * j .. +3 of that column
//   C/D (16 x 8 fp32, 4 regs) : reg j holds row g + 8 * (j / 2), col 2t + (j % 2)
// ldmatrix.x4 (.b16, not transposed) gives lane l, from each of four 8 x 16-byte
// matrices i = 0..3, the 4 bytes at row l / 4, bytes 4 * (l % 4) - matrix i's row
// addresses come from lanes 8i .. 8i + 7. So one ldmatrix.x4 is one A fragment (matrices:
// rows 0-7 | rows 8-15 of the first 16 B, then of the second 16 B) or two B fragments.
// With .trans each 8 x 8 b16 matrix is transposed on the way (P V's V operand, stored
// key-major, becomes column-major B).
#ifndef PORTER_MMA_SYNC_CUH
#define PORTER_MMA_SYNC_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {

// ---- shared-memory layout: 128-byte rows, 16-byte chunks XOR-swizzled by row % 8 ------
// The layout TMA's SWIZZLE_128B writes into a 1024-byte-aligned buffer, and what the
// cp.async path writes by hand: chunk c of row r sits at chunk c ^ (r % 8). The eight
// rows an ldmatrix matrix reads (consecutive rows, one logical chunk) then hit eight
// different chunks = all 32 banks: no bank conflicts, for loads and for the 16-byte
// cp.async stores alike.
PORTER_DEVICE uint32_t swizzle_128b(uint32_t row, uint32_t chunk) {
    return row * 128u + ((chunk ^ (row & 7u)) << 4);
}

// ---- shared-memory accesses by .shared::cta address (staged epilogues) -----------------
PORTER_DEVICE void st_shared_u32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}
PORTER_DEVICE uint4 ld_shared_v4(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 { %0, %1, %2, %3 }, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}

// 16 bytes to global memory (16-byte aligned): spelled out so the store stays one
// st.global.v4 whatever alignment the compiler can prove for the address.
PORTER_DEVICE void st_global_v4(void* ptr, uint4 v) {
    asm volatile("st.global.v4.u32 [%0], { %1, %2, %3, %4 };"
                 :: "l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// ---- ldmatrix ------------------------------------------------------------------------
PORTER_DEVICE void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
PORTER_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// ---- mma.sync ---------------------------------------------------------------------------
// D = A x B + D, fp32 accumulators in registers. One per MMA kind porter issues.

// kind f16 with bf16 operands: m16n8k16 (sm_80+), SASS HMMA.16816.F32.BF16.
PORTER_DEVICE void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{ %0, %1, %2, %3}, { %4, %5, %6, %7}, { %8, %9}, { %0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// kind::f8f6f4 with e4m3 operands: m16n8k32 (sm_120a), SASS QMMA.16832.F32.E4M3.E4M3.
PORTER_DEVICE void mma_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e4m3.f32 "
                 "{ %0, %1, %2, %3}, { %4, %5, %6, %7}, { %8, %9}, { %0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Block-scaled MMAs take one 32-bit scale word per lane for A and one for B plus
// {byte-id, thread-id} selectors (immediates). Which lanes' words are read, with
// thread-id 0 (the layout porter uses, from a probe of the hardware published with an
// MXFP8 kernel, consistent with the PTX ISA's scale-factor figures; not yet
// device-validated by porter):
//   A: row m of the 16 is read from lane 4 * (m % 8) + m / 8, i.e. lane l with
//      l % 4 < 2 holds row l / 4 + 8 * (l % 4);
//   B: column n of the 8 is read from lane 4 * n, i.e. lanes with l % 4 == 0 hold col l / 4.
// Other lanes' words are ignored.

// kind::mxf8f6f4.block_scale.scale_vec::1X, e4m3 x e4m3, ue8m0 (one scale per row / col
// per 32 K): m16n8k32 (sm_120a), SASS QMMA.SF.16832.F32.E4M3.E4M3.E8. BYTE picks the
// byte of the scale words, so one word carries the scales of four consecutive K steps.
template <int BYTE>
PORTER_DEVICE void mma_mxf8_e4m3_16832(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                       uint32_t sfa, uint32_t sfb) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
                 ".f32.e4m3.e4m3.f32.ue8m0 "
                 "{ %0, %1, %2, %3}, { %4, %5, %6, %7}, { %8, %9}, { %0, %1, %2, %3}, "
                 "%10, { %12, 0}, %11, { %12, 0};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                   "r"(sfa), "r"(sfb), "n"(BYTE));
}
// The byte as a (loop) value: after unrolling it is a constant and the switch folds.
PORTER_DEVICE void mma_mxf8_e4m3_16832(int byte, float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1, uint32_t sfa, uint32_t sfb) {
    switch (byte & 3) {
        case 0: mma_mxf8_e4m3_16832<0>(d, a, b0, b1, sfa, sfb); break;
        case 1: mma_mxf8_e4m3_16832<1>(d, a, b0, b1, sfa, sfb); break;
        case 2: mma_mxf8_e4m3_16832<2>(d, a, b0, b1, sfa, sfb); break;
        default: mma_mxf8_e4m3_16832<3>(d, a, b0, b1, sfa, sfb); break;
    }
}

// kind::mxf4nvf4.block_scale.scale_vec::4X, e2m1 x e2m1 (two per byte, no padding),
// ue4m3 (four scales per row / col: one per 16 K, bytes 0..3 of the word in K order):
// m16n8k64 (sm_120a), SASS OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X. With 4X the whole word
// is read, so byte-id is 0.
PORTER_DEVICE void mma_nvf4_16864(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                  uint32_t sfa, uint32_t sfb) {
    asm volatile("mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X"
                 ".f32.e2m1.e2m1.f32.ue4m3 "
                 "{ %0, %1, %2, %3}, { %4, %5, %6, %7}, { %8, %9}, { %0, %1, %2, %3}, "
                 "%10, {0, 0}, %11, {0, 0};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(sfa), "r"(sfb));
}

}  // namespace porter

#endif  // PORTER_MMA_SYNC_CUH
