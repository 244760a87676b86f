// probe: cvt_fp6
// feature: fp6
// shows: op:cvt_to_e2m3, op:cvt_to_e3m2, op:cvt_from_e2m3, op:cvt_from_e3m2
// proves: hardware fp6 conversions: two f32 -> e2m3x2 and e3m2x2 with round-to-nearest
//   and saturation (cvt.rn.satfinite.e2m3x2.f32 / e3m2x2.f32) and back to f16x2; both
//   round-tripped pairs are written to global memory.
// denied: the fp6 conversions are Blackwell-only: ptxas 13.x accepts sm_100a and sm_120a,
//   rejects sm_90a.

typedef unsigned int u32;

extern "C" __global__ void probe_cvt_fp6(const float2* __restrict__ in, u32* __restrict__ out) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    const float2 v = in[i];
    unsigned short e2m3, e3m2;
    u32 back_e2m3, back_e3m2;
    asm volatile("cvt.rn.satfinite.e2m3x2.f32 %0, %1, %2;" : "=h"(e2m3) : "f"(v.x), "f"(v.y));
    asm volatile("cvt.rn.satfinite.e3m2x2.f32 %0, %1, %2;" : "=h"(e3m2) : "f"(v.x), "f"(v.y));
    asm volatile("cvt.rn.f16x2.e2m3x2 %0, %1;" : "=r"(back_e2m3) : "h"(e2m3));
    asm volatile("cvt.rn.f16x2.e3m2x2 %0, %1;" : "=r"(back_e3m2) : "h"(e3m2));
    out[2 * i] = back_e2m3;
    out[2 * i + 1] = back_e3m2;
}
