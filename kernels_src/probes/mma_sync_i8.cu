// probe: mma_sync_i8
// feature: mma_sync
// generation: mma_sync
// kind: i8
// shows: kind:i8, mma_sync
// proves: one warp issues mma.sync m16n8k32 s8 x s8 -> s32 (A 4 x 32 bit and B 2 x 32 bit
//   per lane, four int8 per register) into an integer register accumulator and writes D to
//   global memory.
// denied: integer mma.sync at k32 needs sm_80 or newer.

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_i8(const u32* __restrict__ a, const u32* __restrict__ b, int* __restrict__ out) {
    const u32 lane = threadIdx.x;
    const uint4 af = reinterpret_cast<const uint4*>(a)[lane];
    const uint2 bf = reinterpret_cast<const uint2*>(b)[lane];
    int d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(d0), "+r"(d1), "+r"(d2), "+r"(d3)
        : "r"(af.x), "r"(af.y), "r"(af.z), "r"(af.w), "r"(bf.x), "r"(bf.y));
    reinterpret_cast<int4*>(out)[lane] = make_int4(d0, d1, d2, d3);
}
