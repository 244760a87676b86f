// probe: cvt_fp8
// feature: fp8
// shows: op:cvt_to_e4m3, op:cvt_from_e4m3
// proves: hardware fp8 conversions: f16x2 -> e4m3x2 with round-to-nearest and
//   saturation (cvt.rn.satfinite.e4m3x2.f16x2) and back (cvt.rn.f16x2.e4m3x2); the
//   round-tripped pair is written to global memory.
// denied: the e4m3x2 conversions need sm_89 or newer (ptxas rejects sm_80).

typedef unsigned int u32;

extern "C" __global__ void probe_cvt_fp8(const u32* __restrict__ in, u32* __restrict__ out) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned short packed;
    u32 back;
    asm volatile("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(packed) : "r"(in[i]));
    asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(back) : "h"(packed));
    out[i] = back;
}
