"""GEMM configuration for warp-level tensor cores (mma.sync), chosen from the descriptor.

Layout of the kernel (templates/gemm/mma_sync.cu.j2): every warp computes; WARPS_M x
WARPS_N warps tile a TILE_M x TILE_N CTA tile, each warp a WARP_M x WARP_N block of m16n8
fp32 register accumulators. A STAGES-deep ring of A / B tiles (128-byte rows of K,
XOR-swizzled 16-byte chunks, read with ldmatrix) is filled by TMA where the descriptor
has it (``async_copy.tma`` and ``mbarrier``) and by cp.async otherwise. A persistent
grid walks the tiles with gemm::TileScheduler.

Choices, each from a descriptor figure:
  * MMA kind: the kind whose formats hold the operand format (``tensor_core.kinds``),
    block-scaled variants the kind listed under ``block_scales.<scheme>.kinds``; the kind's
    K must be 32 bytes of the operand (bf16 k16, e4m3 k32, packed e2m1 k64), so every
    kind shares one fragment layout in bytes.
  * TILE_K: one 128-byte row (64 bf16, 128 e4m3, 256 e2m1): four MMA K steps per stage.
  * Warp tile and CTA tile: the first of ``WARP_LAYOUTS`` whose accumulators and
    fragments fit the registers a thread gets at one CTA per SM (``regs_per_sm`` /
    threads, capped at ``max_regs_per_thread``) and whose ring holds ``MIN_STAGES``
    stages in ``smem_per_block_bytes``.
  * STAGES: as many as fit, at most MAX_STAGES.
  * Accumulation: "promoted" for fp8 variants (each k-block's MMAs into a zeroed partial
    accumulator, FADDed into the fp32 one: fp8 mma.sync may keep fewer bits in its
    accumulator), "registers" otherwise; the register budget counts the second copy.
  * Grid: one persistent CTA per SM (``sm_count``), tiles walked in GROUP_M-row groups.

Kernel parameters (config ``params``), by staging:
  tma:      tma_a, tma_b [, sfa, sfb], c, m, n, k, scale_a, scale_b
  cp_async: a, b [, sfa, sfb], c, m, n, k, scale_a, scale_b
a / b are device pointers to the K-major operands (row pitch K * bits / 8 bytes); sfa /
sfb are device pointers to the block scales as row-major [rows, K / block] bytes (the
layout the MMA's per-lane scale words are read from; no host reordering).
"""

from __future__ import annotations

from porter.errors import PorterError
from porter.kernels.base import KernelSpec, SassRule, no_spills

MAINLOOP = "mma_sync"
ROW_BYTES = 128            # one stage row: 128 bytes of K (the TMA 128B-swizzle span)
MMA_K_BYTES = 32           # every kind porter issues reads 32 bytes of K per row
ALIGN_SLACK = 1024         # dynamic smem base rounded up to the 1024-byte swizzle atom
BARRIER_BYTES = 8          # one full mbarrier per stage (TMA staging)
MIN_STAGES = 3
MAX_STAGES = 6
GROUP_M_TILES = 8
TMA_BOX_MAX = 256
# (warps_m, warps_n, warp_m, warp_n), in order of preference: the largest CTA tile first
# (fewer bytes of operands per FLOP), 8 warps so each SM sub-partition has two.
WARP_LAYOUTS = ((2, 4, 64, 64), (2, 4, 64, 32), (2, 2, 64, 32))
# Registers per thread besides the accumulators and one K step's fragments: addresses,
# loop state, the scheduler, the epilogue. Calibrated on ptxas 13.5: the 64 x 64 bf16 warp
# tile (sm_80) allocates 241, the promoted mxfp8 64 x 32 one (sm_120a) 244.
OVERHEAD_REGS = 80
ELEMENT_BITS = {"bf16": 16, "f16": 16, "e4m3": 8, "e5m2": 8, "e2m1": 4}
# TMA element type per operand width (8- and 4-bit operands travel as bytes).
TMA_DTYPE = {16: "BFLOAT16", 8: "UINT8", 4: "UINT8"}
# Device primitive (kernels_src/mma_sync/mma_sync.cuh) per (kind, operand format).
MMA_PRIMITIVE = {("f16", "bf16"): "mma_bf16_16816", ("f8f6f4", "e4m3"): "mma_e4m3_16832",
                 ("mxf8f6f4", "e4m3"): "mma_mxf8_e4m3_16832", ("mxf4nvf4", "e2m1"): "mma_nvf4_16864"}
# Scale words per lane and fragment (mx: one 32-bit word; nvfp4: one 16-byte vector).
SCALE_REGS = {"": 0, "mx": 1, "nvfp4": 4}


def _pick_kind(arch, variant) -> str:
    from porter.kernels import gemm_variants

    return gemm_variants.pick_kind(arch, variant, lambda k: (k, variant.a_format) in MMA_PRIMITIVE, "mma.sync",
                                   " (tensor_core.kinds)")


def staging(arch) -> str:
    """'tma' where the descriptor has TMA and mbarriers, else 'cp_async'."""
    if arch.has("tma") and arch.has("mbarrier"):
        return "tma"
    if arch.has("cp_async"):
        return "cp_async"
    raise PorterError(f"arch {arch.name}: the mma.sync GEMM path stages operands with TMA (tma + mbarrier) "
                      "or cp.async (cp_async); the descriptor claims neither")


def registers_per_thread(arch, threads: int) -> int:
    """What a thread may hold at one CTA per SM: the register file split evenly, capped."""
    return min(arch.max_regs_per_thread, arch.regs_per_sm // threads // 8 * 8)


def register_need(warp_m: int, warp_n: int, block_scale: str, accumulation: str = "registers") -> int:
    """fp32 accumulators (twice when promoted) + one K step's A / B fragments + scale words
    + overhead."""
    mi, ni = warp_m // 16, warp_n // 8
    scale = 2 * SCALE_REGS[block_scale] * (mi + ni)   # loaded for k-block kb while kb - 1 computes
    acc = 4 * mi * ni * (2 if accumulation == "promoted" else 1)
    return acc + 4 * mi + 2 * ni + scale + OVERHEAD_REGS


ACCUMULATIONS = ("promoted", "registers")
# Variant features whose MMAs may add into their accumulator with less than fp32
# precision: fp8 mma.sync has been measured with a 22-bit (FP22) accumulator on sm_89 (the
# SageAttention2 paper); sm_120a's QMMA is not measured, so fp8 variants promote by
# default, as the wgmma path does for Hopper's fp8 wgmma.
REDUCED_PRECISION_ACCUMULATION = ("fp8",)


def default_accumulation(variant) -> str:
    """'promoted' for variants whose MMAs may keep fewer than fp32's bits, else 'registers'."""
    return "promoted" if set(variant.features) & set(REDUCED_PRECISION_ACCUMULATION) else "registers"


def kernel_params(variant, stage_with: str) -> list[tuple[str, str]]:
    """(name, C type) of every kernel parameter, in order (see the module docstring)."""
    operands = ([("tma_a", "TmaDescriptor"), ("tma_b", "TmaDescriptor")] if stage_with == "tma"
                else [("a", "const void*"), ("b", "const void*")])
    scales = [("sfa", "const uint8_t*"), ("sfb", "const uint8_t*")] if variant.block_scale else []
    return operands + scales + [("c", "__nv_bfloat16*"), ("m", "int"), ("n", "int"), ("k", "int"),
                                ("scale_a", "float"), ("scale_b", "float")]


def _layout_fits(arch, variant, stage_with: str, accumulation: str, layout, want_stages=None):
    """(stages, threads, regs, need, why_not) of one warp layout; why_not "" when it fits."""
    warps_m, warps_n, warp_m, warp_n = layout
    threads = 32 * warps_m * warps_n
    tile_m, tile_n = warps_m * warp_m, warps_n * warp_n
    regs = registers_per_thread(arch, threads)
    need = register_need(warp_m, warp_n, variant.block_scale, accumulation)
    stage_bytes = (tile_m + tile_n) * ROW_BYTES + (BARRIER_BYTES if stage_with == "tma" else 0)
    budget = arch.smem_per_block_bytes - ALIGN_SLACK
    stages = min(MAX_STAGES, budget // stage_bytes)
    if threads > arch.max_threads_per_block:
        return stages, threads, regs, need, f"{threads} threads > max_threads_per_block {arch.max_threads_per_block}"
    if max(tile_m, tile_n) > TMA_BOX_MAX:
        return stages, threads, regs, need, f"tile {tile_m}x{tile_n}: a TMA box holds at most {TMA_BOX_MAX} rows"
    if need > regs:
        return stages, threads, regs, need, (
            f"warp tile {warp_m}x{warp_n} needs about {need} registers per thread "
            f"({'2 x ' if accumulation == 'promoted' else ''}accumulators + fragments + {OVERHEAD_REGS} overhead); "
            f"{threads} threads at one CTA per SM get {regs} (regs_per_sm {arch.regs_per_sm})")
    floor = want_stages or MIN_STAGES
    if stages < floor:
        return stages, threads, regs, need, (
            f"{floor} stages x {stage_bytes} B + {ALIGN_SLACK} B alignment = {ALIGN_SLACK + floor * stage_bytes} B "
            f"> smem_per_block_bytes {arch.smem_per_block_bytes}")
    return (want_stages or stages), threads, regs, need, ""


def _choose(arch, variant, stage_with: str, accumulation: str = "registers", knobs=None, name: str = ""):
    """(layout, stages, threads, registers) of the first warp layout that fits; with
    ``knobs`` (tile_m, tile_n, warp_m, warp_n, stages) the first legal layout they allow."""
    from porter.kernels import knob_rules as kr

    knobs = knobs or {}
    layouts = WARP_LAYOUTS if not knobs else [l for l in _layouts(arch) if _matches(l, knobs)]
    tried = []
    first_why = ""
    for layout in layouts:
        stages, threads, regs, need, why = _layout_fits(arch, variant, stage_with, accumulation, layout,
                                                        knobs.get("stages"))
        warps_m, warps_n, warp_m, warp_n = layout
        tried.append(f"{warps_m * warp_m}x{warps_n * warp_n}: {need} of {regs} registers, {stages} stages")
        if not why:
            return layout, stages, threads, regs, need
        first_why = first_why or why
    if knobs:
        if not layouts:
            raise PorterError(f"{name}: --set {' '.join(f'{k}={kr.show(v)}' for k, v in knobs.items())}: no warp "
                              f"layout has them (tile_m = warps_m x warp_m, tile_n = warps_n x warp_n, "
                              f"{MIN_WARPS}..{MAX_WARPS} warps)")
        knob = next(k for k in ("stages", "warp_m", "warp_n", "tile_m", "tile_n", "accumulation") if k in knobs)
        raise kr.fail(name, knob, knobs[knob], f"does not fit: {first_why}")
    raise PorterError(f"arch {arch.name}: no mma.sync GEMM tile of {variant.variant} fits "
                      f"{arch.smem_per_block_bytes} B shared memory with >= {MIN_STAGES} stages and the "
                      f"registers per thread ({'; '.join(tried) or 'no layout within max_threads_per_block'})")


# Knobs (``--set``, porter.kernels.knobs): the CTA tile, the warp tile, the ring depth, the
# accumulation, the epilogue and the tile walk, each held to the chooser's own budgets.
KNOBS = ("tile_m", "tile_n", "warp_m", "warp_n", "stages", "accumulation", "epilogue",
         "group_m", "grid_ctas", "persistent")
TILE_VALUES = (64, 128, 256)
WARP_TILE_VALUES = (32, 64)    # m16 x 2 / 4 rows; n8 x 4 / 8 columns (ldmatrix.x4 loads n8 pairs)
MIN_WARPS, MAX_WARPS = 4, 16
MIN_KNOB_STAGES = 2
EPILOGUES = ("staged", "direct")


def _layouts(arch):
    """Every (warps_m, warps_n, warp_m, warp_n) the template takes, preferred ones first
    (WARP_LAYOUTS, then larger CTA tiles, then larger warp tiles)."""
    rest = []
    for tm in TILE_VALUES:
        for tn in TILE_VALUES:
            for wm in WARP_TILE_VALUES:
                for wn in WARP_TILE_VALUES:
                    layout = (tm // wm, tn // wn, wm, wn)
                    warps = layout[0] * layout[1]
                    if tm % wm or tn % wn or not MIN_WARPS <= warps <= MAX_WARPS or layout in WARP_LAYOUTS:
                        continue
                    if 32 * warps > arch.max_threads_per_block:
                        continue
                    rest.append(layout)
    rest.sort(key=lambda l: (-(l[0] * l[2]) * (l[1] * l[3]), -(l[2] * l[3])))
    return list(WARP_LAYOUTS) + rest


def _matches(layout, knobs) -> bool:
    warps_m, warps_n, warp_m, warp_n = layout
    have = {"tile_m": warps_m * warp_m, "tile_n": warps_n * warp_n, "warp_m": warp_m, "warp_n": warp_n}
    return all(knobs[k] == v for k, v in have.items() if k in knobs)


def knob_space(arch, variant, pair: bool = False) -> dict[str, tuple]:
    from porter.kernels import knob_rules as kr

    tile_k = ROW_BYTES * 8 // ELEMENT_BITS[variant.a_format]

    return {"tile_m": TILE_VALUES, "tile_n": TILE_VALUES, "warp_m": WARP_TILE_VALUES, "warp_n": WARP_TILE_VALUES,
            "stages": tuple(range(MIN_KNOB_STAGES, MAX_STAGES + 1)), "accumulation": ACCUMULATIONS,
            "epilogue": EPILOGUES, "promote_every_k": (0, tile_k, 2 * tile_k, 4 * tile_k), "tile_order": kr.TILE_ORDERS,
            **kr.schedule_space(arch, 1, GROUP_M_TILES)}


def knobs_of(config) -> dict:
    return {k: config[k] for k in ("tile_m", "tile_n", "warp_m", "warp_n", "stages", "accumulation", "epilogue",
                                   "promote_every_k", "group_m", "grid_ctas")} | {
        "persistent": config.get("persistent", True), "tile_order": config.get("tile_order", "m")}


def optional_rule(arch, ref: str, why: str) -> tuple[SassRule, ...]:
    """The rule for ``ref`` where the descriptor spells it (sass_signatures / sass_ops), else
    none: a descriptor without that spelling checks less, it does not fail to load."""
    base = ref[3:] if ref.startswith("op:") else ref
    table = getattr(arch, "sass_ops", {}) if ref.startswith("op:") else arch.sass_signatures
    return (SassRule(arch.sass_pattern(ref), f"{why} ({ref})"),) if table.get(base) else ()


def _sass_rules(arch, kind: str, variant, stage_with: str):
    """What the machine code must show, every pattern read from the descriptor."""
    if not arch.tensor_core.kind_sass.get(kind):
        raise PorterError(f"arch {arch.name}: tensor_core.kinds.{kind}.sass lists no opcode to check")
    required = [SassRule(arch.sass_pattern(f"kind:{kind}"), f"mma.sync kind {kind} main loop (kind:{kind})")]
    # The variant's own features that have signatures prove the operand / scale formats
    # reached the tensor core (e.g. an fp8 signature naming E4M3, block_scale_nvfp4 UE4M3.4X).
    for feature in variant.features:
        required += optional_rule(arch, feature, f"{feature} in the MMA")
    if stage_with == "tma":
        for ref, why in (("op:tma_load", "TMA tile loads of A and B"), ("mbarrier", "mbarrier ring synchronisation")):
            required.append(SassRule(arch.sass_pattern(ref), f"{why} ({ref})"))
    else:
        required += optional_rule(arch, "cp_async", "cp.async operand staging")
        required += optional_rule(arch, "op:cp_async_commit", "one cp.async group per stage")
    return tuple(required), no_spills(arch)


def make_spec(arch, variant, pair: bool, accumulation: str | None = None, knobs=None):
    """The mma.sync KernelSpec of ``variant`` (a gemm.GemmVariant) on ``arch`` (an
    Unsupported naming the staging alternative where the descriptor has neither).

    ``accumulation``: "promoted" (each k-block's MMAs into a zeroed partial accumulator,
    added into the fp32 one with FADDs) or "registers" (every MMA into the fp32
    accumulator); None takes ``default_accumulation(variant)``.
    """
    from porter.kernels import gemm_variants as gemm
    from porter.kernels import knob_rules as kr

    name = gemm.spec_name(variant, pair)
    knobs = kr.expand_tile(name, dict(knobs or {}), "tile_m", "tile_n")
    if knobs:
        space = knob_space(arch, variant, pair)
        kr.check_names(name, knobs, space)
        for knob in ("tile_m", "tile_n", "warp_m", "warp_n", "accumulation", "epilogue"):
            if knob in knobs:
                kr.check_choice(name, knob, knobs[knob], space[knob])
        if "stages" in knobs:
            kr.check_int(name, "stages", knobs["stages"], MIN_KNOB_STAGES, MAX_STAGES, "the ring depth")
        accumulation = knobs.get("accumulation", accumulation)
    accumulation = accumulation or default_accumulation(variant)
    if accumulation not in ACCUMULATIONS:
        raise PorterError(f"{variant.variant}: accumulation {accumulation!r}; use one of {', '.join(ACCUMULATIONS)}")

    if pair:
        raise PorterError(f"{gemm.spec_name(variant, pair)}: the mma.sync path has no CTA-pair MMA "
                          "(needs the cta_pair feature); gemm.variants reports it Unsupported")
    if not arch.has("mma_sync") or arch.tensor_core.generation != MAINLOOP:
        raise PorterError(f"arch {arch.name}: the mma.sync GEMM path needs tensor_core.generation "
                          f"'{MAINLOOP}', not '{arch.tensor_core.generation}'")
    if not (arch.has("tma") and arch.has("mbarrier")) and not arch.has("cp_async"):
        from porter.kernels.base import Unsupported

        return Unsupported(gemm.FAMILY, gemm.spec_name(variant, pair), variant.variant, ("tma|cp_async",),
                           f"{arch.name}: the mma.sync GEMM path stages A and B with TMA (tma + mbarrier) "
                           "or cp.async, and the descriptor claims neither")
    kind = _pick_kind(arch, variant)
    fmt = variant.a_format
    bits = ELEMENT_BITS[fmt]
    mma_k = arch.tensor_core.k_of(kind)
    if mma_k * bits != 8 * MMA_K_BYTES:
        raise PorterError(f"arch {arch.name}: kind {kind} K={mma_k} is not {MMA_K_BYTES} bytes of {fmt}; "
                          "the mma.sync path's fragment layout needs 32 bytes of K per MMA")
    if not arch.tensor_core.valid_shape(kind, 16, 8):
        raise PorterError(f"arch {arch.name}: tensor_core.kinds.{kind} has no m16n8 shape")
    tile_k = ROW_BYTES * 8 // bits
    if variant.block_scale:
        scheme = arch.block_scales[variant.block_scale]
        if scheme.block_size != variant.scale_block_k or scheme.scale_format != variant.scale_format:
            raise PorterError(f"arch {arch.name}: block_scales.{variant.block_scale} is {scheme.scale_format} "
                              f"per {scheme.block_size}; {variant.variant} needs {variant.scale_format} per "
                              f"{variant.scale_block_k}")
        # mx: one ue8m0 per 32-K MMA (scale_vec::1X); nvfp4: four ue4m3 per 64-K MMA (4X).
        if mma_k // variant.scale_block_k != {"mx": 1, "nvfp4": 4}[variant.block_scale]:
            raise PorterError(f"arch {arch.name}: kind {kind} K={mma_k} does not take one scale word of "
                              f"{variant.scale_block_k}-element blocks per MMA")
    stage_with = staging(arch)
    # accumulation among them too: a promoted chain's second accumulator may need a smaller tile
    layout_knobs = {k: v for k, v in knobs.items() if k in ("tile_m", "tile_n", "warp_m", "warp_n", "stages",
                                                             "accumulation")}
    (warps_m, warps_n, warp_m, warp_n), stages, threads, regs, need = _choose(arch, variant, stage_with, accumulation,
                                                                              layout_knobs, name)
    group_m, grid_ctas, persistent = kr.schedule(name, knobs, arch, 1, GROUP_M_TILES)
    promote = kr.promote_every_k(name, knobs, accumulation, tile_k)
    if promote is None:
        promote = tile_k if accumulation == "promoted" else 0
    tile_m, tile_n = warps_m * warp_m, warps_n * warp_n
    stage_bytes = (tile_m + tile_n) * ROW_BYTES
    smem_bytes = ALIGN_SLACK + stages * stage_bytes + (stages * BARRIER_BYTES if stage_with == "tma" else 0)
    params = kernel_params(variant, stage_with)
    # Staged epilogue in as few column slices (passes) as fit one stage, each a whole number of
    # warp columns and of 128-byte lines per row; direct stores where none does.
    passes = next((p for p in (1, 2, 4) if tile_n % p == 0 and tile_m * (tile_n // p) * 2 <= stage_bytes
                   and (tile_n // p) % warp_n == 0 and (tile_n // p) * 2 % 128 == 0), 0)
    epilogue = "staged" if passes else "direct"
    if knobs.get("epilogue") == "staged" and not passes:
        raise kr.fail(name, "epilogue", "staged", f"the {tile_m}x{tile_n} bf16 C tile fits no stage of "
                      f"{stage_bytes} B in 1, 2 or 4 column slices of whole warp columns and 128-byte lines")
    if knobs.get("epilogue") == "direct":
        epilogue, passes = "direct", 0
    elem_desc = TMA_DTYPE[bits] + (" (two e2m1 per byte, even k in the low nibble)" if bits == 4 else "")
    k_cols = {16: "K", 8: "K", 4: "K/2"}[bits]
    box_k = ROW_BYTES // (2 if bits == 16 else 1)   # TMA elements per 128-byte row (bf16 or bytes)
    if stage_with == "tma":
        tensor_maps = [
            {"param": "tma_a", "operand": "A", "dims": [k_cols, "M"], "box": [box_k, tile_m], "swizzle": "128B"},
            {"param": "tma_b", "operand": "B", "dims": [k_cols, "N"], "box": [box_k, tile_n], "swizzle": "128B"},
        ]
        tma_maps = [f"{t['param']}: {t['operand']}, {elem_desc}, dims {{{t['dims'][0]}, {t['dims'][1]}}}, "
                    f"box {{{box_k}, {t['box'][1]}}}, 128B swizzle, no interleave, OOB fill none"
                    for t in tensor_maps]
    else:
        tensor_maps = []
        tma_maps = [f"none: a and b are plain device pointers to {fmt} A[M, K] and B[N, K], K-major, "
                    f"rows {k_cols} x {max(bits, 8) // 8} bytes, 16-byte aligned (cp.async staging)"]
    if variant.block_scale:
        tma_maps.append(f"sfa / sfb: {variant.scale_format} scales, row-major [M, K/{variant.scale_block_k}] / "
                        f"[N, K/{variant.scale_block_k}] bytes, plain device pointers (read into registers)")
    config = {
        "mainloop": arch.tensor_core.generation,
        "kind": kind,
        "a_format": fmt, "b_format": variant.b_format,
        "element_bits": bits,
        "block_scale": variant.block_scale,
        "scale_format": variant.scale_format,
        "scale_block_k": variant.scale_block_k,
        "scale_layout": "row-major [rows, K/block] bytes" if variant.block_scale else "",
        "per_tensor_scales": variant.per_tensor_scales,
        "staging": stage_with,
        "mma_m": 16, "mma_n": 8, "mma_k": mma_k,
        "mma_shape": f"m16n8k{mma_k}",
        "mma_primitive": MMA_PRIMITIVE[(kind, fmt)],
        "warps_m": warps_m, "warps_n": warps_n, "warp_m": warp_m, "warp_n": warp_n,
        "tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k,
        "row_bytes": ROW_BYTES, "k_steps": ROW_BYTES // MMA_K_BYTES,
        "tma_box_k": box_k,
        "stages": stages,
        "stage_bytes": stage_bytes,
        "group_m": group_m,
        "grid_ctas": grid_ctas,
        "swizzle": "128B",
        "registers_budget": regs,
        "registers_estimate": need,
        "register_note": (f"{'2 x ' if accumulation == 'promoted' else ''}{4 * (warp_m // 16) * (warp_n // 8)} "
                          "fp32 accumulators + "
                          f"{4 * (warp_m // 16) + 2 * (warp_n // 8)} fragment registers + scale words + "
                          f"{OVERHEAD_REGS} overhead = {need} <= {regs} per thread at one CTA per SM"),
        "smem_budget": {"per_block": arch.smem_per_block_bytes, "per_stage": stage_bytes, "stages": stages,
                        "barriers": stages * BARRIER_BYTES if stage_with == "tma" else 0,
                        "align_slack": ALIGN_SLACK, "total": smem_bytes},
        # "registers": every MMA adds into the fp32 register accumulator (C is a register
        # operand); "promoted": each k-block's MMAs run into a zeroed partial accumulator
        # that FADDs add into the fp32 one every promote_every_k = TILE_K elements.
        "accumulation": accumulation,
        "promote_every_k": promote,
        # "staged": the C tile goes through the stage its last k-block read (swizzled bf16
        # rows) and out in 16-byte pieces of whole rows (full 128-byte lines), where it fits
        # in one stage; "direct": bf16x2 stores straight from the fragments.
        "epilogue": epilogue,
        "epilogue_passes": passes,
        "params": params,
        "tma_maps": tma_maps,
        "tensor_maps": tensor_maps,
        "tmem_columns": 0,
    }
    kr.record_knobs(config, name, knobs, persistent)
    required, forbidden = _sass_rules(arch, kind, variant, stage_with)
    if accumulation == "promoted":
        required += optional_rule(arch, "op:fp32_add", "fp32 promotion of each k-block's MMAs into the accumulator")
    if epilogue == "staged" and "width_16b" in getattr(arch, "sass_modifiers", {}) \
            and getattr(arch, "sass_ops", {}).get("global_store"):
        # C is the only global store: 16 bytes per lane everywhere, i.e. whole 128-byte lines.
        required += (SassRule(arch.sass_pattern("op:global_store/width_16b"),
                              "staged epilogue: 16-byte stores of whole C rows (op:global_store/width_16b)"),)
        forbidden += (SassRule(arch.sass_pattern("op:global_store/!width_16b"),
                               "a global store narrower than 16 B (uncoalesced epilogue)"),)
    features = ("mma_sync",) + (("tma", "mbarrier") if stage_with == "tma" else ("cp_async",)) \
        + tuple(variant.features)
    return KernelSpec(
        family=gemm.FAMILY, name=gemm.spec_name(variant, pair), variant=variant.variant,
        entry=gemm.entry_name(variant, pair, arch.tensor_core.generation),
        config=config, features=features, sass_required=required, sass_forbidden=forbidden,
        threads=threads, smem_bytes=smem_bytes, tmem_columns=0, cluster=(1, 1, 1), template=gemm.TEMPLATE)
