// The megakernel's per-CTA interpreter: shared-memory carving, the loader
// warp's walk, and the compute warps' fetch / wait / execute / signal loop.
// The opcode semantics are in porter/megakernel/isa.py; one function per
// opcode lives in vector_ops.cuh, matvec.cuh and attention.cuh.
#ifndef PORTER_MK_INTERPRETER_CUH
#define PORTER_MK_INTERPRETER_CUH

#ifndef PORTER_MK_ATTENTION_CUH
#error "include the megakernel opcode files first"
#endif

namespace porter {
namespace mk {

// Loader warp: every weight page of the queue, in queue order. It never waits
// on a counter (weights are constant), only on free ring slots.
PORTER_DEVICE void run_loader(const PageRing& ring, const int* queue, int queue_len,
                              const TensorDesc* tensors) {
    const uint64_t policy = l2_evict_first_policy();
    int seq = 0;
    for (int i = 0; i < queue_len; ++i) {
        const int* w = queue + static_cast<long>(i) * isa::WORDS;
        const int op = __ldg(w + isa::W_OP);
        if (op == isa::OP_STOP) break;
        if (op == isa::OP_MATVEC) load_matvec_pages(ring, tensors, w, seq, policy);
    }
    // Drain: leave only after the compute warps released the last pages, so no
    // copy this warp issued is still in flight when it exits.
    for (int s = seq; s < seq + static_cast<int>(kPages); ++s) ring_wait(ring.empty_bar(s), ring.parity_of(s) ^ 1u);
}

PORTER_DEVICE void execute(Ctx& c, int op) {
    switch (op) {
        case isa::OP_EMBED: op_embed(c); break;
        case isa::OP_RMSNORM: op_rmsnorm(c); break;
        case isa::OP_MATVEC: op_matvec(c); break;
        case isa::OP_ROPE: op_rope(c); break;
        case isa::OP_KV_APPEND: op_kv_append(c); break;
        case isa::OP_ATTN_PARTIAL: op_attn_partial(c); break;
        case isa::OP_ATTN_REDUCE: op_attn_reduce(c); break;
        case isa::OP_RESIDUAL_ADD: op_residual_add(c); break;
        case isa::OP_ARGMAX_PARTIAL: op_argmax_partial(c); break;
        case isa::OP_ARGMAX_REDUCE: op_argmax_reduce(c); break;
        default: __trap();   // unknown opcode: fail loudly rather than skip a signal and hang others
    }
}

// Compute warps: the interpreter loop.
PORTER_DEVICE void run_compute(Ctx& c, int* ibuf, const int* queue, int queue_len, int* counters) {
    for (int i = 0; i < queue_len; ++i) {
        c.w = ibuf + (i & 1) * isa::WORDS;
        const int op = c.w[isa::W_OP];
        if (op == isa::OP_STOP) break;
        // Read what is needed after the closing barrier now: the fetcher below
        // overwrites the other buffer, and this one in the next iteration.
        const int signal = c.w[isa::W_SIGNAL];
        const int nwait = c.w[isa::W_NWAIT];
        if (c.cw == 0) {
            const bool more = i + 1 < queue_len;
            ibuf[((i + 1) & 1) * isa::WORDS + c.lane] =
                more ? __ldg(queue + static_cast<long>(i + 1) * isa::WORDS + c.lane) : isa::OP_STOP;
        }
        if (c.ct == 0) {
            // more waits than the record holds: skipping them would silently race
            if (nwait < 0 || nwait > isa::MAX_WAITS) __trap();
            for (int k = 0; k < nwait; ++k) {
                wait_counter(counters + c.w[isa::W_WAIT0 + 2 * k], c.w[isa::W_WAIT0 + 2 * k + 1]);
            }
        }
        group_sync();           // the waits hold for every compute thread
        execute(c, op);
        group_sync();           // every store of this instruction issued
        if (c.ct == 0 && signal >= 0) {
            // the release orders the CTA's stores, which the barrier above put before
            // it in causality order: no fence first (counters.cuh, "Ordering")
            signal_counter(counters + signal);
        }
    }
}

PORTER_DEVICE void run_cta(const int* instructions, int queue_len, int* counters, const TensorDesc* tensors) {
    extern __shared__ __align__(1024) unsigned char smem[];
    const PageRing ring{smem_u32(smem + kOff_ring), smem_u32(smem + kOff_full), smem_u32(smem + kOff_empty)};
    int* ibuf = reinterpret_cast<int*>(smem + kOff_instr);   // [2][WORDS]
    const int* queue = instructions + static_cast<long>(blockIdx.x) * queue_len * isa::WORDS;
    if (threadIdx.x == 0) ring_init(ring);
    if (threadIdx.x < isa::WORDS) ibuf[threadIdx.x] = queue_len > 0 ? __ldg(queue + threadIdx.x) : isa::OP_STOP;
    __syncthreads();
    if (warp_id() == kLoaderWarp) {
        run_loader(ring, queue, queue_len, tensors);
        return;
    }
    Ctx c;
    c.tensors = tensors;
    c.w = ibuf;
    c.x = reinterpret_cast<float*>(smem + kOff_x);
    c.y = reinterpret_cast<float*>(smem + kOff_y);
    c.u = reinterpret_cast<float*>(smem + kOff_u);
    c.red = reinterpret_cast<float*>(smem + kOff_red);
    c.red_i = reinterpret_cast<int*>(smem + kOff_red + 4u * kComputeWarps);
    c.ring = ring;
    c.pages = smem + kOff_ring;
    c.ct = threadIdx.x;
    c.cw = warp_id();
    c.lane = lane_id();
    c.page_seq = 0;
    run_compute(c, ibuf, queue, queue_len, counters);
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_INTERPRETER_CUH
