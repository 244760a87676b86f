// probe: setmaxnreg
// feature: setmaxnreg
// shows: setmaxnreg
// proves: warp-specialised register reallocation: in a 256-thread block the producer
//   warpgroup gives registers back (setmaxnreg.dec 40) and the consumer warpgroup takes
//   more (setmaxnreg.inc 232); both then write to global memory.
// denied: setmaxnreg needs an arch-specific target (ptxas 13.x accepts sm_90a, sm_100a and
//   sm_120a; rejects sm_90, sm_89, sm_80).

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(256, 1)
probe_setmaxnreg(const float* __restrict__ in, float* __restrict__ out) {
    const u32 warpgroup = threadIdx.x / 128;
    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
        out[threadIdx.x] = in[threadIdx.x];
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
        out[threadIdx.x] = in[threadIdx.x] * 2.0f;
    }
}
