"""Attention forward on warp-level tensor cores (mma.sync), FlashAttention-2 style.

Every warp computes (templates/attention/mma_sync.cu.j2): ``WARPS`` warps x ``row_tiles``
m16 row tiles = a ``block_m``-row tile per CTA, persistent over tiles. ``row_tiles`` is the
most (of ``ROW_TILES``) whose O, S and Q registers fit the descriptor's registers per
thread: each K / V fragment a warp reads from shared memory then feeds ``row_tiles`` MMAs,
which halves the shared-memory traffic per MMA at hd64 (2 row tiles, 256-row tiles); hd128
keeps 1 (O alone is 64 registers per row tile). Q is staged in shared memory
once per tile and kept in registers as mma A fragments; K and V stream through a
``stages``-deep ring of ``block_n``-key tiles; S and P stay in registers, O accumulates
in registers, the online softmax uses ex2 with log2(e) folded into the scale. Staging is
TMA where the descriptor has it (``tma`` + ``mbarrier``) and cp.async otherwise.

Kernel parameters (config ``params``), by staging:
  tma:      tma_q, tma_k, tma_v, o, lse, batch, heads_q, heads_kv, seq_q, seq_k, softmax_scale_log2
  cp_async: q, k, v (device pointers, bf16 [B, H, S, D] contiguous), then the same
The masking (bottom-right causal, keys >= seq_k), LSE and GQA contract is the family's
(attention.cu.j2, attention/mask.cuh, attention/softmax.cuh).

Registers per thread (hd128, block_n 64): O 16 x 128 fp32 / 32 lanes = 64, S 16 x 64 / 32
= 32, Q fragments 128 / 4 = 32 bf16x2, plus addresses: under the 255 of one CTA per SM.
"""

from __future__ import annotations

from porter.kernels import attention_variants as family
from porter.kernels.base import KernelSpec, SassRule, Unsupported, no_spills

MAINLOOP = "mma_sync"
WARPS = 8
# (m16 row tiles per warp, keys per K/V tile), preferred first: two row tiles halve the
# shared-memory bytes per MMA; a 32-key tile keeps two row tiles' S within the registers.
TILINGS = ((2, 64), (2, 32), (1, 64))
THREADS = 32 * WARPS
MAX_STAGES = 4
MIN_STAGES = 2
BOX_COLS = 64              # bf16 columns per 128-byte swizzled row box
ALIGN_SLACK = 1024
# Registers a thread holds besides O, S and the Q fragments (P's bf16 pairs, addresses,
# row statistics, loop state).
# Calibrated on ptxas 13.5 (sm_80 / sm_120a): hd128 with one row tile allocates 221-240,
# hd64 with two row tiles and 64 keys 250-255 and spills, so the estimate errs high.
OVERHEAD_REGS = 96
PARAMS_CP_ASYNC = (("q", "const __nv_bfloat16*"), ("k", "const __nv_bfloat16*"), ("v", "const __nv_bfloat16*"))


def staging(arch) -> str:
    """'tma' where the descriptor has TMA and mbarriers, 'cp_async' where it has cp.async, else ''."""
    if arch.has("tma") and arch.has("mbarrier"):
        return "tma"
    return "cp_async" if arch.has("cp_async") else ""


def smem_plan(head_dim: int, block_n: int, budget: int, stage_with: str, block_m: int = 16 * WARPS) -> dict:
    """Byte sizes and the K/V stages that fit ``budget`` (None if fewer than MIN_STAGES)."""
    q_bytes = block_m * head_dim * 2
    stage_bytes = 2 * block_n * head_dim * 2          # K + V

    def total(stages: int) -> int:
        return ALIGN_SLACK + q_bytes + stages * stage_bytes + (8 * (1 + stages) if stage_with == "tma" else 0)

    stages = MAX_STAGES
    while stages >= MIN_STAGES and total(stages) > budget:
        stages -= 1
    return {"q_bytes": q_bytes, "stage_bytes": stage_bytes,
            "stages": stages if stages >= MIN_STAGES else None, "smem_bytes": total(max(stages, MIN_STAGES))}


def registers_needed(head_dim: int, block_n: int, row_tiles: int = 1) -> int:
    """Per thread: O (head_dim / 2), S (block_n / 2) and Q's bf16 pairs (head_dim / 4) per row tile."""
    return row_tiles * (head_dim // 2 + block_n // 2 + head_dim // 4) + OVERHEAD_REGS


def _sass_rules(arch, stage_with: str):
    from porter.kernels.gemm_mma_sync import optional_rule

    required = [SassRule(arch.sass_pattern("kind:f16"), "mma.sync bf16 for S = Q K^T and O += P V (kind:f16)")]
    required += optional_rule(arch, "op:exp2", "softmax exponentials through ex2.approx")
    if stage_with == "tma":
        for ref, why in (("op:tma_load", "Q, K and V streamed by TMA"), ("mbarrier", "mbarrier-completed stages")):
            required.append(SassRule(arch.sass_pattern(ref), f"{why} ({ref})"))
    else:
        required += optional_rule(arch, "cp_async", "Q, K and V staged by cp.async")
        required += optional_rule(arch, "op:cp_async_commit", "one cp.async group per K/V stage")
    return tuple(required), no_spills(arch)


# Knobs (``--set``, porter.kernels.knobs): m16 row tiles per warp, keys per K/V tile, K/V
# stages and the persistent grid, each held to the registers and shared memory above.
KNOBS = ("row_tiles", "block_n", "stages", "grid_ctas", "persistent")
ROW_TILE_VALUES = (1, 2)
BLOCK_N_VALUES = (32, 64, 128)


def knob_space(arch, head_dim: int, causal: bool, pair: bool = False) -> dict[str, tuple]:
    from porter.kernels import knob_rules as kr

    return {"row_tiles": ROW_TILE_VALUES, "block_n": BLOCK_N_VALUES, "stages": tuple(range(MIN_STAGES, MAX_STAGES + 1)),
            **{k: v for k, v in kr.schedule_space(arch, 1, 1).items() if k != "group_m"}}


def knobs_of(config) -> dict:
    return {"row_tiles": config["row_tiles"], "block_n": config["block_n"], "stages": config["stages"],
            "grid_ctas": config.get("grid_ctas", config["sm_count"]), "persistent": config.get("persistent", True)}


def make_spec(arch, head_dim: int, causal: bool, knobs=None) -> KernelSpec | Unsupported:
    from porter.kernels import knob_rules as kr

    knobs = dict(knobs or {})
    name = family.spec_name(head_dim, causal)
    variant = family.variant_name(head_dim, causal)
    stage_with = staging(arch)
    if not stage_with:
        return Unsupported(family.FAMILY, name, variant, ("tma|cp_async",),
                           "the mma.sync attention mainloop stages Q, K and V with TMA or cp.async")
    if not arch.tensor_core.valid_shape("f16", 16, 8) or "bf16" not in arch.tensor_core.kind_formats.get("f16", ()) \
            or arch.tensor_core.k_of("f16") != 16:
        return Unsupported(family.FAMILY, name, variant, ("mma_sync",),
                           f"{arch.name} has no bf16 mma.sync m16n8k16 (tensor_core.kinds.f16)")
    regs = min(arch.max_regs_per_thread, arch.regs_per_sm // THREADS // 8 * 8)
    tilings = TILINGS
    if knobs:
        space = knob_space(arch, head_dim, causal)
        kr.check_names(name, knobs, space)
        for knob in ("row_tiles", "block_n"):
            if knob in knobs:
                kr.check_choice(name, knob, knobs[knob], space[knob])
        if "stages" in knobs:
            kr.check_int(name, "stages", knobs["stages"], MIN_STAGES, MAX_STAGES, "K/V ring depth")
        tilings = [(rt, bn) for rt in ROW_TILE_VALUES for bn in BLOCK_N_VALUES]
        tilings = [t for t in TILINGS if t in tilings] + [t for t in tilings if t not in TILINGS]
        tilings = [(rt, bn) for rt, bn in tilings if knobs.get("row_tiles", rt) == rt and knobs.get("block_n", bn) == bn]
    fits = []
    why_not = ""
    for row_tiles, block_n in tilings:
        need = registers_needed(head_dim, block_n, row_tiles)
        plan = smem_plan(head_dim, block_n, arch.smem_per_block_bytes, stage_with, 16 * row_tiles * WARPS)
        if "stages" in knobs and plan["stages"] is not None and plan["stages"] >= knobs["stages"]:
            want = knobs["stages"]
            plan = dict(plan, stages=want, smem_bytes=ALIGN_SLACK + plan["q_bytes"] + want * plan["stage_bytes"]
                        + (8 * (1 + want) if stage_with == "tma" else 0))
        elif "stages" in knobs and plan["stages"] is not None:
            why_not = why_not or (f"shared memory: Q {plan['q_bytes']} B + {knobs['stages']} x {plan['stage_bytes']} B "
                                  f"K/V > smem_per_block_bytes {arch.smem_per_block_bytes} at row_tiles {row_tiles}, "
                                  f"block_n {block_n} (at most {plan['stages']} stages)")
            continue
        if need > regs:
            why_not = why_not or (f"O, S and Q fragments of {row_tiles} row tile(s) x {block_n} keys need about {need} "
                                  f"registers per thread; {THREADS} threads at one CTA per SM get {regs}")
            continue
        if plan["stages"] is None:
            why_not = why_not or f"shared memory: Q + {MIN_STAGES} K/V stages need {plan['smem_bytes']} B > {arch.smem_per_block_bytes} B"
            continue
        fits = [row_tiles, block_n, need, plan]
        break
    if not fits and knobs:
        knob = next(k for k in ("stages", "block_n", "row_tiles") if k in knobs) if set(knobs) & {"stages", "block_n", "row_tiles"} else None
        if knob:
            raise kr.fail(name, knob, knobs[knob], f"does not fit: {why_not}")
        tilings = TILINGS
    if not fits:
        need = registers_needed(head_dim, TILINGS[-1][1], TILINGS[-1][0])
        if need > regs:
            return Unsupported(family.FAMILY, name, variant, (),
                               f"O, S and Q fragments need about {need} registers per thread; {arch.name} gives {regs}")
        return Unsupported(family.FAMILY, name, variant, (),
                           f"Q + {MIN_STAGES} K/V stages need {plan['smem_bytes']} B of shared memory; "
                           f"the block budget is {arch.smem_per_block_bytes} B")
    row_tiles, block_n, need, plan = fits
    block_m = 16 * row_tiles * WARPS
    cfg = family.base_config(arch, head_dim, causal, MAINLOOP)
    if stage_with == "cp_async":
        cfg["params"] = [list(p) for p in PARAMS_CP_ASYNC] + cfg["params"][3:]
    cfg.update({
        "staging": stage_with,
        "block_m": block_m,
        "row_tiles": row_tiles,
        "block_n": block_n,
        "stages": plan["stages"],
        "warps": WARPS,
        "q_bytes": plan["q_bytes"],
        "stage_bytes": plan["stage_bytes"],
        "box_cols": BOX_COLS,
        # TMA boxes the host encodes (cols, rows), bf16 with the 128-byte swizzle; the
        # cp.async kernel takes plain pointers (config tma_boxes empty).
        "tma_boxes": ({"q": [BOX_COLS, block_m], "k": [BOX_COLS, block_n], "v": [BOX_COLS, block_n]}
                      if stage_with == "tma" else {}),
        "tma_swizzle": "128B",
        "registers_budget": regs,
        "registers_estimate": need,
        "mma": "mma.sync m16n8k16 bf16 -> fp32 (S = Q K^T, O += P V)",
    })
    kr.record_grid_knobs(cfg, name, knobs, arch)
    required, forbidden = _sass_rules(arch, stage_with)
    features = ("mma_sync",) + (("tma", "mbarrier") if stage_with == "tma" else ("cp_async",))
    return KernelSpec(
        family=family.FAMILY, name=name, variant=variant,
        entry=family.entry_name(head_dim, causal, MAINLOOP),
        config=cfg, features=features,
        sass_required=required, sass_forbidden=forbidden,
        threads=THREADS, smem_bytes=plan["smem_bytes"], template=family.TEMPLATE,
    )
