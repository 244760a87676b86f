// porter cluster-launch-control primitives (PTX ISA 8.6, sm_100+: "clusterlaunchcontrol.try_cancel",
// "clusterlaunchcontrol.query_cancel"): dynamic persistent scheduling. A kernel is launched
// with one cluster per unit of work; a running CTA asks the hardware to cancel the launch of
// a cluster that has not started yet and, when it succeeds, does that cluster's work itself.
// So a CTA that finishes early takes the next unit (greedy), and the clusters the hardware
// never had room for are never started.
//
// Rules the callers keep (PTX ISA):
//   * the 16-byte response and the mbarrier are .shared::cta addresses of the issuing CTA;
//     the response is 16-byte aligned, written asynchronously (async proxy), and its arrival
//     completes 16 bytes of tx on the mbarrier: arm it with expect_tx(16) and read the
//     response only after the phase completed;
//   * once a CTA has observed a failed try_cancel it must not issue another (undefined);
//   * get_first_ctaid is undefined for a response that canceled nothing: test is_canceled.
// The .multicast::cluster::all form (sm_100a only) is not used: in a CTA pair one CTA asks
// and hands the answer to its peer through shared memory (templates/gemm/tcgen05.cu.j2).
#ifndef PORTER_CLC_CUH
#define PORTER_CLC_CUH

namespace porter {
namespace clc {

// Ask to cancel the next not-yet-started cluster; the response lands at `response` and
// completes 16 tx bytes on `bar` (both .shared::cta addresses of this CTA).
PORTER_DEVICE void try_cancel(uint32_t response, uint32_t bar) {
    asm volatile("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%0], [%1];"
                 :: "r"(response), "r"(bar) : "memory");
}

// Decode a landed response: the x of the first CTA of the canceled cluster, or -1 when the
// request canceled nothing (the grid has no cluster left to start).
PORTER_DEVICE int canceled_first_ctaid_x(uint32_t response) {
    int x;
    asm volatile("{\n\t.reg .b128 q;\n\t.reg .pred p;\n\t"
                 "ld.shared.b128 q, [%1];\n\t"
                 "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, q;\n\t"
                 "mov.s32 %0, -1;\n\t"
                 "@p clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %0, q;\n\t}"
                 : "=r"(x) : "r"(response) : "memory");
    return x;
}

// A 32-bit store into the shared memory of another CTA of the cluster (`remote` from
// porter::map_to_cta): the generic-proxy data an mbarrier arrive at cluster scope releases.
PORTER_DEVICE void store_cluster_s32(uint32_t remote, int value) {
    asm volatile("st.shared::cluster.s32 [%0], %1;" :: "r"(remote), "r"(value) : "memory");
}

}  // namespace clc
}  // namespace porter

#endif  // PORTER_CLC_CUH
