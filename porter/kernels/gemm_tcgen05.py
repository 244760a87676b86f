"""GEMM configuration for tcgen05 tensor cores (single-thread MMA into Tensor Memory).

Layout of the kernel (templates/gemm/tcgen05.cu.j2), 6 warps per CTA:
  warp 0      TMA producer (one elected lane) filling a STAGES-deep ring of A/B tiles
              (and, for block-scaled kinds, their scale-factor chunks)
  warp 1      TMEM allocator; one elected lane issues every tcgen05.cp / tcgen05.mma /
              tcgen05.commit (in a CTA pair: only in the even CTA)
  warps 2..5  epilogue: tcgen05.ld of the accumulator lanes of warp % 4, scale, bf16, stage
              64 columns (128 B per row) in the warp's own swizzled shared-memory buffer,
              read back row-contiguously and store whole 128-byte lines of C
The accumulator is double-buffered in TMEM when the columns allow, so the epilogue of
tile i overlaps the MMAs of tile i+1; a single accumulator is handed back right after the
epilogue's last tcgen05.ld, so tile i+1's MMAs still overlap tile i's staging and stores. A persistent grid walks the tiles
(gemm::TileScheduler from templates/gemm.cu.j2).

``schedule=clc`` (descriptors with the cluster_launch_control feature): dynamic persistent
scheduling. The grid is one cluster per tile; a 7th warp (warp 2, the epilogue moves to
warps 3..6) asks cluster launch control to cancel a not-yet-started cluster and hands its
tile to the producer, MMA and epilogue warps through a ring of TILE_SLOTS shared-memory
slots, each guarded by a full / empty mbarrier pair (in a CTA pair the even CTA asks and
writes both CTAs' slots). A CTA that finishes early takes the next tile (greedy), where
the static walk deals tile i to CTA i mod grid.

Choices, each from a descriptor figure:
  * MMA kind: the tensor-core kind whose formats hold the operand format; block-scaled
    variants take the kind listed under ``block_scales.<scheme>.kinds`` (mx ->
    mxf8f6f4, nvfp4 -> mxf4nvf4); the scale vector (1X / 4X) is MMA K / block size.
  * MMA M: the largest M of the kind's shapes for the cta_group (1: 128, pair: 256), so
    each CTA owns 128 accumulator rows = the 128 TMEM lanes.
  * TILE_K: one 128-byte swizzle row of K (64 bf16, 128 e4m3, 256 packed e2m1), i.e.
    four MMAs of 32 bytes of K each per stage.
  * N: the largest legal N (``mma_shapes``) whose accumulator fits ``tmem.columns``
    next to one scale-factor slot per stage - double-buffered where two fit, else one -
    with B's share a TMA box (<= 256 rows) and at least MIN_STAGES stages in shared
    memory. Block-scaled kinds need N a multiple of 128 (scale chunks of 128 rows); with
    N = 256 their scale slots leave room for one accumulator only.
  * STAGES: as many stages as ``smem_per_block_bytes`` holds after barriers, the
    epilogue staging (4 warps x 32 rows x 128 B = 16 KiB) and the 1 KiB alignment slack
    (capped at MAX_STAGES).
"""

from __future__ import annotations

from porter.errors import PorterError
from porter.kernels import block_scale_layout as bsl
from porter.kernels import encodings_tcgen05 as enc
from porter.kernels.base import KernelSpec, SassRule, no_spills

WARPS = 6
THREADS = WARPS * 32
EPILOGUE_WARPS = 4                 # 4 x 32 lanes = the 128 TMEM lanes of one accumulator
PRODUCER_WARP, MMA_WARP, FIRST_EPILOGUE_WARP = 0, 1, 2
SWIZZLE_ROW_BYTES = 128            # 128B swizzle: one row of K per TMA box row
TMA_BOX_MAX = 256
ALIGN_SLACK = 1024                 # dynamic smem base rounded up to the swizzle atom
BARRIER_BYTES = 256                # full/empty per stage, acc full/empty per buffer, TMEM base
MIN_STAGES = 3
MAX_STAGES = 8
# schedule=clc: one more warp (the scheduler), its slots and barriers after the others.
CLC_WARPS = WARPS + 1
CLC_SCHEDULER_WARP = 2
CLC_BARRIER_BYTES = 512
# Tile slots between the scheduler and the warps that read them. Two: the scheduler asks for
# tile r + 2 once every reader has taken tile r + 1 from the slot, i.e. when the epilogue (the
# last reader) finished tile r, while the producer - at most one tile plus the stage ring ahead
# of it - still loads tile r + 1: the try_cancel round trip hides behind that work, and a CTA
# claims no tile earlier than it needs to (the later it claims, the closer to greedy the tail).
CLC_TILE_SLOTS = 2
SCHEDULES = ("static", "clc")
GROUP_M = 8
EPILOGUE_COLUMNS = 32              # tcgen05.ld .32x32b.x32 per step
# Columns staged per chunk: 64 bf16 = 128 B per row, so each read-back store instruction of
# a warp (8 lanes x 16 B per row) writes 4 whole 128-byte lines of C.
EPILOGUE_CHUNK_COLUMNS = 64
EPILOGUE_ROW_BYTES = EPILOGUE_CHUNK_COLUMNS * 2
EPILOGUE_STAGING_BYTES = EPILOGUE_WARPS * 32 * EPILOGUE_ROW_BYTES   # one 32-row chunk per warp
READBACK_STEPS = 32 * EPILOGUE_ROW_BYTES // (32 * 16)                # 16-byte loads per lane per chunk
ELEMENT_BITS = {"bf16": 16, "f16": 16, "e4m3": 8, "e5m2": 8, "e2m1": 4}
# PTX spelling of the operand format in the TMA map comment.
TMA_DTYPE = {16: "BFLOAT16", 8: "UINT8", 4: "UINT8 (two e2m1 per byte, even k in the low nibble)"}
# Device primitive (kernels_src/tcgen05/tcgen05.cuh) that issues each kind.
MMA_PRIMITIVE = {"f16": "mma_f16", "f8f6f4": "mma_f8f6f4",
                 "mxf8f6f4": "mma_mxf8f6f4", "mxf4nvf4": "mma_mxf4nvf4_4x"}
SCALE_SCHEMES = {"mx": bsl.MX_1X, "nvfp4": bsl.NVFP4_4X}


def _pick_kind(arch, variant) -> str:
    from porter.kernels import gemm_variants

    return gemm_variants.pick_kind(arch, variant, lambda k: k in MMA_PRIMITIVE, "tcgen05")


def _mma_m(arch, kind: str, cta_group: int) -> int:
    ms = [s.m for s in arch.tensor_core.mma_shapes[kind] if s.cta_group == cta_group]
    if not ms:
        raise PorterError(f"arch {arch.name}: tensor_core.kinds.{kind} has no cta_group {cta_group} shape")
    m = max(ms)
    if m // cta_group != arch.tmem.lanes:
        raise PorterError(f"arch {arch.name}: kind {kind} M={m} over {cta_group} CTA(s) does not fill "
                          f"the {arch.tmem.lanes} TMEM lanes porter's epilogue maps rows to")
    return m


def _next_pow2(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def _legal_n(arch, kind, mma_m, cta_group, scheme) -> tuple[int, ...]:
    """N values the kernel can take: the kind's N at this M and cta_group (``mma_shapes``), a
    whole number of 64-column epilogue chunks, B's share per CTA a TMA box (<= 256 rows) of
    whole 8-row swizzle atoms, and for block-scaled kinds whole 128-row scale chunks."""
    shapes = [s for s in arch.tensor_core.mma_shapes[kind] if s.m == mma_m and s.cta_group == cta_group]
    ns = sorted({n for s in shapes for n in s.n_values})
    return tuple(n for n in ns if not (n % EPILOGUE_CHUNK_COLUMNS or (n // cta_group) % 8
                                       or n // cta_group > TMA_BOX_MAX or (scheme is not None and n % bsl.CHUNK_ROWS)))


def _choose(arch, kind, mma_m, cta_group, tile_k, elem_bits, scheme, knobs=None, name="", barrier_bytes=BARRIER_BYTES):
    """(N, stages, acc_buffers, layout dict) - the first fit, widest N first, double buffering
    preferred at that N.
    ``knobs`` (tile_n, stages, acc_buffers) fix those choices; each is held to the same
    shared-memory and TMEM budgets, and a value that breaks one is a PorterError naming it."""
    from porter.kernels import knob_rules as kr

    knobs = knobs or {}
    n_values = sorted(_legal_n(arch, kind, mma_m, cta_group, scheme), reverse=True)
    row_bytes = tile_k * elem_bits // 8
    a_bytes = (mma_m // cta_group) * row_bytes
    budget = arch.smem_per_block_bytes - ALIGN_SLACK - barrier_bytes - EPILOGUE_STAGING_BYTES
    if "tile_n" in knobs:
        kr.check_choice(name, "tile_n", knobs["tile_n"], tuple(reversed(n_values)),
                        f"{kind} N at M={mma_m} cta_group::{cta_group} (mma_shapes), whole 64-column epilogue "
                        f"chunks, B's per-CTA rows within a {TMA_BOX_MAX}-row TMA box"
                        + (", whole 128-row scale chunks" if scheme is not None else ""))
        n_values = [knobs["tile_n"]]
    if "acc_buffers" in knobs:
        kr.check_choice(name, "acc_buffers", knobs["acc_buffers"], (1, 2), "accumulators in TMEM")
    if "stages" in knobs:
        kr.check_int(name, "stages", knobs["stages"], MIN_KNOB_STAGES, MAX_STAGES, "the ring depth")
    min_stages = knobs.get("stages", MIN_STAGES)
    why_not = ""     # the reason the last (narrowest) candidate failed: what a knob error names
    # Widest N first, double-buffered where that N allows it: porter's timing model puts the
    # shared-memory port (stage writes + MMA operand reads per FLOP ~ 1/N + 1/M) above the
    # tensor core for every tcgen05 form narrower than 256, and an exposed epilogue costs less
    # than that (block-scaled pair 256 x 256 with one accumulator: predicted 1.39x over
    # 256 x 128 with two at 8192^3 on B200; issue 17 item 2). The epilogue hands the single
    # accumulator back after its last tcgen05.ld, before the stores, so the next tile's MMAs
    # overlap the staging and stores even then.
    for n in n_values:
        for acc_buffers in (knobs["acc_buffers"],) if "acc_buffers" in knobs else (2, 1):
            b_rows = n // cta_group
            sfa = sfb = None
            sf_bytes = sf_cols = 0
            if scheme is not None:
                sfa = bsl.StagePlan(scheme, rows=mma_m // cta_group, stage_k=tile_k)
                sfb = bsl.StagePlan(scheme, rows=n, stage_k=tile_k)   # every CTA stages all of B's scales
                sf_bytes = sfa.smem_bytes + sfb.smem_bytes
                sf_cols = sfa.tmem_columns + sfb.tmem_columns
            b_bytes = b_rows * row_bytes
            stage_bytes = -(-(a_bytes + b_bytes + sf_bytes) // 1024) * 1024
            stages = min(budget // stage_bytes, MAX_STAGES)
            if "stages" in knobs and stages >= knobs["stages"]:
                stages = knobs["stages"]
            if stages < min_stages:
                why_not = (f"shared memory: {min_stages} stages x {stage_bytes} B (tile_n {n}: A {a_bytes} + B "
                           f"{b_bytes} + scales {sf_bytes}, rounded to 1 KiB) + {budget_overhead(barrier_bytes)} B "
                           f"(epilogue staging, barriers, alignment) = "
                           f"{min_stages * stage_bytes + budget_overhead(barrier_bytes)} B > "
                           f"smem_per_block_bytes {arch.smem_per_block_bytes}")
                continue
            # Fewer stages if the scale slots (one per stage) crowd out the accumulators.
            while stages > min_stages and acc_buffers * n + stages * sf_cols > arch.tmem.columns:
                stages -= 1
            if acc_buffers * n + stages * sf_cols > arch.tmem.columns:
                why_not = (f"Tensor Memory: {acc_buffers} x {n} accumulator columns + {stages} scale slots x "
                           f"{sf_cols} = {acc_buffers * n + stages * sf_cols} > tmem.columns {arch.tmem.columns}")
                continue
            tmem_used = acc_buffers * n + stages * sf_cols
            return n, stages, acc_buffers, dict(
                a_stage_bytes=a_bytes, b_stage_bytes=b_bytes,
                sfa_stage_bytes=sfa.smem_bytes if sfa else 0, sfb_stage_bytes=sfb.smem_bytes if sfb else 0,
                sfa_chunks=sfa.chunks if sfa else 0, sfb_chunks=sfb.chunks if sfb else 0,
                sf_k_chunks=sfa.k_chunks if sfa else 0,
                sfa_tmem_columns=sfa.tmem_columns if sfa else 0, sfb_tmem_columns=sfb.tmem_columns if sfb else 0,
                stage_bytes=stage_bytes, tmem_columns_used=tmem_used,
                tmem_columns=max(arch.tmem.alloc_min_columns, _next_pow2(tmem_used)))
    if knobs:   # name the knob the user set that the budget rules out (the most specific first)
        knob = next(k for k in ("stages", "acc_buffers", "tile_n") if k in knobs)
        raise kr.fail(name, knob, knobs[knob], f"does not fit: {why_not}")
    raise PorterError(f"arch {arch.name}: no tcgen05 {kind} tile fits {arch.smem_per_block_bytes} B shared memory "
                      f"and {arch.tmem.columns} TMEM columns with >= {MIN_STAGES} stages")


def budget_overhead(barrier_bytes: int = BARRIER_BYTES) -> int:
    """Shared memory besides the stages: alignment slack, barriers, epilogue staging."""
    return ALIGN_SLACK + barrier_bytes + EPILOGUE_STAGING_BYTES


# Knobs (``--set``, porter.kernels.knobs): the choices above, overridable and held to the
# same budgets. tile_m is the MMA's M (the 128 TMEM lanes per CTA): listed, not free.
KNOBS = ("tile_m", "tile_n", "stages", "acc_buffers", "group_m", "grid_ctas", "persistent", "wait_scope", "schedule")
# The pair form's stage / accumulator-full waits (templates/gemm/tcgen05.cu.j2 says why each
# needs no more): "cta" (the ISA's minimum, the default) or "cluster" (every wait a
# cluster-scope acquire, the form before issue 17 item 4, kept for the GPU visit's A/B).
WAIT_SCOPES = ("cta", "cluster")
MIN_KNOB_STAGES = 2


def knob_space(arch, variant, pair: bool = False) -> dict[str, tuple]:
    from porter.kernels import knob_rules as kr

    cta_group = 2 if pair else 1
    kind = _pick_kind(arch, variant)
    scheme = SCALE_SCHEMES[variant.block_scale] if variant.block_scale else None
    mma_m = _mma_m(arch, kind, cta_group)
    space = {"tile_m": (mma_m,), "tile_n": _legal_n(arch, kind, mma_m, cta_group, scheme),
             "stages": tuple(range(MIN_KNOB_STAGES, MAX_STAGES + 1)), "acc_buffers": (1, 2),
             "tile_order": kr.TILE_ORDERS, **kr.schedule_space(arch, cta_group, GROUP_M)}
    if pair:    # a single CTA's waits see only its own CTA: no scope to choose
        space["wait_scope"] = WAIT_SCOPES
    if arch.has("cluster_launch_control"):
        space["schedule"] = SCHEDULES
    return space


def knobs_of(config) -> dict:
    out = {"tile_m": config["tile_m"], "tile_n": config["tile_n"], "stages": config["stages"],
           "acc_buffers": config["acc_buffers"], "group_m": config["group_m"], "grid_ctas": config["grid_ctas"],
           "persistent": config.get("persistent", True), "tile_order": config.get("tile_order", "m")}
    if "wait_scope" in config:
        out["wait_scope"] = config["wait_scope"]
    if "schedule" in config:
        out["schedule"] = config["schedule"]
    return out


def _sass_rules(arch, kind: str, pair: bool, scale_vec: str = "", clc: bool = False):
    """Required and forbidden SASS, every spelling read from the descriptor
    (``Arch.sass_patterns``): a target that spells a kind or a modifier differently is a
    YAML edit, not a change here."""
    def rule(ref: str, why: str) -> SassRule:
        return SassRule(arch.sass_pattern(ref), f"{why} ({ref})")

    mma = f"kind:{kind}"
    required = [rule(mma, f"tcgen05.mma kind::{kind} main loop")]
    if scale_vec == "scale_vec::4X":
        # NVFP4: ue4m3 scales per 16 elements, scale_vec::4X (also in the pair form).
        required.append(rule(f"{mma}/scale_vec_4x", "scale_vec::4X: NVFP4 ue4m3 scale per 16 elements"))
    if pair:
        required.append(rule("cta_pair", "cta_group::2: one MMA spans the CTA pair"))
        required.append(rule(f"{mma}/pair", "the pair form of this kernel's own MMA"))
        required.append(rule("op:mma_commit/pair/multicast", "commit multicast to both CTAs of the pair"))
    required += [rule("op:tma_load", "TMA tile loads of A and B"),
                 rule("op:tmem_load", "epilogue reads the accumulator with tcgen05.ld"),
                 rule("mbarrier", "mbarrier ring synchronisation"),
                 rule("op:mma_commit", "tcgen05.commit arrives on the stage / accumulator mbarriers")]
    if scale_vec:
        required.append(rule("op:tmem_copy", "tcgen05.cp stages the scale factors into TMEM"))
    if clc:
        required.append(rule("op:clc_try_cancel", "schedule=clc: the scheduler warp's clusterlaunchcontrol.try_cancel"))
    # The coalesced epilogue: 16-byte staging writes and read-backs, 16-byte global stores.
    required += [rule("op:shared_store/width_16b", "epilogue writes its bf16 row units into the staging buffer (16 B)"),
                 rule("op:shared_load/width_16b", "epilogue reads the staged chunk back row-contiguously (16 B)"),
                 rule("op:global_store/width_16b", "epilogue stores whole 128-byte row segments of C, 16 B per lane")]
    forbidden = list(no_spills(arch)) + [
        rule("op:fallback_mma", "an MMA of another generation instead of tcgen05"),
        # C is the only global store: anything narrower than 16 B per lane breaks the full lines.
        rule("op:global_store/!width_16b", "a global store narrower than 16 B (uncoalesced epilogue)"),
    ]
    if not pair:
        forbidden.append(rule(f"{mma}/pair", "a single-CTA kernel must issue cta_group::1"))
    return tuple(required), tuple(forbidden)


def _tma_maps(elem_bits, mma_m, n, cta_group, layout, scheme) -> list[str]:
    """What the host encodes for each tensor map (printed in the kernel's header comment)."""
    dt = TMA_DTYPE[elem_bits]
    k_cols = "K" if elem_bits >= 8 else "K/2"
    box_k = SWIZZLE_ROW_BYTES * 8 // max(elem_bits, 8)
    lines = [
        f"tma_a: A, {dt}, dims {{{k_cols}, M}}, box {{{box_k}, {mma_m // cta_group}}}, 128B swizzle, "
        "row pitch = bytes of one row of A",
        f"tma_b: B, {dt}, dims {{{k_cols}, N}}, box {{{box_k}, {n // cta_group}}}, 128B swizzle",
    ]
    if scheme is not None:
        for op, rows in (("sfa", "M"), ("sfb", "N")):
            lines.append(
                f"tma_{op}: scale factors of {'A' if op == 'sfa' else 'B'} ({scheme.scale_format}, one per "
                f"{scheme.block} K) in porter.kernels.block_scale_layout.to_kernel_layout order, viewed as "
                f"UINT8 dims {{128, {rows}*K/{scheme.block * 128}}}, box {{128, {4 * layout['sf_k_chunks']}}}, "
                "no swizzle")
    return lines


def _warp_roles(clc: bool) -> dict:
    """Warp of each role: the scheduler (schedule=clc) takes warp 2 and the epilogue moves up,
    staying the last four warps (one per TMEM lane quarter, warp % 4)."""
    first_epilogue = FIRST_EPILOGUE_WARP + (1 if clc else 0)
    roles = {"producer": PRODUCER_WARP, "mma": MMA_WARP,
             "epilogue": list(range(first_epilogue, first_epilogue + EPILOGUE_WARPS))}
    if clc:
        roles["scheduler"] = CLC_SCHEDULER_WARP
    return roles


def _schedule(name: str, knobs) -> str:
    """The ``schedule`` knob checked against the launch knobs it replaces: clc launches one
    cluster per tile and lets the hardware keep as many resident as fit, so it takes no
    grid_ctas and is persistent by construction."""
    from porter.kernels import knob_rules as kr

    schedule = knobs.get("schedule", SCHEDULES[0])
    if "schedule" in knobs:
        kr.check_choice(name, "schedule", schedule, SCHEDULES,
                        "static: a persistent grid of sm_count CTAs, tile i to CTA i mod grid; clc: one cluster "
                        "per tile, a CTA that frees takes the next unstarted cluster's tile (cluster launch control)")
    if schedule == "clc":
        if knobs.get("persistent") is False:
            raise kr.fail(name, "schedule", schedule, "clc keeps each CTA's pipeline and TMEM across the tiles it "
                          "takes over (persistent by construction); drop persistent=false")
        if "grid_ctas" in knobs:
            raise kr.fail(name, "schedule", schedule, "clc launches one cluster per tile and the hardware keeps "
                          "as many resident as fit; drop grid_ctas")
    return schedule


def make_spec(arch, variant, pair: bool, knobs=None) -> KernelSpec:
    """The tcgen05 KernelSpec of ``variant``; ``knobs`` override the choices (``KNOBS``)."""
    from porter.kernels import gemm_variants as gemm
    from porter.kernels import knob_rules as kr

    name = gemm.spec_name(variant, pair)
    knobs = kr.expand_tile(name, dict(knobs or {}), "tile_m", "tile_n")
    if knobs:
        space = knob_space(arch, variant, pair)
        kr.check_names(name, knobs, space)
        if "tile_m" in knobs:
            kr.check_choice(name, "tile_m", knobs.pop("tile_m"), space["tile_m"],
                            "the MMA's M: one accumulator row per TMEM lane of each CTA")

    if not (arch.has("tcgen05") and arch.has("tmem")):
        raise PorterError(f"arch {arch.name}: the tcgen05 GEMM path needs the tcgen05 and tmem features")
    cta_group = 2 if pair else 1
    kind = _pick_kind(arch, variant)
    elem_bits = ELEMENT_BITS.get(variant.a_format)
    if elem_bits is None:
        raise PorterError(f"gemm_tcgen05: no element size known for format {variant.a_format!r}")
    mma_k = arch.tensor_core.k_of(kind)
    if mma_k * elem_bits != 256:
        raise PorterError(f"arch {arch.name}: kind {kind} K={mma_k} is not 32 bytes of {variant.a_format}")
    tile_k = SWIZZLE_ROW_BYTES * 8 // elem_bits
    scheme = SCALE_SCHEMES[variant.block_scale] if variant.block_scale else None
    if scheme is not None and (scheme.mma_k != mma_k or scheme.block != variant.scale_block_k):
        raise PorterError(f"arch {arch.name}: kind {kind} K={mma_k} does not match the "
                          f"{variant.block_scale} scheme (block {variant.scale_block_k}, MMA K {scheme.mma_k})")
    mma_m = _mma_m(arch, kind, cta_group)
    clc = _schedule(name, knobs) == "clc"
    barrier_bytes = CLC_BARRIER_BYTES if clc else BARRIER_BYTES
    threads = (CLC_WARPS if clc else WARPS) * 32
    n, stages, acc_buffers, layout = _choose(arch, kind, mma_m, cta_group, tile_k, elem_bits, scheme,
                                             {k: v for k, v in knobs.items() if k in ("tile_n", "stages", "acc_buffers")},
                                             name, barrier_bytes)
    group_m, grid_ctas, persistent = kr.schedule(name, knobs, arch, cta_group, GROUP_M)
    if not arch.tensor_core.valid_shape(kind, mma_m, n, cta_group):
        raise PorterError(f"arch {arch.name}: chosen {kind} shape M={mma_m} N={n} cta_group {cta_group} is not legal")

    mmas_per_stage = tile_k // mma_k
    if scheme is not None:
        sfa_plan = bsl.StagePlan(scheme, rows=mma_m // cta_group, stage_k=tile_k)
        sfb_plan = bsl.StagePlan(scheme, rows=n, stage_k=tile_k)
        idescs, sfa_cols, sfb_cols = [], [], []
        for j in range(mmas_per_stage):
            a_col, a_id = sfa_plan.mma_operand(j)
            b_col, b_id = sfb_plan.mma_operand(j)
            idescs.append(enc.encode_instr_desc(enc.InstrDesc(
                kind, variant.a_format, variant.b_format, m=mma_m, n=n, scale_type=scheme.scale_format,
                sfa_id=a_id, sfb_id=b_id)))
            sfa_cols.append(a_col)
            sfb_cols.append(b_col)
        sfa_chunk_cols = [sfa_plan.tmem_chunk_column(g, kc) for g in range(sfa_plan.row_groups)
                          for kc in range(sfa_plan.k_chunks)]
        sfb_chunk_cols = [sfb_plan.tmem_chunk_column(g, kc) for g in range(sfb_plan.row_groups)
                          for kc in range(sfb_plan.k_chunks)]
    else:
        idescs = [enc.encode_instr_desc(enc.InstrDesc(kind, variant.a_format, variant.b_format, m=mma_m, n=n))] \
            * mmas_per_stage
        sfa_cols = sfb_cols = [0] * mmas_per_stage
        sfa_chunk_cols = sfb_chunk_cols = []

    smem_bytes = ALIGN_SLACK + stages * layout["stage_bytes"] + EPILOGUE_STAGING_BYTES + barrier_bytes
    tile_m = mma_m                     # rows of C per CTA pair (or CTA)
    tx_bytes = layout["a_stage_bytes"] + layout["b_stage_bytes"] + layout["sfa_stage_bytes"] + layout["sfb_stage_bytes"]
    config = {
        "mainloop": arch.tensor_core.generation,
        "kind": kind,
        "a_format": variant.a_format, "b_format": variant.b_format,
        "block_scale": variant.block_scale,
        "scale_format": scheme.scale_format if scheme else "",
        "scale_block_k": scheme.block if scheme else 0,
        "scale_vec": scheme.scale_vec if scheme else "",
        "per_tensor_scales": variant.per_tensor_scales,
        "cta_group": cta_group,
        "mma_m": mma_m, "mma_n": n, "mma_k": mma_k,
        "mma_shape": f"m{mma_m}n{n}k{mma_k} cta_group::{cta_group}",
        "mma_primitive": MMA_PRIMITIVE[kind],
        "mmas_per_stage": mmas_per_stage,
        "tile_m": tile_m, "tile_n": n, "tile_k": tile_k,
        "cta_rows": mma_m // cta_group, "b_rows_per_cta": n // cta_group,
        "tma_k_per_stage": SWIZZLE_ROW_BYTES * 8 // max(elem_bits, 8),
        "stages": stages,
        "stage_tx_bytes": tx_bytes,
        "acc_buffers": acc_buffers,
        "group_m": group_m,
        "grid_ctas": grid_ctas,
        "warps": _warp_roles(clc),
        "epilogue_columns": EPILOGUE_COLUMNS,
        "epilogue_chunk_columns": EPILOGUE_CHUNK_COLUMNS,
        "idesc": [f"0x{w:08X}" for w in idescs],
        "sfa_mma_column": sfa_cols, "sfb_mma_column": sfb_cols,
        "sfa_chunk_column": sfa_chunk_cols, "sfb_chunk_column": sfb_chunk_cols,
        "smem_desc_operand": f"0x{enc.kmajor_sw128_operand_desc():016X}",
        "smem_desc_scale": f"0x{enc.scale_factor_copy_desc():016X}",
        "smem_budget": {
            "per_block": arch.smem_per_block_bytes, "per_stage": layout["stage_bytes"],
            "a_stage": layout["a_stage_bytes"], "b_stage": layout["b_stage_bytes"],
            "sfa_stage": layout["sfa_stage_bytes"], "sfb_stage": layout["sfb_stage_bytes"],
            "stages": stages, "barriers": barrier_bytes, "align_slack": ALIGN_SLACK,
            "epilogue_staging": EPILOGUE_STAGING_BYTES, "epilogue_row": EPILOGUE_ROW_BYTES, "total": smem_bytes,
        },
        "tmem_budget": {
            "columns": arch.tmem.columns, "accumulator": n, "accumulators": acc_buffers,
            "scale_slots": stages if scheme else 0,
            "sfa_per_slot": layout["sfa_tmem_columns"], "sfb_per_slot": layout["sfb_tmem_columns"],
            "used": layout["tmem_columns_used"], "allocated": layout["tmem_columns"],
        },
        # Everything a thread can keep live: 64K registers over 192 (clc: 224) threads, capped.
        "registers_budget": min(arch.regs_per_sm // threads, arch.max_regs_per_thread),
        # The largest live set is an epilogue thread's: ptxas issues the second tcgen05.ld of
        # a chunk while it converts the first (64 f32 live), their bf16 pairs (32), the 64-bit
        # C addresses (16) and staging offsets (16) of the 8 read-back steps, which it hoists
        # out of the chunk loop, and ~24 for loop state and the scale.
        "registers_ceiling": EPILOGUE_CHUNK_COLUMNS + EPILOGUE_CHUNK_COLUMNS // 2 + 2 * READBACK_STEPS
                             + 2 * READBACK_STEPS + 24,
        "params": gemm.kernel_params(variant),
    }
    config["sfa_stage_chunks"] = layout["sfa_chunks"]
    config["sfb_stage_chunks"] = layout["sfb_chunks"]
    config["sf_k_chunks"] = layout["sf_k_chunks"]
    config["tma_maps"] = _tma_maps(elem_bits, mma_m, n, cta_group, layout, scheme)
    if pair:
        config["wait_scope"] = knobs.get("wait_scope", WAIT_SCOPES[0])
        if "wait_scope" in knobs:
            kr.check_choice(name, "wait_scope", knobs["wait_scope"], WAIT_SCOPES,
                            "cta: stage / accumulator-full waits at CTA scope (the ISA's minimum); "
                            "cluster: every wait a cluster-scope acquire (the previous form)")
    if clc:     # absent from static configs, whose sources stay byte-identical
        config["schedule"] = "clc"
        config["tile_slots"] = CLC_TILE_SLOTS
    kr.record_knobs(config, name, knobs, persistent)
    required, forbidden = _sass_rules(arch, kind, pair, scheme.scale_vec if scheme else "", clc)
    features = ("tcgen05", "tmem", "tma", "mbarrier") + tuple(variant.features) + (("cta_pair", "clusters") if pair else ()) \
        + (("cluster_launch_control",) if clc else ())
    return KernelSpec(
        family=gemm.FAMILY, name=gemm.spec_name(variant, pair), variant=variant.variant,
        entry=gemm.entry_name(variant, pair, arch.tensor_core.generation),
        config=config, features=features, sass_required=required, sass_forbidden=forbidden,
        threads=threads, smem_bytes=smem_bytes, tmem_columns=layout["tmem_columns"],
        cluster=(cta_group, 1, 1), template=gemm.TEMPLATE)
