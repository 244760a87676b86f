"""Attention forward on single-thread tensor cores (tcgen05): S, P and O live in Tensor Memory.

Warp roles (6 warps; one CTA = one 128-row query tile at a time, persistent over tiles):
  warp 0      producer: one elected lane streams Q and the K/V ring with TMA
  warp 1      allocates TMEM; one elected lane issues every tcgen05.mma / tcgen05.commit:
              S(n) = Q K(n)^T (A and B from shared memory) into a double-buffered S,
              then O += P(n-1) V(n-1) with P read from TMEM (the ``[a_tmem]`` form)
  warps 2-5   softmax (warp w owns TMEM lanes 32*(w%4)..+31 = query rows): tcgen05.ld of
              its S row, mask, online softmax in fp32 with ex2, tcgen05.st of P as packed
              bf16, the O correction (tcgen05.ld / scale / tcgen05.st when the row max
              moved), and the epilogue O / l -> bf16, LSE.

Each softmax thread owns one whole query row (TMEM lane = row), so the row max and sum
need no shuffles (the warpgroup-MMA register layout spreads a row over a quad of lanes).
FA4's softmax steps: the row max and sum are tree reductions over ROW_PARTS independent
partials (attention/row_tree.cuh); O and l are rescaled only when a row's max grows by more
than 2^RESCALE_THRESHOLD (knob ``rescale_threshold``; exact final normalisation); a share of
each row's exp2 can run as a polynomial on the FMA units (attention/exp2_poly.cuh, knob
``poly_exp2_share``, off by default: see POLY_EXP2_SHARE).

TMEM column map (128 lanes x 32-bit columns), allocated as the next power of two:
  S0 [0, block_n)  S1 [block_n, 2 block_n)  O [2 block_n, 2 block_n + D)
  P  [2 block_n + D, 2 block_n + D + block_n / 2)   (bf16 pairs: 2 keys per column)
P has its own columns rather than aliasing S, so S(n+2) may be written while the P V of
tile n still reads P(n) without relying on MMA issue order; one P buffer suffices since
the softmax writes P(n) only after P V(n-1) completed (it must rescale O then anyway).

Shared memory: Q tile + ``stages`` x (K tile + V tile) in 128-byte-swizzled TMA boxes of
64 columns, sized to the descriptor's per-block budget, + barriers + the TMEM base slot.

CTA pair (``.pair`` specs, descriptor feature ``cta_pair``): a 2-CTA cluster issues
``cta_group::2`` MMAs with M = 256; each CTA keeps its 128 query rows (Q in its shared
memory, S / P / O in its TMEM, its own softmax warps) and loads HALF of every K tile (B of
Q K^T is split along N = keys) and half of the head-dim columns of every V tile (B of P V
is split along N = head dim), so each CTA streams half the K/V bytes per query row. The
even CTA issues the MMAs; loads complete on its barriers, its commits multicast to both.
V's boxes take the widest swizzle its columns per CTA fill: 128 B (64 bf16) for head dim
128 (and every single-CTA form), 64 B (32 bf16) for the hd64 pair, whose CTAs hold 32 columns
each; the V descriptor's swizzle mode, SBO (8 keys) and K step follow it.

Two Q tiles per CTA (knob ``q_tiles=2``, FA4's structure; attention/tcgen05_2q.cu.j2): 16 warps
- warp 0 producer, warp 1 MMA issuer (warps 2-3 idle: setmaxnreg acts on whole warpgroups),
warpgroups 1 and 2 the softmax of Q tile 0 and 1, warpgroup 3 the correction. TMEM: S_0, S_1,
O_0, O_1 (512 columns at hd128), P_j written into S_j's first block_n / 2 columns; the MMA
issuer takes the Q tiles in turn (P_0 V, S_0, P_1 V, S_1 per K/V tile), so one softmax
warpgroup works while the tensor core runs the other Q tile's MMAs. P is handed over per
32-column chunk (the first chunk's P V runs under the second chunk's exponentials); a softmax
warp whose rows kept their max releases O itself, otherwise the correction warp of its lanes
rescales O in TMEM first; the correction warpgroup stores O / l. K and V of a stage are
released separately (K after the second Q tile's Q K^T, V after its P V). Not the default:
the timing model's L1 predicts it 3-4% faster than one Q tile for the single-CTA hd128 form
and 8% slower for the pair (B200, predicted, not measured; see the README); kept for the
first GPU visit's A/B.
"""

from __future__ import annotations

from porter.kernels import attention_variants as family
from porter.kernels import encodings_tcgen05 as enc
from porter.kernels.base import KernelSpec, SassRule, Unsupported, no_spills
from porter.validation import attention_numerics as an   # the exp2 polynomial the numerics model checks

MAINLOOP = "tcgen05"
FEATURES = ("tcgen05", "tmem", "tma", "mbarrier")
PAIR_FEATURES = ("cta_pair", "clusters")
MMA_KIND = "f16"            # bf16 operands, fp32 accumulators in TMEM
CTA_ROWS = 128              # query rows per CTA = the 128 TMEM lanes = one row per softmax thread
BLOCK_N = 128               # keys per K/V tile (S columns per buffer)
S_BUFFERS = 2               # S(n+1) is computed while the softmax works on S(n)
WARPS = 6
THREADS = 32 * WARPS
PRODUCER_WARP, MMA_WARP, FIRST_SOFTMAX_WARP = 0, 1, 2
SOFTMAX_WARPS = 4
MAX_STAGES = 4
MIN_STAGES = 2
SWIZZLE_BYTES = 128         # TMA box inner extent and the operands' swizzle width (Q, K; V where it fills it)
V_SWIZZLES = (128, 64, 32)  # the widest whose span V's columns per CTA fill in whole rows
BOX_COLS = SWIZZLE_BYTES // 2   # bf16 columns per TMA box
ALIGN_SLACK = 1024          # dynamic smem base rounded up to the swizzle atom
TMEM_CHUNK = 32             # tcgen05.ld / st .32x32b.x32: 32 columns per step
MMA_K = 16                  # kind::f16: 256 bits of K per MMA
# Row max / row sum as tree reductions over this many independent partials (FA4): the
# dependent depth per S row is block_n / ROW_PARTS + log2(ROW_PARTS) instead of block_n.
ROW_PARTS = 8
# O and l are rescaled only when a row's max grows by more than this (in exp2 units, i.e.
# by a factor 2^8 = 256; FA4's figure): P stays <= 256, exact final normalisation. 0 = the
# classic online softmax (rescale on any growth). Knob ``rescale_threshold``.
RESCALE_THRESHOLD = 8
RESCALE_THRESHOLDS = (0, 4, 8)
# Percent of each S row's exponentials computed by a polynomial on the FMA units instead of
# the MUFU (column pairs cp % 8 < share x 8 / 100); knob ``poly_exp2_share``. Default 0: with
# ONE softmax warpgroup the row is latency-bound, not MUFU-bound, and the timing model's L1
# (the timed simulator on this kernel's SASS) predicts 25% at 450 TFLOP/s against 1208 with
# none (B200 hd128 4x16x16x4096x4096, predicted, not measured); FA4's split pays once two
# softmax warpgroups saturate the MUFU. Kept as a knob for the first GPU visit's A/B.
# With two (q_tiles=2) L1 still says no: 25% gives 3120 cycles per K/V tile against 2984 with
# none (B200 hd128, predicted, not measured): the polynomial's issue slots cost more than the
# MUFU time it frees.
POLY_EXP2_SHARE = 0
POLY_EXP2_SHARES = (0, 25, 50, 75, 100)
# 128-row Q tiles per CTA; knob ``q_tiles``. 2 = FA4's structure (attention/tcgen05_2q.cu.j2):
# 16 warps = a load/MMA warpgroup, one softmax warpgroup per Q tile taking turns on the tensor
# core, and a correction warpgroup that rescales O in TMEM and stores it; P written into S's
# own columns so S_0, S_1, O_0, O_1 fill the 512 TMEM columns (hd128).
Q_TILES = 1
Q_TILE_CHOICES = (1, 2)
# The two-Q-tile form's registers per thread (setmaxnreg from the launch count of 512
# threads): the load/MMA warpgroup, each softmax warpgroup (a whole S row of block_n fp32 in
# registers plus a chunk of P), the correction warpgroup (one 32-column O chunk at a time).
REGS_2Q = {"other": 56, "softmax": 184, "correction": 88}
# How O leaves: ``direct`` (each softmax / correction thread stores its row with 16-byte global
# stores) or ``tma`` (knob ``o_store``; attention/o_store_tma.cuh): rows written into a
# 128B-swizzled staging ring in shared memory, one elected thread stores each 64-column box
# by TMA through a (head dim, seq_q, batch x heads) tensor map. The ring holds O_BOX_BYTES
# boxes (128 rows x 128 B); as many as a Q tile round has (head dim / 64 per Q tile), or as
# many as fit beside the deepest K/V ring, at least one.
O_STORE = "direct"
O_STORES = ("direct", "tma")
O_BOX_COLS = 64                 # bf16 columns of one staging box: one 128-byte swizzle row
O_BOX_BYTES = CTA_ROWS * 128
O_STORE_BARRIER = 1             # named barrier among the storing warpgroup (0 is __syncthreads)
# With o_store=tma the two-Q-tile form's register split is ptxas's answer, per CTA group: with
# 56 / 184 / 88 ptxas kept a value live across the setmaxnreg role split in local memory (4-8 B
# of STL / LDL at the dispatch); one CTA takes 64 for the load/MMA warpgroup and 80 for the
# correction, a pair 176 for each softmax warpgroup (its S row needs block_n + 40 = 168) and 104
# for the correction; every form then compiles without local memory (tests/test_attention_o_tma.py).
REGS_2Q_O_TMA = {1: {"other": 64, "correction": 80}, 2: {"softmax": 176, "correction": 104}}
SOFTMAX_ROW_OVERHEAD = 40   # registers beside the S row: addresses, m, l, the partials, a P chunk's share
STAT_SLOTS = 2              # softmax -> correction ring of per-row floats (alpha, then 1 / l)


def v_swizzle_bytes(v_cols: int) -> int | None:
    """The V operand's swizzle: the widest span (bytes) that ``v_cols`` bf16 columns per CTA
    fill in whole rows, so each TMA box row is exactly one swizzle row; None if none does."""
    return next((w for w in V_SWIZZLES if (2 * v_cols) % w == 0), None)


def barrier_count(stages: int, q_tiles: int = 1) -> int:
    """One Q tile: q_full, q_empty; per stage k_full, v_full, kv_empty; s_full per S buffer;
    p_full; pv_done. (No "S read" barrier: the MMA issue order already implies it - see the
    template.) Two: q_full per Q tile, q_empty; per stage k_full, v_full, k_empty, v_empty;
    per Q tile s_full, p_full per P chunk, o_ready, pv_done and the stats ring's full / empty
    per slot."""
    if q_tiles == 1:
        return 2 + 3 * stages + S_BUFFERS + 2
    return q_tiles + 1 + 4 * stages + q_tiles * (5 + 2 * STAT_SLOTS)     # p_full: one per P chunk (<= 2)


def stats_bytes(q_tiles: int) -> int:
    """The two-Q-tile form's softmax -> correction ring: a float per row, slot and Q tile."""
    return 0 if q_tiles == 1 else 4 * q_tiles * STAT_SLOTS * CTA_ROWS


def smem_plan(head_dim: int, block_n: int, budget: int, cta_group: int = 1, q_tiles: int = 1) -> dict:
    """Per-CTA byte sizes and the K/V stages that fit ``budget`` (stages None if fewer than 2).
    In a pair each CTA holds half of every K tile (keys) and half of every V tile (columns).
    ``q_bytes`` is one Q tile's; the CTA holds ``q_tiles`` of them. ``total(stages, slots)``
    adds an o_store=tma staging ring of ``slots`` boxes (after the barriers, 1024-aligned)."""
    q_bytes = CTA_ROWS * head_dim * 2
    stage_bytes = 2 * block_n * head_dim * 2 // cta_group      # K + V

    def total(stages: int, slots: int = 0) -> int:
        base = (ALIGN_SLACK + q_tiles * q_bytes + stages * stage_bytes + stats_bytes(q_tiles)
                + 8 * barrier_count(stages, q_tiles) + 8)   # + TMEM slot
        # the staging ring sits after the barriers, rounded up to the swizzle atom
        return base if not slots else -(-(base - ALIGN_SLACK) // 1024) * 1024 + ALIGN_SLACK + slots * O_BOX_BYTES

    stages = MAX_STAGES
    while stages >= MIN_STAGES and total(stages) > budget:
        stages -= 1
    ok = stages >= MIN_STAGES
    return {"q_bytes": q_bytes, "stage_bytes": stage_bytes, "stages": stages if ok else None,
            "smem_bytes": total(stages if ok else MIN_STAGES), "total": total}


def tmem_plan(head_dim: int, block_n: int, columns: int, min_alloc: int, q_tiles: int = 1) -> dict:
    """Column offsets of S0, S1, O (one per Q tile), P and the power-of-two allocation (per
    CTA, either mode). One Q tile: S0, S1 double-buffer its S, P has its own columns. Two:
    S_j is Q tile j's, P_j lives in S_j's first block_n / 2 columns, O_0 and O_1 follow."""
    s_cols = [i * block_n for i in range(S_BUFFERS)]
    o_col = S_BUFFERS * block_n
    if q_tiles == 1:
        p_col = o_col + head_dim
        used = p_col + block_n // 2                 # P: two bf16 keys per 32-bit column
        o_cols = [o_col]
    else:
        p_col = s_cols[0]
        o_cols = [o_col + j * head_dim for j in range(q_tiles)]
        used = o_cols[-1] + head_dim
    alloc = max(min_alloc, 1)
    while alloc < used:
        alloc *= 2
    return {"s": s_cols, "o": o_cols, "p": p_col, "used": used, "allocated": alloc,
            "fits": alloc <= columns}


def _sass_rules(arch, pair: bool, o_store: str = O_STORE):
    """Required and forbidden SASS, every spelling read from the descriptor."""
    def rule(ref: str, why: str) -> SassRule:
        return SassRule(arch.sass_pattern(ref), f"{why} ({ref})")

    mma = f"kind:{MMA_KIND}"
    required = [
        rule(mma, "tcgen05.mma kind::f16 for S = Q K^T and O += P V"),
        rule("op:tmem_load", "softmax reads S (and O) from Tensor Memory with tcgen05.ld"),
        rule("op:tmem_store", "softmax writes P and the rescaled O to Tensor Memory with tcgen05.st"),
        rule("op:exp2", "softmax exponentials through ex2.approx"),
        rule("op:tma_load", "Q, K and V streamed by TMA"),
        rule("op:mma_commit", "tcgen05.commit signals S ready, stage free and P V done"),
        rule("mbarrier", "mbarrier handshakes between producer, MMA and softmax warps"),
        rule("op:tmem_alloc", "tcgen05.alloc of the S, O and P columns"),
    ]
    if o_store == "tma":
        required.append(rule("op:tma_store", "O stored from the shared-memory staging ring by TMA (o_store=tma)"))
    forbidden = list(no_spills(arch)) + [rule("op:fallback_mma", "an MMA of another generation instead of tcgen05")]
    if pair:
        required += [
            rule("cta_pair", "cta_group::2: one MMA spans the CTA pair"),
            rule(f"{mma}/pair", "both MMAs in the pair form"),
            rule("op:mma_commit/pair/multicast", "commits reach the barriers of both CTAs"),
            rule("op:tma_load/pair", "both CTAs' loads complete on the even CTA's barriers"),
        ]
        # Every tcgen05 op of a kernel must use one cta_group: no single-CTA MMA may remain.
        forbidden.append(rule(f"{mma}/!pair", "a cta_group::1 MMA in a pair kernel"))
    else:
        forbidden.append(rule(f"{mma}/pair", "a single-CTA kernel must issue cta_group::1"))
    return tuple(required), tuple(forbidden)


def make_spec(arch, head_dim: int, causal: bool) -> list[KernelSpec | Unsupported]:
    """The single-CTA spec, plus the CTA-pair spec when the descriptor has CTA pairs."""
    out = [make_one(arch, head_dim, causal, pair=False)]
    if arch.has("cta_pair"):
        out.append(make_one(arch, head_dim, causal, pair=True))
    return out


# Knobs (``--set``, porter.kernels.knobs): keys per K/V tile (S columns, held to the TMEM
# budget), K/V stages and the persistent grid.
KNOBS = ("block_n", "stages", "grid_ctas", "persistent", "rescale_threshold", "poly_exp2_share", "q_tiles",
         "o_store")


def knob_space(arch, head_dim: int, causal: bool, pair: bool = False) -> dict[str, tuple]:
    from porter.kernels import knob_rules as kr

    cta_group = 2 if pair else 1
    ns = tuple(n for n in (64, 128, 192, 256)
               if arch.tensor_core.valid_shape(MMA_KIND, CTA_ROWS * cta_group, n, cta_group) and (n // cta_group) % 8 == 0)
    return {"block_n": ns, "stages": tuple(range(MIN_STAGES, MAX_STAGES + 1)),
            "rescale_threshold": RESCALE_THRESHOLDS,
            "poly_exp2_share": POLY_EXP2_SHARES,
            "q_tiles": Q_TILE_CHOICES,
            "o_store": O_STORES,
            **{k: v for k, v in kr.schedule_space(arch, cta_group, 1).items() if k != "group_m"}}


def knobs_of(config) -> dict:
    return {"block_n": config["block_n"], "stages": config["stages"], "grid_ctas": config["grid_ctas"],
            "persistent": config.get("persistent", True),
            "rescale_threshold": config.get("rescale_threshold_log2", RESCALE_THRESHOLD),
            "poly_exp2_share": round(100 * config.get("poly_exp2_share", POLY_EXP2_SHARE / 100)),
            "q_tiles": config.get("cta_q_tiles", Q_TILES),
            "o_store": config.get("o_store", O_STORE)}


def make_one(arch, head_dim: int, causal: bool, pair: bool, knobs=None) -> KernelSpec | Unsupported:
    from porter.kernels import knob_rules as kr

    knobs = dict(knobs or {})
    suffix = ".pair" if pair else ""
    name = family.spec_name(head_dim, causal, suffix)
    variant = family.variant_name(head_dim, causal)
    cta_group = 2 if pair else 1
    q_tiles = knobs.get("q_tiles", Q_TILES)
    block_m = CTA_ROWS * cta_group * (q_tiles if q_tiles in Q_TILE_CHOICES else 1)
    features = FEATURES + (PAIR_FEATURES if pair else ())
    missing = tuple(f for f in features if not arch.has(f))
    if missing:
        return Unsupported(family.FAMILY, name, variant, missing,
                           "the tcgen05 attention mainloop needs tcgen05 MMAs, Tensor Memory, TMA and mbarriers"
                           + (", and CTA pairs in clusters for .pair" if pair else ""))
    if arch.tmem.lanes != CTA_ROWS:
        return Unsupported(family.FAMILY, name, variant, (),
                           f"the softmax maps one query row to each of {CTA_ROWS} TMEM lanes; "
                           f"the descriptor has {arch.tmem.lanes}")
    v_swizzle = v_swizzle_bytes(head_dim // cta_group)
    if v_swizzle is None:
        return Unsupported(family.FAMILY, name, variant, (),
                           f"each CTA {'of a pair ' if pair else ''}holds {head_dim // cta_group} head-dim columns "
                           f"of V, not whole rows of any swizzle span ({', '.join(f'{w} B' for w in V_SWIZZLES)})")
    if knobs:
        space = knob_space(arch, head_dim, causal, pair)
        kr.check_names(name, knobs, space)
        if "block_n" in knobs:
            kr.check_choice(name, "block_n", knobs["block_n"], space["block_n"],
                            f"kind::{MMA_KIND} N at M={block_m} cta_group::{cta_group}, whole 8-key atoms per CTA")
        if "stages" in knobs:
            kr.check_int(name, "stages", knobs["stages"], MIN_STAGES, MAX_STAGES, "K/V ring depth")
        if "rescale_threshold" in knobs:
            kr.check_choice(name, "rescale_threshold", knobs["rescale_threshold"], RESCALE_THRESHOLDS,
                            "exp2 units of max growth before O is rescaled (0 = on any growth)")
        if "poly_exp2_share" in knobs:
            kr.check_choice(name, "poly_exp2_share", knobs["poly_exp2_share"], POLY_EXP2_SHARES,
                            "percent of each row's exp2 on the FMA units, in quarters of the column pairs")
        if "q_tiles" in knobs:
            kr.check_choice(name, "q_tiles", knobs["q_tiles"], Q_TILE_CHOICES,
                            "128-row Q tiles per CTA: 1, or 2 with a softmax warpgroup each and a correction warpgroup")
        if "o_store" in knobs:
            kr.check_choice(name, "o_store", knobs["o_store"], O_STORES,
                            "O written by each row's thread, or staged in shared memory and stored by TMA")
    block_n = knobs.get("block_n", BLOCK_N)
    mma_m = CTA_ROWS * cta_group             # one MMA covers one Q tile (of the pair)
    for n in (block_n, head_dim):
        if not arch.tensor_core.valid_shape(MMA_KIND, mma_m, n, cta_group):
            return Unsupported(family.FAMILY, name, variant, ("tcgen05",),
                               f"tcgen05 kind::{MMA_KIND} has no M={mma_m} N={n} cta_group::{cta_group} "
                               f"shape on {arch.name}")
    if arch.tensor_core.k_of(MMA_KIND) != MMA_K:
        return Unsupported(family.FAMILY, name, variant, ("tcgen05",),
                           f"kind::{MMA_KIND} K is {arch.tensor_core.k_of(MMA_KIND)}, the template steps {MMA_K}")
    if pair and arch.cluster.max_portable < cta_group:
        return Unsupported(family.FAMILY, name, variant, ("clusters",),
                           f"a CTA pair needs clusters of {cta_group}; portable maximum {arch.cluster.max_portable}")
    tmem = tmem_plan(head_dim, block_n, arch.tmem.columns, arch.tmem.alloc_min_columns, q_tiles)
    what = f"S x {S_BUFFERS} + O + P" if q_tiles == 1 else f"S_j (P_j inside) + O_j for {q_tiles} Q tiles"
    if not tmem["fits"] and knobs.keys() & {"block_n", "q_tiles"}:
        knob = "q_tiles" if q_tiles > 1 and "q_tiles" in knobs else "block_n"
        raise kr.fail(name, knob, knobs.get(knob, block_n), f"Tensor Memory: {what} = {tmem['used']} columns "
                      f"({tmem['allocated']} allocated) > tmem.columns {arch.tmem.columns}")
    threads = THREADS if q_tiles == 1 else 128 * (2 + q_tiles)
    regs = None
    if q_tiles > 1:
        # setmaxnreg budgets: the launch pool of __launch_bounds__(threads, 1), the softmax's
        # whole S row (block_n fp32) with its overhead, every warpgroup within the pool
        launch = min(arch.max_regs_per_thread, arch.regs_per_sm // threads // 8 * 8)
        regs = dict(REGS_2Q, **(REGS_2Q_O_TMA[cta_group] if knobs.get("o_store") == "tma" else {}), launch=launch)
        pool = 128 * (regs["other"] + q_tiles * regs["softmax"] + regs["correction"])
        need = block_n + SOFTMAX_ROW_OVERHEAD
        why = None
        if not arch.has("setmaxnreg"):
            why = "the two-Q-tile form moves registers between warpgroups with setmaxnreg; the descriptor has none"
        elif threads > arch.max_threads_per_block or pool > launch * threads:
            why = (f"{threads} threads, setmaxnreg budgets {regs['other']} + {q_tiles} x {regs['softmax']} + "
                   f"{regs['correction']} per thread of a warpgroup exceed the launch pool of {launch} x {threads}")
        elif not regs["other"] <= launch <= regs["softmax"] or regs["correction"] > launch:
            why = f"setmaxnreg needs other {regs['other']}, correction {regs['correction']} <= launch {launch} <= softmax {regs['softmax']}"
        elif need > regs["softmax"]:
            why = (f"a softmax thread holds its S row: {block_n} + {SOFTMAX_ROW_OVERHEAD} registers > the "
                   f"{regs['softmax']} it gets after setmaxnreg")
        if why:
            knob = "block_n" if "block_n" in knobs and need > regs["softmax"] else "q_tiles"
            raise kr.fail(name, knob, knobs.get(knob, q_tiles), why)
    if not tmem["fits"]:
        return Unsupported(family.FAMILY, name, variant, (),
                           f"S x {S_BUFFERS} + O + P need {tmem['used']} TMEM columns "
                           f"({tmem['allocated']} allocated); the descriptor has {arch.tmem.columns}")
    o_store = knobs.get("o_store", O_STORE)
    plan = smem_plan(head_dim, block_n, arch.smem_per_block_bytes, cta_group, q_tiles)
    if "stages" in knobs and plan["stages"] is not None and knobs["stages"] != plan["stages"]:
        want = knobs["stages"]
        if want > plan["stages"]:
            raise kr.fail(name, "stages", want, f"does not fit shared memory: Q {q_tiles} x {plan['q_bytes']} B + "
                          f"{want} x {plan['stage_bytes']} B K/V + stats {stats_bytes(q_tiles)} B + barriers + "
                          f"{ALIGN_SLACK} B alignment > smem_per_block_bytes "
                          f"{arch.smem_per_block_bytes} (at most {plan['stages']} stages)")
        plan = dict(plan, stages=want, smem_bytes=plan["total"](want))
    if o_store == "tma" and plan["stages"] is not None:
        # one Q tile: a ring of a tile's boxes; two: one box (the correction warpgroup stores at 88
        # registers after setmaxnreg: a ring index beside the rest spilled there)
        want = head_dim // O_BOX_COLS if q_tiles == 1 else 1
        st = plan["stages"]
        slots, fewer = family.fit_o_slots(plan["total"], st, want, arch.smem_per_block_bytes, MIN_STAGES)
        if slots:
            plan = dict(plan, o_slots=slots, staging_bytes=slots * O_BOX_BYTES, o_in_q=False,
                        smem_bytes=plan["total"](plan["stages"], slots))
        elif q_tiles == 1 and family.o_staging_in_q(CTA_ROWS, CTA_ROWS, CTA_ROWS * 128, O_BOX_BYTES):
            # no box fits beside the K/V stages: stage O in the Q buffer (its boxes are O's),
            # head dim / 64 boxes, no bytes of their own; the Q buffer is freed after the stores read it
            plan = dict(plan, o_slots=head_dim // O_BOX_COLS, staging_bytes=0, o_in_q=True)
        else:
            # (the two-Q-tile form stages through the correction warpgroup, which holds no Q tile)
            raise kr.fail(name, "o_store", o_store, f"the O staging box ({O_BOX_BYTES} B) does not fit shared memory "
                          f"beside {st} K/V stages: {plan['total'](st, 1)} B > smem_per_block_bytes "
                          f"{arch.smem_per_block_bytes}" + (f" (it fits with --set stages={fewer})" if fewer else ""))
    if plan["stages"] is None:
        return Unsupported(family.FAMILY, name, variant, (),
                           f"Q x {q_tiles} + {MIN_STAGES} K/V stages need {plan['smem_bytes']} B of shared memory; "
                           f"the block budget is {arch.smem_per_block_bytes} B")

    idesc_qk = enc.encode_instr_desc(enc.InstrDesc(MMA_KIND, "bf16", "bf16", m=mma_m, n=block_n))
    # P V: A = P from TMEM (K-major by definition), B = V stored [keys, D] row-major, i.e.
    # N (= D) contiguous: an MN-major B (transpose-B bit set).
    idesc_pv = enc.encode_instr_desc(enc.InstrDesc(MMA_KIND, "bf16", "bf16", m=mma_m, n=head_dim,
                                                   b_major_mn=True))
    # V as MN-major, 128B swizzle (PTX ISA 9.7.16.3.3 canonical layouts): the swizzle atom
    # is 8 keys x 64 D-columns (1024 B); SBO = next 8 keys = 1024 B, LBO = next 64
    # D-columns = the next TMA box (block_n rows x 128 B).
    # With the hd64 pair's 64-byte swizzle (32 columns per CTA) the atom is 8 keys x 32
    # columns (512 B): SBO 512 B, a single box along D.
    desc_v = enc.encode_smem_desc(lbo=block_n * v_swizzle, sbo=8 * v_swizzle, swizzle=f"{v_swizzle}b")
    cg = f"cta_group::{cta_group}"
    share = knobs.get("poly_exp2_share", POLY_EXP2_SHARE)

    cfg = family.base_config(arch, head_dim, causal, MAINLOOP)
    cfg.update({
        "cta_group": cta_group,
        "cta_q_tiles": q_tiles,         # 128-row Q tiles per CTA (knob q_tiles)
        "block_m": block_m,             # query rows per tile (of the pair; all its Q tiles)
        "cta_rows": CTA_ROWS,
        "block_n": block_n,
        "stages": plan["stages"],
        "q_bytes": plan["q_bytes"],
        "stage_bytes": plan["stage_bytes"],
        "box_cols": BOX_COLS,
        # TMA boxes (cols, rows) per CTA: K rows and V columns are split across a pair.
        "tma_boxes": {"q": [BOX_COLS, CTA_ROWS], "k": [BOX_COLS, block_n // cta_group],
                      "v": [v_swizzle // 2, block_n]},
        "tma_swizzle": "128B",
        "tma_swizzles": {"v": f"{v_swizzle}B"},     # per map where it differs from tma_swizzle
        "v_swizzle_bytes": v_swizzle,
        "v_box_cols": v_swizzle // 2,
        # A pair's grid is 2 x clusters; cluster c serves tiles c, c + clusters, ...
        "grid_ctas": kr.schedule(name, knobs, arch, cta_group, 1)[1],
        "warps": ({"producer": PRODUCER_WARP, "mma": MMA_WARP,
                   "softmax": list(range(FIRST_SOFTMAX_WARP, FIRST_SOFTMAX_WARP + SOFTMAX_WARPS))} if q_tiles == 1 else
                  {"producer": PRODUCER_WARP, "mma": MMA_WARP, "idle": [2, 3],
                   "softmax": list(range(4, 4 + 4 * q_tiles)),
                   "correction": list(range(4 + 4 * q_tiles, 8 + 4 * q_tiles))}),
        "mma_kind": MMA_KIND,
        "mma_k": MMA_K,
        "mma_qk": f"m{mma_m}n{block_n}k{MMA_K} {cg}, A = Q (smem, K-major), B = K (smem, K-major)",
        "mma_pv": f"m{mma_m}n{head_dim}k{MMA_K} {cg}, A = P (TMEM), B = V (smem, MN-major)",
        "idesc_qk": f"0x{idesc_qk:08X}",
        "idesc_pv": f"0x{idesc_pv:08X}",
        "desc_k_major": f"0x{enc.kmajor_sw128_operand_desc():016X}",
        "desc_v_mn_major": f"0x{desc_v:016X}",
        "s_buffers": S_BUFFERS,
        # Row max and row sum per thread (one S row): independent partials combined pairwise;
        # depth = the dependent ALU ops of the max (sum: of the column-pair adds) per row.
        "row_reduction": {"kind": "tree", "partials": ROW_PARTS,
                          "max_depth": block_n // ROW_PARTS + ROW_PARTS.bit_length() - 1,
                          "sum_depth": block_n // (2 * ROW_PARTS) + ROW_PARTS.bit_length() - 1},
        # O / l rescaled only when a row's max grows by more than this many exp2 units.
        "rescale_threshold_log2": knobs.get("rescale_threshold", RESCALE_THRESHOLD),
        # exp2 split between the FMA units (polynomial) and the MUFU (ex2.approx).
        "poly_exp2_share": share / 100,
        "poly_exp2": {"pairs_per_8": share * 8 // 100, "coef": [f"{c:.9g}" for c in an.EXP2_POLY],
                      "round_magic": f"{an.EXP2_ROUND_MAGIC:.1f}", "min_arg": f"{an.EXP2_MIN_ARG:.1f}",
                      "flush_below": f"{an.EXP2_FLUSH_BELOW:.1f}", "max_rel_err": an.EXP2_POLY_MAX_REL_ERR},
        "tmem_chunk": TMEM_CHUNK,
        "tmem_columns": {"s": tmem["s"], "o": tmem["o"], "p": tmem["p"],
                         "used": tmem["used"], "allocated": tmem["allocated"]},
        "smem_budget": {"per_block": arch.smem_per_block_bytes, "q": q_tiles * plan["q_bytes"],
                        "per_stage": plan["stage_bytes"], "stages": plan["stages"],
                        "barriers": 8 * barrier_count(plan["stages"], q_tiles) + 8, "align_slack": ALIGN_SLACK,
                        "total": plan["smem_bytes"]},
    })
    if o_store == "tma":
        # the (head dim, seq_q, batch x heads) output map: a box is 64 columns of one CTA's
        # 128 rows of one head (the host shrinks the rows to seq_q when a head has fewer)
        cfg.update(family.o_store_config(O_BOX_COLS, CTA_ROWS, plan["o_slots"], O_BOX_BYTES, O_STORE_BARRIER,
                                         plan["staging_bytes"], in_q=plan["o_in_q"]))
        cfg["smem_budget"]["o_staging"] = plan["staging_bytes"]
    if q_tiles > 1:
        cfg["stats_bytes"] = stats_bytes(q_tiles)
        cfg["stat_slots"] = STAT_SLOTS
        cfg["regs"] = regs
    if knobs:   # what was overridden, so show / reports say so (absent from default specs)
        cfg["knobs"] = {k: kr.show(v) for k, v in sorted(knobs.items())}
        if not knobs.get("persistent", True):
            cfg["persistent"] = False
    required, forbidden = _sass_rules(arch, pair, o_store)
    return KernelSpec(
        family=family.FAMILY, name=name, variant=variant,
        entry=family.entry_name(head_dim, causal, MAINLOOP, suffix) + family.o_store_entry_suffix(o_store),
        config=cfg, features=features,
        sass_required=required, sass_forbidden=forbidden,
        threads=threads, smem_bytes=plan["smem_bytes"], tmem_columns=tmem["allocated"],
        cluster=(cta_group, 1, 1), template=family.TEMPLATE,
    )
