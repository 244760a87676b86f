// probe: cvt_fp4
// feature: fp4
// shows: op:cvt_to_e2m1, op:cvt_from_e2m1
// proves: hardware fp4 conversions: two f32 -> e2m1x2 with round-to-nearest and
//   saturation (cvt.rn.satfinite.e2m1x2.f32) and back (cvt.rn.f16x2.e2m1x2); the
//   round-tripped pair is written to global memory.
// denied: the e2m1x2 conversions are Blackwell-only: ptxas 13.x accepts sm_100a and
//   sm_120a, rejects sm_90a.

typedef unsigned int u32;

extern "C" __global__ void probe_cvt_fp4(const float2* __restrict__ in, u32* __restrict__ out) {
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    const float2 v = in[i];
    u32 back;
    asm volatile("{\n.reg .b8 packed;\n"
                 "cvt.rn.satfinite.e2m1x2.f32 packed, %1, %2;\n"
                 "cvt.rn.f16x2.e2m1x2 %0, packed;\n}\n"
                 : "=r"(back) : "f"(v.x), "f"(v.y));
    out[i] = back;
}
