// probe: cluster_launch_control
// feature: cluster_launch_control
// also-needs: mbarrier
// shows: cluster_launch_control, op:clc_try_cancel
// proves: dynamic scheduling by cluster launch control: one thread arms an mbarrier for
//   the 16-byte response, issues clusterlaunchcontrol.try_cancel (the non-multicast form),
//   waits on the barrier's phase, loads the response and decodes it with query_cancel
//   (is_canceled, then get_first_ctaid::x only for a response that canceled a cluster,
//   as the ISA leaves the ctaid undefined otherwise), and writes the taken-over CTA's x.
// denied: clusterlaunchcontrol needs .target sm_100 or newer (ptxas 13.x rejects it for
//   sm_90a: "requires .target sm_100 or higher").

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32, 1)
probe_cluster_launch_control(u32* __restrict__ out) {
    __shared__ __align__(16) unsigned char response[16];
    __shared__ __align__(8) unsigned long long bar_storage;
    const u32 resp = (u32)__cvta_generic_to_shared(response);
    const u32 bar = (u32)__cvta_generic_to_shared(&bar_storage);
    if (threadIdx.x != 0) return;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16;" :: "r"(bar) : "memory");
    asm volatile("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%0], [%1];"
                 :: "r"(resp), "r"(bar) : "memory");
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra WAIT_%=;\n}\n" :: "r"(bar) : "memory");
    u32 x;
    asm volatile("{\n.reg .b128 q;\n.reg .pred p;\n"
                 "ld.shared.b128 q, [%1];\n"
                 "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, q;\n"
                 "mov.u32 %0, 0xffffffff;\n"
                 "@p clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %0, q;\n}\n"
                 : "=r"(x) : "r"(resp) : "memory");
    out[blockIdx.x] = x;
}
