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


def sass_rules(arch) -> tuple[tuple[SassRule, ...], tuple[SassRule, ...]]:
    required = tuple(SassRule(arch.sass_pattern(ref), f"{why} ({ref})") for ref, why in SASS_REQUIRED)
    forbidden = no_spills(arch) + (SassRule(arch.sass_pattern("op:fallback_mma"),
                                            "an MMA of another generation instead of wgmma (op:fallback_mma)"),)
    return required, forbidden


def kv_tile(head_dim: int) -> int:
    """Keys per K/V tile: 128 keeps S at 64 registers per consumer thread for both head dims."""
    return 128


def smem_plan(head_dim: int, block_n: int, budget: int) -> dict:
    """Byte sizes and the number of K/V stages that fit ``budget`` (None if fewer than 2)."""
    q_bytes = BLOCK_M * head_dim * 2
    stage_bytes = 2 * block_n * head_dim * 2          # K + V
    def barrier_bytes(stages: int) -> int:
        return BARRIER_BYTES * (2 + 3 * stages)       # q_full, q_empty; k_full, v_full, kv_empty per stage
    stages = MAX_STAGES
    while stages >= 2 and ALIGN_SLACK + q_bytes + stages * stage_bytes + barrier_bytes(stages) > budget:
        stages -= 1
    total = ALIGN_SLACK + q_bytes + stages * stage_bytes + barrier_bytes(stages)
    return {"q_bytes": q_bytes, "stage_bytes": stage_bytes, "stages": stages if stages >= 2 else None,
            "smem_bytes": total}


# Knobs (``--set``, porter.kernels.knobs): keys per K/V tile, K/V stages, the ping-pong
# between the two consumer warpgroups, and the persistent grid.
KNOBS = ("block_n", "stages", "pingpong", "grid_ctas", "persistent")
# Registers a consumer thread holds besides O, S and P (row statistics, addresses, loop state).
OVERHEAD_REGS = 40


def registers_needed(head_dim: int, block_n: int) -> int:
    """Per consumer thread: O (64 x D fp32 / 128 = D/2), S (block_n/2), P as bf16 (block_n/4)."""
    return head_dim // 2 + block_n // 2 + block_n // 4 + OVERHEAD_REGS


def knob_space(arch, head_dim: int, causal: bool, pair: bool = False) -> dict[str, tuple]:
    from porter.kernels import knob_rules as kr

    ns = tuple(n for n in (64, 128, 192, 256) if arch.tensor_core.valid_shape("f16", 64, n))
    return {"block_n": ns, "stages": tuple(range(2, MAX_STAGES + 1)), "pingpong": (True, False),
            **{k: v for k, v in kr.schedule_space(arch, 1, 1).items() if k != "group_m"}}


def knobs_of(config) -> dict:
    return {"block_n": config["block_n"], "stages": config["stages"], "pingpong": config["pingpong"],
            "grid_ctas": config.get("grid_ctas", config["sm_count"]), "persistent": config.get("persistent", True)}


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
        for knob in ("block_n", "pingpong"):
            if knob in knobs:
                kr.check_choice(name, knob, knobs[knob], space[knob], "wgmma m64 N of kind f16" if knob == "block_n" else "")
        if "block_n" in knobs and registers_needed(head_dim, knobs["block_n"]) > CONSUMER_REGS:
            raise kr.fail(name, "block_n", knobs["block_n"],
                          f"O {head_dim // 2} + S {knobs['block_n'] // 2} + P {knobs['block_n'] // 4} + "
                          f"{OVERHEAD_REGS} overhead = {registers_needed(head_dim, knobs['block_n'])} registers > "
                          f"the {CONSUMER_REGS} a consumer thread gets after setmaxnreg")
        if "stages" in knobs:
            kr.check_int(name, "stages", knobs["stages"], 2, MAX_STAGES, "K/V ring depth")
    block_n = knobs.get("block_n", kv_tile(head_dim))
    for n in (block_n, head_dim):
        if not arch.tensor_core.valid_shape("f16", 64, n):
            return Unsupported(family.FAMILY, name, variant, ("wgmma",),
                               f"wgmma has no bf16 m64n{n}k16 shape on {arch.name}")
    plan = smem_plan(head_dim, block_n, arch.smem_per_block_bytes)
    if "stages" in knobs and plan["stages"] is not None and knobs["stages"] != plan["stages"]:
        if knobs["stages"] > plan["stages"]:
            raise kr.fail(name, "stages", knobs["stages"],
                          f"does not fit shared memory: Q {plan['q_bytes']} B + {knobs['stages']} x "
                          f"{plan['stage_bytes']} B K/V + barriers + {ALIGN_SLACK} B alignment > "
                          f"smem_per_block_bytes {arch.smem_per_block_bytes} (at most {plan['stages']} stages)")
        plan = dict(plan, stages=knobs["stages"], smem_bytes=plan["smem_bytes"]
                    - (plan["stages"] - knobs["stages"]) * (plan["stage_bytes"] + 3 * BARRIER_BYTES))
    if plan["stages"] is None:
        return Unsupported(family.FAMILY, name, variant, (),
                           f"Q + 2 K/V stages need {plan['q_bytes'] + 2 * plan['stage_bytes']} B of shared "
                           f"memory; the block budget is {arch.smem_per_block_bytes} B")
    cfg = family.base_config(arch, head_dim, causal, MAINLOOP)
    cfg.update({
        "block_m": BLOCK_M,
        "block_n": block_n,
        "stages": plan["stages"],
        "consumer_warpgroups": CONSUMER_WARPGROUPS,
        # The two consumer warpgroups take turns issuing MMAs (named barriers 1, 2),
        # so one's softmax overlaps the other's tensor-core work.
        "pingpong": knobs.get("pingpong", CONSUMER_WARPGROUPS == 2),
        "producer_regs": PRODUCER_REGS,
        "consumer_regs": CONSUMER_REGS,
        "q_bytes": plan["q_bytes"],
        "stage_bytes": plan["stage_bytes"],
        "box_cols": BOX_COLS,
        # TMA boxes the host encodes (cols, rows), all bf16 with 128-byte swizzle.
        "tma_boxes": {"q": [BOX_COLS, BLOCK_M], "k": [BOX_COLS, block_n], "v": [BOX_COLS, block_n]},
        "tma_swizzle": "128B",
        # wgmma descriptor templates (start address filled in on the device):
        # Q and K are K-major (rows of 128 B, 8-row groups 1024 B apart); V is the
        # MN-major B of P V: 8-key groups 1024 B apart (SBO), 64-column chunks one
        # TMA box (block_n rows x 128 B) apart (LBO).
        "desc_k_major": enc.c_literal(enc.k_major_swizzled_template(SWIZZLE_BYTES)),
        "desc_v_mn_major": enc.c_literal(enc.encode_smem_descriptor(
            0, block_n * SWIZZLE_BYTES, 8 * SWIZZLE_BYTES, 0, "128B")),
    })
    if knobs:   # the grid (absent by default: the launch takes sm_count) and what was overridden
        _, grid, persistent = kr.schedule(name, knobs, arch, 1, 1)
        cfg["grid_ctas"] = grid
        if not persistent:
            cfg["persistent"] = False
        cfg["knobs"] = {k: kr.show(v) for k, v in sorted(knobs.items())}
    return KernelSpec(
        family=family.FAMILY, name=name, variant=variant,
        entry=family.entry_name(head_dim, causal, MAINLOOP),
        config=cfg, features=FEATURES,
        sass_required=sass_rules(arch)[0], sass_forbidden=sass_rules(arch)[1],
        threads=THREADS, smem_bytes=plan["smem_bytes"], template=family.TEMPLATE,
    )
