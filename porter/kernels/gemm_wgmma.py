"""GEMM configuration for warpgroup-MMA (wgmma) tensor cores, chosen from the descriptor.

Layout of the kernel (templates/gemm/wgmma.cu.j2): one producer warpgroup (TMA)
and ``CONSUMERS`` = 2 consumer warpgroups, each issuing ``m64 nN kK`` wgmma over
its 64 rows of a 128-row tile, accumulators in registers.

Choices, each from a descriptor figure:
  * MMA kind: the wgmma kind whose formats hold the variant's operand format
    (``tensor_core.kind_formats``), its K from ``mma_shapes``.
  * TILE_K: one 128-byte swizzle row of K (64 bf16, 128 e4m3), so the TMA box
    and the wgmma descriptor use the 128B swizzle with SBO = 1024 B.
  * N: the largest power-of-two N of the kind's m64 shape that (a) a TMA box can
    carry (256 rows), (b) the consumer's register budget can hold as accumulators
    (two copies when promoted, below), and (c) still leaves at least ``MIN_STAGES``
    pipeline stages in shared memory.
  * STAGES: as many (A + B) stages as fit ``smem_per_block_bytes`` after the
    barriers and the 1 KiB alignment slack.
  * Registers: setmaxnreg moves the register file (``regs_per_sm``) from the
    producer (``PRODUCER_REGS``) to the consumers, capped at ``max_regs_per_thread``
    rounded down to setmaxnreg's granule of 8.
  * Accumulation (config ``accumulation``): "tensor-core" (the default, see
    DEFAULT_ACCUMULATION) keeps the whole K sum in the wgmma accumulator; "promoted"
    (``--set accumulation=promoted`` for fp8 variants: Hopper's fp8
    wgmma adds into its accumulator with fewer bits than fp32, about 14 kept per
    the DeepSeek-V3 report) restarts the wgmma chain (scale-d 0) every
    ``promote_every_k`` = TILE_K elements, waits for it, and adds it into a second,
    fp32 register accumulator with FADDs - what cuBLAS (use_fast_accum=False),
    CUTLASS and DeepGEMM do. Two 64 x N fp32 accumulators per consumer thread
    (N/2 registers each) must fit its setmaxnreg budget, which is what bounds N:
    2 x 64 + overhead fits 232 registers, N = 256 would need 296 (N = 192 needs
    exactly 232 - ptxas 13 fits it without spills - but is not a power of two, see
    N above). A third consumer warpgroup (192-row tile) would shrink every thread's
    share of the register pool (512 threads: 152 per consumer thread) below two
    64-register accumulators plus overhead; config ``register_budget`` says so.
  * Cluster: with clusters and TMA multicast (``cluster.max_portable``,
    ``async_copy.tma_multicast``) CLUSTER_M = 2 CTAs computing vertically adjacent
    tiles share B, each loading half of it and multicasting it to both: B's
    L2 -> SM traffic halves (a 128 x 256 tile with K step 64 needs ~85 B of operands
    per 2 x 64 x 256 FLOP, more than L2 delivers to all SMs at full MMA rate).
    M must then be a multiple of CLUSTER_M x TILE_M.
"""

from __future__ import annotations

from porter.errors import PorterError
from porter.kernels import encodings_wgmma as enc
from porter.kernels.base import KernelSpec, SassRule, no_spills

CONSUMERS = 2              # consumer warpgroups per CTA (2 x 64 rows = 128-row tiles)
WARPGROUP = 128            # threads
PRODUCER_REGS = 40         # a TMA-issuing warpgroup needs few registers
MIN_STAGES = 4             # below this the TMA latency is no longer hidden
MAX_STAGES = 8
TMA_BOX_MAX = 256          # cuTensorMapEncodeTiled: each box dimension <= 256 elements
SWIZZLE = "128B"
SWIZZLE_ROW_BYTES = enc.SWIZZLE_BYTES[SWIZZLE]
ALIGN_SLACK = 1024         # dynamic smem base rounded up to the 1024 B swizzle atom
GROUP_M_TILES = 8          # tile-rows per L2 group in the persistent walk
CLUSTER_M = 2              # CTAs per cluster along M sharing B, where the descriptor allows
# The epilogue stages C through shared memory in chunks of 64 bf16 columns (one
# 128-byte row), so N must be a multiple of it.
EPILOGUE_COLS = 64
# Registers a consumer needs besides its accumulators (addresses, loop state, epilogue).
CONSUMER_OVERHEAD_REGS = 40
# How C leaves (knob ``epilogue``): "staged" (the default: each 64-column chunk written into a
# swizzled staging tile, read back by the warpgroup and stored with 16-byte st.global) or "tma"
# (the chunk written into one of two staging tiles laid out as C's tensor map's 128B swizzle,
# fenced to the async proxy and stored by one thread's cp.async.bulk.tensor; the warpgroup goes
# on while the TMA reads the tile, and the other tile takes the next chunk: fast.cu's kernel 11,
# CUTLASS's TMA-store epilogue).
EPILOGUES = ("staged", "tma")
EPILOGUE = "staged"
EPILOGUE_BUFFERS = {"staged": 1, "tma": 2}    # staging tiles per consumer warpgroup

ELEMENT_BYTES = {"bf16": 2, "f16": 2, "e4m3": 1, "e5m2": 1}

ACCUMULATIONS = ("promoted", "tensor-core")
# Variant features whose wgmma accumulates in the tensor core with less than fp32
# precision (fp8: about 14 bits kept, DeepSeek-V3 report section 3.3.2), so the
# default is to promote into fp32 registers every interval.
REDUCED_PRECISION_ACCUMULATION = ("fp8",)


def _kind_for(arch, fmt: str) -> str:
    kinds = arch.tensor_core.kinds_for_format(fmt)
    if not kinds:
        raise PorterError(f"arch {arch.name}: no wgmma kind takes {fmt} operands (tensor_core.kinds)")
    return kinds[0]


THREADS = WARPGROUP * (1 + CONSUMERS)


def launch_registers(arch, consumers: int = CONSUMERS) -> int:
    """Registers per thread ptxas allocates at launch under __launch_bounds__(threads, 1):
    the register file split evenly, rounded down to the allocation granule of 8, capped."""
    threads = WARPGROUP * (1 + consumers)
    return min(arch.max_regs_per_thread, arch.regs_per_sm // threads // 8 * 8)


def _consumer_share(arch, consumers: int) -> int:
    """Registers per consumer thread after the producer's setmaxnreg.dec, drawn from the
    launch pool of a CTA with ``consumers`` consumer warpgroups (granule 8, cap 256)."""
    threads = WARPGROUP * (1 + consumers)
    pool = launch_registers(arch, consumers) * threads
    return min((pool - PRODUCER_REGS * WARPGROUP) // (consumers * WARPGROUP), 256) // 8 * 8


def _register_split(arch) -> tuple[int, int]:
    """(producer, consumer) registers per thread after setmaxnreg.

    setmaxnreg.inc only draws on the CTA's register pool, which holds what the CTA was
    given at launch (launch_registers x THREADS) - not the SM's whole register file. A
    split computed from ``regs_per_sm`` can ask for more than the producer's .dec frees
    (e.g. regs_per_sm 32768: launch 80 / thread, pool 30720, but 40 x 128 + 104 x 256 =
    31744), and then the consumers' .inc blocks forever. So the split is taken from the
    launch pool.
    """
    launch = launch_registers(arch)
    consumer = _consumer_share(arch, CONSUMERS)
    if PRODUCER_REGS > launch or consumer < launch:
        raise PorterError(f"arch {arch.name}: {arch.regs_per_sm} registers per SM give {launch} per thread at "
                          f"launch; setmaxnreg needs the producer's {PRODUCER_REGS} <= {launch} <= the "
                          f"consumers' {consumer} (regs_per_sm / max_regs_per_thread)")
    return PRODUCER_REGS, consumer


def accumulator_registers(mma_n: int, accumulation: str) -> int:
    """fp32 accumulator registers per consumer thread: N/2 for one m64nN f32 fragment,
    twice that when the wgmma chain's fragment is promoted into a second one."""
    return (2 if accumulation == "promoted" else 1) * (mma_n // 2)


def register_note(arch, mma_n: int, consumer_regs: int, accumulation: str, consumers: int = CONSUMERS) -> str:
    """Why the tile is what it is, in registers (recorded in spec.config)."""
    need = accumulator_registers(mma_n, accumulation) + CONSUMER_OVERHEAD_REGS
    copies = "2 x" if accumulation == "promoted" else "1 x"
    note = (f"{copies} {mma_n // 2} fp32 accumulator registers + {CONSUMER_OVERHEAD_REGS} overhead = {need} "
            f"<= {consumer_regs} per consumer thread after setmaxnreg")
    if consumers != CONSUMERS:
        return note + f" ({consumers} consumer warpgroups, set by a knob)"
    if accumulation == "promoted":
        if 2 * mma_n <= TMA_BOX_MAX:  # the next power of two up
            wider = accumulator_registers(2 * mma_n, accumulation) + CONSUMER_OVERHEAD_REGS
            note += f"; N={2 * mma_n} would need {wider}"
        extra = _consumer_share(arch, CONSUMERS + 1)
        note += (f"; {CONSUMERS + 1} consumer warpgroups would leave {extra} per consumer thread "
                 f"({'fits' if extra >= need else 'too few'}), so {CONSUMERS} consumers")
    return note


def _sass_rules(arch, kind: str, ptx_type: str, mma_n: int, mma_k: int):
    """Required and forbidden SASS, every spelling read from the descriptor."""
    def rule(ref: str, why: str, **fill) -> SassRule:
        return SassRule(arch.sass_pattern(ref, **fill), f"{why} ({ref})")

    # The exact shape proves the chosen N and the operand types reached the SASS
    # (sass_modifiers.shape fills M, N, K and the operand type into the kind's opcode).
    required = [rule(f"kind:{kind}/shape", f"wgmma m64n{mma_n}k{mma_k} {ptx_type} main loop",
                     m=64, n=mma_n, k=mma_k, a=ptx_type.upper()),
                rule("op:tma_load", "TMA tile loads of A and B"),
                rule("mbarrier", "mbarrier ring synchronisation"),
                rule("setmaxnreg", "setmaxnreg register reallocation between producer and consumers")]
    forbidden = list(no_spills(arch)) + [rule("op:fallback_mma", "an MMA of another generation instead of wgmma")]
    return tuple(required), tuple(forbidden)


# The default accumulation of every variant, fp8 included (issue 17 item 5): "tensor-core"
# (cuBLASLt's FAST_ACCUM mode), because porter's timing model predicts it faster. Promoted
# fp8 holds two fragments, so the consumers' 232 registers bound its tile to 128 x 128
# (128 x 256 would need 296), and that tile is bound by shared-memory operand reads
# (predicted 1298 TFLOP/s at 8192^3 on H200, 827 us of smem against 662 us of tensor work);
# one fragment takes 128 x 256, tensor-bound (predicted 1620). The precision this gives up
# (about 14 accumulator bits, see REDUCED_PRECISION_ACCUMULATION) is the fast-accumulation
# tolerance policy's (validation/tolerance.py "fp8.fast-accum"); accumulation=promoted keeps
# DeepGEMM's fp32 promotion, and the device check's A/B row measures both.
DEFAULT_ACCUMULATION = "tensor-core"


def default_accumulation(variant) -> str:
    """The default accumulation (DEFAULT_ACCUMULATION) for ``variant``; variants with reduced-
    precision wgmma accumulation (REDUCED_PRECISION_ACCUMULATION) are judged by the
    fast-accumulation tolerance policy when left at it."""
    return DEFAULT_ACCUMULATION


# Knobs (``--set``, porter.kernels.knobs): every choice above, overridable. A knob left out
# is chosen as described; one given is held to the same budgets.
KNOBS = ("tile_n", "consumers", "stages", "cluster_m", "accumulation", "promote_every_k",
         "epilogue", "group_m", "grid_ctas", "persistent")
MIN_KNOB_STAGES = 2        # the ring needs a stage in flight while one is read
MAX_CONSUMERS = 4          # 1 producer + 4 consumers = 640 threads, 1024 at most per block


def _legal_n(arch, kind: str, cluster_m: int = 1) -> tuple[int, ...]:
    """wgmma N values the kernel can take: one m64 shape's N (``mma_shapes``), a whole number
    of 64-column epilogue chunks, one TMA box (<= 256 rows), and B slices of whole 1024-byte
    swizzle atoms across the cluster (8 rows x 128 B)."""
    ns = {n for s in arch.tensor_core.mma_shapes[kind] if s.cta_group == 1 for n in s.n_values}
    return tuple(sorted(n for n in ns if n % EPILOGUE_COLS == 0 and n <= TMA_BOX_MAX and (n // cluster_m) % 8 == 0
                        and n % cluster_m == 0))


def _legal_clusters(arch) -> tuple[int, ...]:
    """CTAs per cluster along M: 1, and powers of two up to ``cluster.max_portable`` where the
    descriptor has clusters and TMA multicast."""
    if not (arch.has("clusters") and arch.tma_multicast):
        return (1,)
    out, c = [1], 2
    while c <= arch.cluster.max_portable:
        out.append(c)
        c *= 2
    return tuple(out)


def _legal_consumers(arch) -> tuple[int, ...]:
    return tuple(c for c in range(1, MAX_CONSUMERS + 1) if WARPGROUP * (1 + c) <= arch.max_threads_per_block)


def knob_space(arch, variant, pair: bool = False) -> dict[str, tuple]:
    """Each knob's legal values on ``arch`` (combinations are checked by make_spec)."""
    fmt = variant.a_format
    kind = _kind_for(arch, fmt)
    tile_k = SWIZZLE_ROW_BYTES // ELEMENT_BYTES[fmt]
    clusters = _legal_clusters(arch)
    default_cluster = CLUSTER_M if CLUSTER_M in clusters else 1
    from porter.kernels import knob_rules

    return {
        "tile_n": _legal_n(arch, kind),
        "consumers": _legal_consumers(arch),
        "stages": tuple(range(MIN_KNOB_STAGES, MAX_STAGES + 1)),
        "cluster_m": clusters,
        "accumulation": ACCUMULATIONS,
        # A chain spans whole stages (its wait also frees them): multiples of TILE_K.
        "promote_every_k": (0, tile_k, 2 * tile_k, 4 * tile_k),
        "epilogue": EPILOGUES,
        "tile_order": knob_rules.TILE_ORDERS,
        **knob_rules.schedule_space(arch, default_cluster, max(1, GROUP_M_TILES // default_cluster)),
    }


def knobs_of(config) -> dict:
    """The knob values a spec's config holds (what ``default_knobs`` reports)."""
    return {"tile_n": config["tile_n"], "consumers": config["consumers"], "stages": config["stages"],
            "cluster_m": config["cluster_m"], "accumulation": config["accumulation"],
            "promote_every_k": config["promote_every_k"], "epilogue": config.get("epilogue_mode", EPILOGUE),
            "group_m": config["group_m"],
            "grid_ctas": config["grid_ctas"], "persistent": config.get("persistent", True),
            "tile_order": config.get("tile_order", "m")}


def make_spec(arch, variant, pair: bool, accumulation: str | None = None, knobs=None) -> KernelSpec:
    """The wgmma KernelSpec of ``variant`` (a gemm.GemmVariant) on ``arch``.

    ``accumulation``: "promoted" (fp32 register accumulator fed every TILE_K by a
    restarted wgmma chain) or "tensor-core" (the whole K in the wgmma accumulator);
    None takes ``default_accumulation(variant)``. ``knobs``: overrides of the choices
    (``KNOBS``; porter.kernels.knobs), each checked against the budgets.
    """
    from porter.kernels import gemm_variants as gemm  # the variant table and shared naming
    from porter.kernels import knob_rules as kr

    if pair:
        raise PorterError(f"{gemm.spec_name(variant, pair)}: the wgmma path has no CTA-pair MMA "
                          "(needs the cta_pair feature); gemm.variants reports it Unsupported")
    if variant.block_scale:
        raise PorterError(f"{variant.variant}: block-scaled MMA is not a wgmma kind")
    name = gemm.spec_name(variant, pair)
    knobs = kr.expand_tile(name, dict(knobs or {}), "tile_m", "tile_n")
    if "tile_m" in knobs:   # tile_m is a spelling of the consumer count: 64 rows per warpgroup
        tm = knobs.pop("tile_m")
        if type(tm) is not int or tm % 64 or (knobs.get("consumers", tm // 64) != tm // 64):
            raise kr.fail(name, "tile_m", tm, "the wgmma tile has 64 rows per consumer warpgroup "
                          "(tile_m = 64 x consumers)")
        knobs["consumers"] = tm // 64
    if knobs:
        kr.check_names(name, knobs, knob_space(arch, variant, pair))
    if "accumulation" in knobs:
        accumulation = knobs["accumulation"]
    elif (knobs.get("promote_every_k") and accumulation is None
          and set(variant.features) & set(REDUCED_PRECISION_ACCUMULATION)):
        # A promotion interval asks for promotion where it means something (a reduced-
        # precision accumulator): the default (tensor-core) never promotes.
        accumulation = "promoted"
    accumulation = accumulation or default_accumulation(variant)
    if accumulation not in ACCUMULATIONS:
        raise PorterError(f"{variant.variant}: accumulation {accumulation!r}; use one of {', '.join(ACCUMULATIONS)}")
    fmt = variant.a_format
    if fmt not in ELEMENT_BYTES:
        raise PorterError(f"{variant.variant}: wgmma path has no element size for {fmt}")
    kind = _kind_for(arch, fmt)
    shapes = [s for s in arch.tensor_core.mma_shapes[kind] if s.cta_group == 1]
    if not shapes:
        raise PorterError(f"arch {arch.name}: tensor_core.kinds.{kind} has no single-CTA shape")
    shape = shapes[0]
    mma_m, mma_k = shape.m, shape.k
    elem = ELEMENT_BYTES[fmt]
    tile_k = SWIZZLE_ROW_BYTES // elem
    if tile_k % mma_k:
        raise PorterError(f"{variant.variant}: TILE_K {tile_k} is not a multiple of the MMA K {mma_k}")
    consumers = knobs.get("consumers", CONSUMERS)
    if "consumers" in knobs:
        kr.check_choice(name, "consumers", consumers, _legal_consumers(arch),
                        f"1 producer + consumers warpgroups of 128 threads within max_threads_per_block "
                        f"{arch.max_threads_per_block}")
    tile_m = consumers * mma_m
    if consumers == CONSUMERS:
        producer_regs, consumer_regs = _register_split(arch)
    else:
        launch, consumer_regs = launch_registers(arch, consumers), _consumer_share(arch, consumers)
        producer_regs = PRODUCER_REGS
        if PRODUCER_REGS > launch or consumer_regs < launch:
            raise kr.fail(name, "consumers", consumers,
                          f"{arch.regs_per_sm} registers per SM give {launch} per thread at launch; setmaxnreg "
                          f"needs the producer's {PRODUCER_REGS} <= {launch} <= the consumers' {consumer_regs}")

    epilogue = knobs.get("epilogue", EPILOGUE)
    if "epilogue" in knobs:
        kr.check_choice(name, "epilogue", epilogue, EPILOGUES,
                        "staged: threads store C with st.global; tma: a TMA store per 64-column chunk")
    barrier_bytes_per_stage = 16  # full + empty mbarrier, 8 B each
    # bf16 staging per consumer: one 64 x 64 tile, two with the TMA store (one written while
    # the TMA reads the other)
    epilogue_bytes = consumers * EPILOGUE_BUFFERS[epilogue] * mma_m * EPILOGUE_COLS * 2
    budget = arch.smem_per_block_bytes - ALIGN_SLACK - epilogue_bytes

    def smem_need(n: int, stages: int) -> str:
        return (f"{stages} x ({tile_m} + {n} rows x {tile_k * elem} B + {barrier_bytes_per_stage} B barriers) + "
                f"{epilogue_bytes} B epilogue staging + {ALIGN_SLACK} B alignment = "
                f"{ALIGN_SLACK + epilogue_bytes + stages * ((tile_m + n) * tile_k * elem + barrier_bytes_per_stage)} B "
                f"of smem_per_block_bytes {arch.smem_per_block_bytes}")

    cluster_m = knobs.get("cluster_m")
    if cluster_m is not None:
        kr.check_choice(name, "cluster_m", cluster_m, _legal_clusters(arch),
                        "powers of two up to cluster.max_portable, with clusters and TMA multicast")
    promote = kr.promote_every_k(name, knobs, accumulation, tile_k)
    if "tile_n" in knobs:
        n = knobs["tile_n"]
        kr.check_choice(name, "tile_n", n, _legal_n(arch, kind, cluster_m or 1),
                        f"wgmma m64 N of kind {kind} (mma_shapes), a multiple of the {EPILOGUE_COLS}-column "
                        f"epilogue chunk, <= the {TMA_BOX_MAX}-row TMA box"
                        + (f", in {cluster_m} B slices of whole 8-row swizzle atoms" if (cluster_m or 1) > 1 else ""))
        need = accumulator_registers(n, accumulation) + CONSUMER_OVERHEAD_REGS
        if need > consumer_regs:
            why = (f"{'2 x ' if accumulation == 'promoted' else ''}{n // 2} fp32 accumulator registers + "
                   f"{CONSUMER_OVERHEAD_REGS} overhead = {need} > the {consumer_regs} a consumer thread gets after "
                   f"setmaxnreg ({consumers} consumer warpgroups, regs_per_sm {arch.regs_per_sm})")
            raise kr.fail(name, "consumers" if "consumers" in knobs and "tile_n" not in knobs else "tile_n", n, why)
        stage_bytes = (tile_m + n) * tile_k * elem
        fit = min(MAX_STAGES, budget // (stage_bytes + barrier_bytes_per_stage))
        if "stages" in knobs:
            stages = kr.check_int(name, "stages", knobs["stages"], MIN_KNOB_STAGES, MAX_STAGES,
                                  "the ring depth")
            if stages > fit:
                raise kr.fail(name, "stages", stages, f"does not fit shared memory: {smem_need(n, stages)}")
        elif fit < MIN_KNOB_STAGES:
            raise kr.fail(name, "tile_n", n, f"not even {MIN_KNOB_STAGES} stages fit: {smem_need(n, MIN_KNOB_STAGES)}")
        else:
            stages = fit
        chosen = (n, stages, stage_bytes)
    else:
        chosen = None
        fits_registers = False
        want_stages = knobs.get("stages")
        if want_stages is not None:
            kr.check_int(name, "stages", want_stages, MIN_KNOB_STAGES, MAX_STAGES, "the ring depth")
        for n in sorted((v for s in shapes for v in s.n_values), reverse=True):
            if n > TMA_BOX_MAX or n % EPILOGUE_COLS or n not in _legal_n(arch, kind, cluster_m or 1):
                continue
            # Powers of two only: the kernel has no bounds checks, so N must be a multiple of
            # the tile, and 64 / 128 / 256 divide the N of real workloads (model dims, the
            # 8192^3 bench); 192 would make most of them pad N.
            if n & (n - 1):
                continue
            # m64nN f32: N/2 accumulator registers per thread, twice when promoted.
            if accumulator_registers(n, accumulation) + CONSUMER_OVERHEAD_REGS > consumer_regs:
                continue
            fits_registers = True
            stage_bytes = (tile_m + n) * tile_k * elem
            stages = min(MAX_STAGES, budget // (stage_bytes + barrier_bytes_per_stage))
            if want_stages is not None:
                if stages >= want_stages:
                    chosen = (n, want_stages, stage_bytes)
                    break
                continue
            if stages >= MIN_STAGES:
                chosen = (n, stages, stage_bytes)
                break
        if chosen is None and not fits_registers:
            if knobs:
                raise kr.fail(name, "consumers" if "consumers" in knobs else "accumulation",
                              knobs.get("consumers", accumulation),
                              f"no wgmma N fits the {consumer_regs} registers a consumer thread gets after "
                              f"setmaxnreg with {accumulation} accumulation")
            raise PorterError(f"arch {arch.name}: no wgmma N of {variant.variant} fits {consumer_regs} registers per "
                              f"consumer thread with {accumulation} accumulation ({CONSUMER_OVERHEAD_REGS} besides "
                              f"the accumulators; regs_per_sm {arch.regs_per_sm}); "
                              "use accumulation='tensor-core' (one accumulator)")
        if chosen is None:
            if want_stages is not None:
                raise kr.fail(name, "stages", want_stages, f"no wgmma N leaves room for it: "
                              f"{smem_need(64, want_stages)} at the narrowest tile")
            raise PorterError(f"arch {arch.name}: no wgmma N leaves {MIN_STAGES} stages in "
                              f"{arch.smem_per_block_bytes} B of shared memory for {variant.variant}")
    mma_n, stages, stage_bytes = chosen
    if cluster_m is None:
        cluster_m = CLUSTER_M if (arch.has("clusters") and arch.tma_multicast
                                  and arch.cluster.max_portable >= CLUSTER_M
                                  and (mma_n // CLUSTER_M) % 8 == 0) else 1
    if promote is None:
        promote = tile_k if accumulation == "promoted" else 0
    group_m, grid_ctas, persistent = kr.schedule(name, knobs, arch, cluster_m, max(1, GROUP_M_TILES // cluster_m),
                                                 "rows of cluster units")
    b_box_rows = mma_n // cluster_m
    a_stage, b_stage = tile_m * tile_k * elem, mma_n * tile_k * elem
    smem_bytes = ALIGN_SLACK + epilogue_bytes + stages * (stage_bytes + barrier_bytes_per_stage)
    threads = WARPGROUP * (1 + consumers)
    ptx_type = fmt
    desc_template = enc.k_major_swizzled_template(SWIZZLE_ROW_BYTES, SWIZZLE)
    params = gemm.kernel_params(variant)
    if epilogue == "tma":
        # C's tensor map, encoded over the output buffer ``c`` (which stays in the list, so
        # every path's host code passes the same arguments): after A's and B's maps
        params.insert([p for p, _ in params].index("tma_b") + 1, ("tma_c", "TmaDescriptor"))
    # What the host encodes with cuTensorMapEncodeTiled (dims innermost first).
    tensor_maps = [
        {"param": "tma_a", "operand": "A", "format": fmt, "element_bytes": elem, "dims": ["K", "M"],
         "row_stride_bytes": f"K*{elem}", "box": [tile_k, tile_m], "swizzle": SWIZZLE},
        {"param": "tma_b", "operand": "B", "format": fmt, "element_bytes": elem, "dims": ["K", "N"],
         "row_stride_bytes": f"K*{elem}", "box": [tile_k, b_box_rows], "swizzle": SWIZZLE,
         "multicast": cluster_m > 1},
    ]
    if epilogue == "tma":
        tensor_maps.append({"param": "tma_c", "operand": "C", "format": "bf16", "element_bytes": 2, "dims": ["N", "M"],
                            "row_stride_bytes": "N*2", "box": [EPILOGUE_COLS, mma_m], "swizzle": SWIZZLE,
                            "output": "c"})
    tma_maps = [f"{t['param']}: {t['format']} {t['operand']}[{t['dims'][1]}, {t['dims'][0]}] "
                f"{'K-major' if t['dims'][0] == 'K' else 'row-major'}: dims {{{t['dims'][0]}, {t['dims'][1]}}}, "
                f"row stride {t['row_stride_bytes']} B, box {{{t['box'][0]}, {t['box'][1]}}}, "
                f"swizzle {SWIZZLE}, no interleave, OOB fill none"
                + (f" (box = this CTA's slice of the {mma_n}-row tile, multicast to the cluster)"
                   if t.get("multicast") else "")
                + (f" (over the output {t['output']}: each consumer's 64-column chunks, stored by TMA)"
                   if t.get("output") else "") for t in tensor_maps]
    config = {
        "mainloop": arch.tensor_core.generation,
        "kind": kind,
        "a_format": fmt, "b_format": variant.b_format, "ptx_type": ptx_type,
        "element_bytes": elem,
        "per_tensor_scales": variant.per_tensor_scales,
        "tile_m": tile_m, "tile_n": mma_n, "tile_k": tile_k,
        "mma_m": mma_m, "mma_n": mma_n, "mma_k": mma_k, "k_steps": tile_k // mma_k,
        "consumers": consumers,
        "stages": stages,
        "a_stage_bytes": a_stage, "b_stage_bytes": b_stage,
        "smem_per_stage_bytes": stage_bytes,
        "smem_budget_bytes": arch.smem_per_block_bytes,
        "row_bytes": SWIZZLE_ROW_BYTES,
        "swizzle": SWIZZLE,
        "desc_template": enc.c_literal(desc_template),
        "desc_sbo_bytes": 8 * SWIZZLE_ROW_BYTES,
        "desc_k_step": enc.k_step_increment(mma_k, elem),
        "producer_regs": producer_regs, "consumer_regs": consumer_regs,
        # Registers per thread ptxas may use at launch: the register file split
        # evenly, rounded to the allocation granule; setmaxnreg moves them later.
        "registers_at_launch": launch_registers(arch, consumers),
        "accumulator_regs": accumulator_registers(mma_n, accumulation),
        "accumulation": accumulation,
        # K elements per wgmma chain before it is added into the fp32 accumulator: one
        # stage (TILE_K), so the chain's wait also frees the stage it read. 0: never.
        "promote_every_k": promote,
        "register_budget": register_note(arch, mma_n, consumer_regs, accumulation, consumers),
        # The scheduler walks cluster units (CLUSTER_M tiles along M); group_m counts unit rows.
        "cluster_m": cluster_m,
        "b_slice_rows": b_box_rows,
        "group_m": group_m,
        "grid_ctas": grid_ctas,
        "shape_multiple": [tile_m * cluster_m, mma_n, tile_k],
        "params": params,
        "tma_maps": tma_maps,
        "tensor_maps": tensor_maps,
        "epilogue": ("registers -> alpha * acc -> bf16, staged per 64 x 64 chunk in swizzled smem -> 16-byte "
                     "coalesced st.global" if epilogue == "staged" else
                     "registers -> alpha * acc -> bf16 into one of 2 swizzled 64 x 64 smem tiles per consumer -> "
                     "fence.proxy.async -> one thread's TMA store (bulk group) per chunk"),
        "epilogue_bytes_per_consumer": mma_m * EPILOGUE_COLS * 2,
        "epilogue_bytes": epilogue_bytes,
        "tmem_columns": 0,
    }
    if epilogue != EPILOGUE:        # absent from default specs, whose sources stay byte-identical
        config.update(epilogue_mode=epilogue, epilogue_buffers=EPILOGUE_BUFFERS[epilogue])
    kr.record_knobs(config, name, knobs, persistent)
    required, forbidden = _sass_rules(arch, kind, ptx_type, mma_n, mma_k)
    if epilogue == "tma":
        required += (SassRule(arch.sass_pattern("op:tma_store"),
                              "C stored from the shared-memory staging tiles by TMA (epilogue=tma, op:tma_store)"),)
    if accumulation == "promoted":
        required += (SassRule(arch.sass_pattern("op:fp32_add"),
                              "fp32 promotion of each wgmma chain into the register accumulator (op:fp32_add)"),)
    if cluster_m > 1:
        required += (SassRule(arch.sass_pattern("op:tma_load/multicast"),
                              "B tile shared across the cluster by TMA multicast (op:tma_load/multicast)"),)
    return KernelSpec(
        family=gemm.FAMILY,
        name=gemm.spec_name(variant, pair),
        variant=variant.variant,
        # an epilogue=tma form takes tma_c, so it gets its own symbol (a module, a prepared
        # manifest or the rehearsal driver finding a kernel by its entry never takes it for the
        # default form, whose arguments differ)
        entry=gemm.entry_name(variant, pair, arch.tensor_core.generation) + ("_c_tma" if epilogue == "tma" else ""),
        config=config,
        # The 2-CTA cluster that multicasts B is a feature the kernel relies on too: a
        # target without clusters must show up in the porting plan for gemm.*.
        features=(arch.tensor_core.generation, "tma", "mbarrier", "setmaxnreg") + variant.features
        + (("clusters",) if cluster_m > 1 else ()),
        sass_required=required,
        sass_forbidden=forbidden,
        threads=threads,
        smem_bytes=smem_bytes,
        tmem_columns=0,
        cluster=(cluster_m, 1, 1),
        template=gemm.TEMPLATE,
    )
