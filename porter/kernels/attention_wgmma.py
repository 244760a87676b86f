"""Attention forward on warpgroup tensor cores (wgmma): S, P and O live in registers.

Warp roles (one CTA = one 128-row query tile at a time, persistent over tiles):
  warpgroup 0     producer: one elected thread streams Q and the K/V ring with TMA;
                  the warpgroup gives its registers away (setmaxnreg.dec)
  warpgroups 1-2  consumers: 64 query rows each; S = Q K^T (wgmma, A and B from
                  shared memory), online softmax in registers, P packed to bf16 in
                  registers and fed as the REGISTER A operand of O += P V
                  (wgmma with V as an MN-major B); setmaxnreg.inc. The two take
                  turns issuing their MMAs (ping-pong over two named barriers) and
                  each pipelines S(n) / P V(n-1) against its own softmax.

Register budget per consumer thread (the hd128 case): O 64 x 128 fp32 over 128
threads = 64 registers, S 64 x block_n fp32 = block_n / 2, P as bf16 = block_n / 4,
plus row statistics and addresses; 240 registers after setmaxnreg.

Shared memory: Q tile + ``stages`` x (K tile + V tile), all in 128-byte-swizzled
TMA boxes of 64 columns (128 B rows), sized to the descriptor's per-block budget.
"""

from __future__ import annotations

from porter.kernels import attention_variants as family
from porter.kernels import encodings_wgmma as enc
from porter.kernels.base import KernelSpec, SassRule, Unsupported, no_spills

MAINLOOP = "wgmma"
FEATURES = ("wgmma", "tma", "mbarrier", "setmaxnreg")
BLOCK_M = 128              # 2 consumer warpgroups x 64 rows (wgmma M is 64)
CONSUMER_WARPGROUPS = BLOCK_M // 64
THREADS = 128 * (1 + CONSUMER_WARPGROUPS)
MAX_STAGES = 4
SWIZZLE_BYTES = 128        # TMA box inner extent and wgmma swizzle width
BOX_COLS = SWIZZLE_BYTES // 2   # bf16 columns per TMA box
ALIGN_SLACK = 1024         # dynamic smem base rounded up to the swizzle atom
BARRIER_BYTES = 8

# Registers per thread after setmaxnreg: 384 threads launch at 65536 / 384 -> 168;
# the producer drops to 24 and the two consumer warpgroups rise to 240
# (128 x 24 + 256 x 240 = 64512 <= 65536).
PRODUCER_REGS = 24
CONSUMER_REGS = 240

# What the SASS must show (descriptor spellings, Arch.sass_patterns refs).
SASS_REQUIRED = (
    ("kind:f16", "warpgroup MMAs for S = Q K^T and O += P V"),
    ("op:exp2", "softmax exponentials through ex2.approx"),
    ("op:tma_load", "Q, K and V streamed by TMA"),
    ("mbarrier", "mbarrier ring between the producer and the consumers"),
)


def sass_rules(arch, o_store: str = "direct") -> tuple[tuple[SassRule, ...], tuple[SassRule, ...]]:
    refs = SASS_REQUIRED + ((("op:tma_store", "O stored from the staging rings by TMA (o_store=tma)"),)
                            if o_store == "tma" else ())
    required = tuple(SassRule(arch.sass_pattern(ref), f"{why} ({ref})") for ref, why in refs)
    forbidden = no_spills(arch) + (SassRule(arch.sass_pattern("op:fallback_mma"),
                                            "an MMA of another generation instead of wgmma (op:fallback_mma)"),)
    return required, forbidden


def kv_tile(head_dim: int) -> int:
    """Keys per K/V tile: 128 keeps S at 64 registers per consumer thread for both head dims."""
    return 128


# How O leaves (knob ``o_store``): ``direct`` (4-byte stores from the accumulator registers) or
# ``tma`` (attention/o_store_tma.cuh): each consumer warpgroup writes its 64 rows of O / l into
# its own ring of 128B-swizzled staging boxes (64 rows x 64 columns x bf16 = 8 KiB), and one of
# its threads stores each box by TMA through a (head dim, seq_q, batch x heads) tensor map.
# The ring holds head dim / 64 boxes (a whole tile's) or as many as fit beside the deepest
# K/V ring, at least one.
O_STORE = "direct"
O_STORES = ("direct", "tma")
O_BOX_COLS = 64
O_BOX_ROWS = 64                 # one consumer warpgroup's rows
O_BOX_BYTES = O_BOX_ROWS * 128
O_STORE_BARRIER0 = 3            # named barriers 3.. (one per consumer warpgroup; 1, 2: ping-pong turns)


def smem_plan(head_dim: int, block_n: int, budget: int, block_m: int = BLOCK_M) -> dict:
    """Byte sizes and the number of K/V stages that fit ``budget`` (None if fewer than 2).
    ``total(stages, slots)`` adds the o_store=tma staging rings (``slots`` boxes per consumer
    warpgroup, after the barriers, 1024-aligned)."""
    q_bytes = block_m * head_dim * 2
    stage_bytes = 2 * block_n * head_dim * 2          # K + V
    groups = block_m // 64
    def barrier_bytes(stages: int) -> int:
        return BARRIER_BYTES * (2 + 3 * stages)       # q_full, q_empty; k_full, v_full, kv_empty per stage

    def total(stages: int, slots: int = 0) -> int:
        base = ALIGN_SLACK + q_bytes + stages * stage_bytes + barrier_bytes(stages)
        if not slots:
            return base
        return -(-(base - ALIGN_SLACK) // 1024) * 1024 + ALIGN_SLACK + groups * slots * O_BOX_BYTES
    stages = MAX_STAGES
    while stages >= 2 and total(stages) > budget:
        stages -= 1
    return {"q_bytes": q_bytes, "stage_bytes": stage_bytes, "stages": stages if stages >= 2 else None,
            "smem_bytes": total(stages), "total": total}


# Knobs (``--set``, porter.kernels.knobs): keys per K/V tile, K/V stages, the ping-pong
# between the two consumer warpgroups, and the persistent grid.
KNOBS = ("consumers", "block_n", "stages", "pingpong", "grid_ctas", "persistent", "o_store")
MAX_CONSUMERS = 3
# Registers a consumer thread holds besides O, S and P (row statistics, addresses, loop state).
OVERHEAD_REGS = 40


def registers_needed(head_dim: int, block_n: int) -> int:
    """Per consumer thread: O (64 x D fp32 / 128 = D/2), S (block_n/2), P as bf16 (block_n/4)."""
    return head_dim // 2 + block_n // 2 + block_n // 4 + OVERHEAD_REGS


def register_split(arch, consumers: int) -> tuple[int, int, int]:
    """(launch, producer, consumer) registers per thread with ``consumers`` warpgroups: the
    launch count of __launch_bounds__(threads, 1), the producer's setmaxnreg.dec and the
    consumers' .inc drawn from the launch pool (granule 8, at most CONSUMER_REGS)."""
    threads = 128 * (1 + consumers)
    launch = min(arch.max_regs_per_thread, arch.regs_per_sm // threads // 8 * 8)
    share = min(256, (launch * threads - PRODUCER_REGS * 128) // (128 * consumers) // 8 * 8)
    # .inc must not lower a thread's count: at least the launch count, rounded up to the granule.
    return launch, PRODUCER_REGS, min(share, max(CONSUMER_REGS, -(-launch // 8) * 8))


def knob_space(arch, head_dim: int, causal: bool, pair: bool = False) -> dict[str, tuple]:
    from porter.kernels import knob_rules as kr

    ns = tuple(n for n in (64, 128, 192, 256) if arch.tensor_core.valid_shape("f16", 64, n))
    consumers = tuple(c for c in range(1, MAX_CONSUMERS + 1) if 128 * (1 + c) <= arch.max_threads_per_block)
    return {"consumers": consumers, "block_n": ns, "stages": tuple(range(2, MAX_STAGES + 1)), "pingpong": (True, False),
            "o_store": O_STORES,
            **{k: v for k, v in kr.schedule_space(arch, 1, 1).items() if k != "group_m"}}


def knobs_of(config) -> dict:
    return {"consumers": config["consumer_warpgroups"], "block_n": config["block_n"], "stages": config["stages"],
            "pingpong": config["pingpong"],
            "grid_ctas": config.get("grid_ctas", config["sm_count"]), "persistent": config.get("persistent", True),
            "o_store": config.get("o_store", O_STORE)}


def make_spec(arch, head_dim: int, causal: bool, knobs=None) -> KernelSpec | Unsupported:
    from porter.kernels import knob_rules as kr

    name = family.spec_name(head_dim, causal)
    variant = family.variant_name(head_dim, causal)
    missing = tuple(f for f in FEATURES if not arch.has(f))
    if missing:
        return Unsupported(family.FAMILY, name, variant, missing,
                           "the wgmma attention mainloop needs warpgroup MMAs, TMA, mbarriers and setmaxnreg")
    knobs = dict(knobs or {})
    if knobs:
        space = knob_space(arch, head_dim, causal)
        kr.check_names(name, knobs, space)
        for knob in ("consumers", "block_n", "pingpong", "o_store"):
            if knob in knobs:
                kr.check_choice(name, knob, knobs[knob], space[knob], "wgmma m64 N of kind f16" if knob == "block_n"
                                else "1 producer + consumer warpgroups within max_threads_per_block" if knob == "consumers"
                                else "O stored from registers, or staged in shared memory and stored by TMA"
                                if knob == "o_store" else "")
        if knobs.get("pingpong") and knobs.get("consumers", CONSUMER_WARPGROUPS) != 2:
            raise kr.fail(name, "pingpong", True, "ping-pong alternates two consumer warpgroups (consumers=2)")
    consumers = knobs.get("consumers", CONSUMER_WARPGROUPS)
    block_m = 64 * consumers
    threads = 128 * (1 + consumers)
    launch, producer_regs, consumer_regs = ((None, PRODUCER_REGS, CONSUMER_REGS) if consumers == CONSUMER_WARPGROUPS
                                            else register_split(arch, consumers))
    if knobs:
        if launch is not None and not producer_regs <= launch <= consumer_regs:
            raise kr.fail(name, "consumers", consumers, f"setmaxnreg needs the producer's {producer_regs} <= the "
                          f"launch count {launch} <= the consumers' {consumer_regs} (regs_per_sm {arch.regs_per_sm})")
        bn = knobs.get("block_n", kv_tile(head_dim))
        if registers_needed(head_dim, bn) > consumer_regs:
            raise kr.fail(name, "block_n" if "block_n" in knobs else "consumers", knobs.get("block_n", consumers),
                          f"O {head_dim // 2} + S {bn // 2} + P {bn // 4} + {OVERHEAD_REGS} overhead = "
                          f"{registers_needed(head_dim, bn)} registers > the {consumer_regs} a consumer thread gets "
                          f"after setmaxnreg ({consumers} consumer warpgroups)")
        if "stages" in knobs:
            kr.check_int(name, "stages", knobs["stages"], 2, MAX_STAGES, "K/V ring depth")
    block_n = knobs.get("block_n", kv_tile(head_dim))
    for n in (block_n, head_dim):
        if not arch.tensor_core.valid_shape("f16", 64, n):
            return Unsupported(family.FAMILY, name, variant, ("wgmma",),
                               f"wgmma has no bf16 m64n{n}k16 shape on {arch.name}")
    o_store = knobs.get("o_store", O_STORE)
    plan = smem_plan(head_dim, block_n, arch.smem_per_block_bytes, block_m)
    if "stages" in knobs and plan["stages"] is not None and knobs["stages"] != plan["stages"]:
        if knobs["stages"] > plan["stages"]:
            raise kr.fail(name, "stages", knobs["stages"],
                          f"does not fit shared memory: Q {plan['q_bytes']} B + {knobs['stages']} x "
                          f"{plan['stage_bytes']} B K/V + barriers + {ALIGN_SLACK} B alignment > "
                          f"smem_per_block_bytes {arch.smem_per_block_bytes} (at most {plan['stages']} stages)")
        plan = dict(plan, stages=knobs["stages"], smem_bytes=plan["total"](knobs["stages"]))
    if o_store == "tma" and plan["stages"] is not None:
        # the rings never cost the K/V ring a stage (the timing model's L1 predicts hd128 at 2 stages
        # ~48% slower): where one box per warpgroup does not fit beside the stages, refuse
        st = plan["stages"]
        slots, fewer = family.fit_o_slots(plan["total"], st, head_dim // O_BOX_COLS, arch.smem_per_block_bytes)
        if slots:
            plan = dict(plan, o_slots=slots, staging_bytes=consumers * slots * O_BOX_BYTES, o_in_q=False,
                        smem_bytes=plan["total"](st, slots))
        elif family.o_staging_in_q(block_m, O_BOX_ROWS, block_m * 128, O_BOX_BYTES):
            # no box fits beside the K/V stages: each consumer warpgroup stages its O in its own
            # rows of the Q buffer (Q box c, rows 64 wg..), freed after the stores read them
            plan = dict(plan, o_slots=head_dim // O_BOX_COLS, staging_bytes=0, o_in_q=True)
        else:
            raise kr.fail(name, "o_store", o_store, f"the O staging boxes ({consumers} x {O_BOX_BYTES} B) do not fit "
                          f"shared memory beside {st} K/V stages: {plan['total'](st, 1)} B > smem_per_block_bytes "
                          f"{arch.smem_per_block_bytes}" + (f" (they fit with --set stages={fewer})" if fewer else ""))
    if plan["stages"] is None:
        return Unsupported(family.FAMILY, name, variant, (),
                           f"Q + 2 K/V stages need {plan['q_bytes'] + 2 * plan['stage_bytes']} B of shared "
                           f"memory; the block budget is {arch.smem_per_block_bytes} B")
    cfg = family.base_config(arch, head_dim, causal, MAINLOOP)
    cfg.update({
        "block_m": block_m,
        "block_n": block_n,
        "stages": plan["stages"],
        "consumer_warpgroups": consumers,
        # The two consumer warpgroups take turns issuing MMAs (named barriers 1, 2),
        # so one's softmax overlaps the other's tensor-core work.
        "pingpong": knobs.get("pingpong", consumers == 2),
        "producer_regs": producer_regs,
        "consumer_regs": consumer_regs,
        "q_bytes": plan["q_bytes"],
        "stage_bytes": plan["stage_bytes"],
        "box_cols": BOX_COLS,
        # TMA boxes the host encodes (cols, rows), all bf16 with 128-byte swizzle.
        "tma_boxes": {"q": [BOX_COLS, block_m], "k": [BOX_COLS, block_n], "v": [BOX_COLS, block_n]},
        "tma_swizzle": "128B",
        # wgmma descriptor templates (start address filled in on the device):
        # Q and K are K-major (rows of 128 B, 8-row groups 1024 B apart); V is the
        # MN-major B of P V: 8-key groups 1024 B apart (SBO), 64-column chunks one
        # TMA box (block_n rows x 128 B) apart (LBO).
        "desc_k_major": enc.c_literal(enc.k_major_swizzled_template(SWIZZLE_BYTES)),
        "desc_v_mn_major": enc.c_literal(enc.encode_smem_descriptor(
            0, block_n * SWIZZLE_BYTES, 8 * SWIZZLE_BYTES, 0, "128B")),
    })
    if o_store == "tma":
        cfg.update(family.o_store_config(O_BOX_COLS, O_BOX_ROWS, plan["o_slots"], O_BOX_BYTES, O_STORE_BARRIER0,
                                         plan["staging_bytes"], in_q=plan["o_in_q"]))
    kr.record_grid_knobs(cfg, name, knobs, arch)
    return KernelSpec(
        family=family.FAMILY, name=name, variant=variant,
        entry=family.entry_name(head_dim, causal, MAINLOOP) + family.o_store_entry_suffix(o_store),
        config=cfg, features=FEATURES,
        sass_required=sass_rules(arch, o_store)[0], sass_forbidden=sass_rules(arch, o_store)[1],
        threads=threads, smem_bytes=plan["smem_bytes"], template=family.TEMPLATE,
    )
