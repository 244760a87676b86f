// O stored by TMA (knob o_store=tma), shared by the tcgen05 and wgmma attention mainloops.
//
// The storing threads (a softmax or correction warpgroup) write O / l as bf16 into a
// shared-memory staging box laid out as the output tensor map's 128-byte swizzle (the box
// is 64 bf16 columns = one 128-byte row per query row; 16-byte chunk k of row r sits at
// chunk k ^ (r % 8): the TMA's 128B pattern over a 1024-aligned box), then
//   fence.proxy.async.shared::cta by every writer (their generic stores become visible to
//   the async proxy that the TMA store reads through: PTX ISA "membar/fence", proxies),
//   a named barrier among the storing threads (all writes fenced before the issue),
//   one thread issues cp.async.bulk.tensor ... global.shared::cta ... bulk_group and
//   commits the group; the global writes proceed while the threads go on.
// The staging area is a ring of kSlots boxes. Before a box is rewritten, the issuing thread
// waits cp.async.bulk.wait_group.read kSlots - 1 (the group that last read this slot is
// done reading: PTX ISA "cp.async.bulk.wait_group": the source may be reused only after it)
// and a named barrier passes that on to the other writers. Every box commits a group, even
// one whose rows all lie past seq_q (an empty group), so the count of groups between two
// uses of a slot is always kSlots. Before the CTA exits the issuer waits wait_group 0.
//
// Staged in the Q buffer (kInQ; where the ring does not fit beside the K/V stages): a tile's
// boxes overwrite its own Q boxes (same 128 B rows, same 128B swizzle, slot c = Q box c of the
// storing group's rows, kSlotStride apart), so a slot is never reused within a tile and
// begin() neither waits nor meets. Q is dead once the last S = Q K^T that reads these rows has
// completed: the writers observe that before the first box (tcgen05: the last S's s_full
// commit; wgmma: their own wgmma.wait_group), so no write reaches Q while an MMA reads it.
// The Q buffer goes back to the producer only after the tile's last box is read:
// release_q() has the issuer wait cp.async.bulk.wait_group.read 0 and then arrive on the
// Q buffer's empty barrier (the next Q tile's TMA load waits on it). That orders the next
// tile's writers too: they observe the new Q's landing (q_full) before they write.
#ifndef PORTER_ATTN_O_STORE_TMA_CUH
#define PORTER_ATTN_O_STORE_TMA_CUH

namespace porter {
namespace attn {

// 3-D tile store shared -> global (PTX ISA "cp.async.bulk.tensor", c0 innermost), beside
// tma/tma.cuh's tma_store_2d: O's map is (head dim, seq_q, batch x heads), so a box's rows
// past seq_q fall outside dim 1 and are not written (a 2-D (rows, D) view would write them
// into the next head). Kept here so kernels without the knob render byte-identical.
PORTER_DEVICE void tma_store_3d(const TmaDescriptor* desc, uint32_t src, int32_t c0, int32_t c1, int32_t c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, { %2, %3, %4 }], [%1];"
        :: "l"(desc), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

// Byte offset of 16-byte chunk `chunk` (0..7) of row `row` in a 128B-swizzled box.
PORTER_DEVICE uint32_t o_box_offset(int row, int chunk) {
    return static_cast<uint32_t>(row) * 128u + (static_cast<uint32_t>(chunk ^ (row & 7)) << 4);
}

PORTER_DEVICE void st_shared_v4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.b32 [%0], { %1, %2, %3, %4 };" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

PORTER_DEVICE void st_shared_b32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}

// One storing group's ring of staging boxes (kBoxBytes each, 1024-aligned), its named
// barrier (id kBarrier0 + group, kThreadsStoring participants) and its issuing thread. The
// barrier id and the sizes are immediates: the storing warps may run with few registers
// (the two-Q-tile form's correction warpgroup: 88 after setmaxnreg).
template <int kSlots, uint32_t kBoxBytes, int kThreadsStoring, uint32_t kBarrier0, bool kInQ = false,
          uint32_t kSlotStride = kBoxBytes>
struct OStager {
    uint32_t group;      // which storing group: named barrier kBarrier0 + group
    bool issuer;         // the one thread that issues, commits and waits
    uint32_t seq;        // boxes staged so far (the same count in every storing thread)

    // The next box's slot in the ring at `staging` (passed in, not kept: the caller recomputes
    // it from its shared-memory carve-up), once the store that last read it finished reading.
    __device__ __forceinline__ uint32_t begin(uint32_t staging) {
        if constexpr (!kInQ) {
            if (issuer) tma_store_wait_read<kSlots - 1>();
            named_barrier_sync(kBarrier0 + group, kThreadsStoring);
        }
        return staging + (seq % kSlots) * kSlotStride;
    }

    // The box is written: fence, meet, and store it at (c0, c1, c2) (nothing when no row
    // of it is live; the group is committed either way).
    __device__ __forceinline__ void end(const TmaDescriptor* map, uint32_t slot, int c0, int c1, int c2, bool live) {
        fence_proxy_async_smem();
        named_barrier_sync(kBarrier0 + group, kThreadsStoring);
        if (issuer) {
            if (live) tma_store_3d(map, slot, c0, c1, c2);
            tma_store_commit();
        }
        ++seq;
    }

    // kInQ, after a tile's last box: every box's store has read its Q rows, then the Q buffer
    // is free for the next Q tile's TMA load (`q_empty`: one arrival per storing group).
    __device__ __forceinline__ void release_q(uint32_t q_empty) {
        static_assert(kInQ, "release_q: only the Q-buffer staging hands its slots back this way");
        if (issuer) {
            tma_store_wait_read<0>();
            mbar_arrive(q_empty);
        }
    }

    // Before exit: every store written to global memory.
    __device__ __forceinline__ void drain() {
        if (issuer) tma_store_wait_all<0>();
    }
};

}  // namespace attn
}  // namespace porter

#endif  // PORTER_ATTN_O_STORE_TMA_CUH
