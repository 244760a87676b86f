"""L0 of porter's timing model for the attention family (flash-attention forward).

Per K/V tile of a Q tile (``block_m`` rows x ``block_n`` keys, head dim d), on one SM, in
cycles: tensor (S = Q K^T and O += P V: 4 x rows x block_n x d FLOPs / the kind's rate);
smem (TMA writes of K and V, plus the MMA operand reads by mode: wgmma reads Q and K (SS)
and V (RS: P from registers) once per consumer warpgroup, tcgen05 reads Q, K (SS) and V
(TS: P from Tensor Memory), mma.sync warps read K and V fragments each); MUFU (one ex2 per
score); issue (about 4.5 warp instructions per score: max, scale-subtract, ex2, sum, half a
conversion, over 32 lanes); and the softmax path: one softmax group's serial time per tile,
its row reduction's dependent depth x the ALU latency (the kernel's ``row_reduction``
max/sum depths where it states them, else the max with two accumulators: half its row's
scores per thread), plus its MUFU/issue time, plus O's rescale (a kernel with
``rescale_threshold_log2`` loads and stores O in TMEM on the tiles that rescale: all at
threshold 0, else perf.lazy_rescale_tile_share, an assumption), exposed unless another
softmax group works on another tile at the same time (Hopper ping-pong consumers).
``poly_exp2_share`` of the exponentials run as a polynomial on the FMA pipe: that share
leaves the MUFU and costs the polynomial's instructions in issue slots.
A CTA pair's tile (block_m rows) is worked by two SMs, each costed for its own cta_rows.
A tcgen05 kernel with ``cta_q_tiles`` = 2 (FA4's structure) works two cta_rows-row Q tiles
per SM per K/V tile: both Q tiles' MMAs read the K and V tile from shared memory (loaded
once), each Q tile's softmax warpgroup costs its own rows' serial time (its half of the
MUFU and issue work, the row reduction's depth, its barriers), and its turn on the tensor
core closes a loop: S_j done, softmax j, the hand-off to the MMA issuer (p_full, and
o_ready through the correction warpgroup's hop), then that Q tile's P V and next S on the
tensor core plus the MMA latency. The O rescale moves to the correction warpgroup, a
resource of its own ("correction"), off the softmax path.
Where the MMA and the softmax of different tiles overlap (tcgen05's MMA warp with two S
buffers, ping-pong warpgroups) the period is the largest term; where they do not
(``pingpong: false``) the softmax is added to the tensor time, halved per extra consumer
warpgroup that the schedulers interleave with it.
wgmma (Hopper) kernels add two terms from the kernel's own loop: each consumer warpgroup's
dependency chain per K/V tile ("warpgroup chain": S wgmma + its completion latency, the
softmax under its own P V, O rescale + P pack, the barriers; ping-pong hides only what the
other warpgroups' GEMMs cover) and the K/V ring ("k/v ring": a stage held a tile past its S
until the last warpgroup's P V is done, then refilled through the TMA and the L2 share).
HBM (kv_hbm_bytes): Q in and O out once, K and V as often as the kernel's walk (tile_walk,
knob tile_order) re-reads them past the L2: under the default heads-inner walk a wave
streaming more heads' K/V than the L2 holds reads them again in the next wave (4 x 16 heads x
8448 keys on an H100: every wave).
"""

from __future__ import annotations

from porter.errors import PorterError
from porter.kernels.attention_variants import TILE_ORDER   # the knob's default: the kernels' own

from .schedule import Schedule

ISSUE_PER_SCORE = 4.5


def parse_shape(shape: str) -> tuple[int, int, int, int, int]:
    try:
        dims = [int(x) for x in shape.lower().split("x")]
    except ValueError:
        dims = []
    if len(dims) == 3:
        b, h, s = dims
        dims = [b, h, h, s, s]
    if len(dims) != 5 or min(dims) <= 0:
        raise PorterError(f"shape '{shape}': an attention shape is BxHxS or BxHqxHkvxSqxSk, e.g. 4x16x16x4096x4096")
    return tuple(dims)  # type: ignore[return-value]


def poly_exp2_instructions(c) -> int:
    """Instructions of one polynomial exp2 (kernels_src/attention/exp2_poly.cuh): a clamp,
    three adds (the round-magic split), one FMA per coefficient past the first (Horner),
    a shift and an integer add (the exponent), a compare and a select (the flush)."""
    coef = (c.get("poly_exp2") or {}).get("coef") or ()
    if not coef:
        raise PorterError("timing model: poly_exp2_share without the kernel's poly_exp2 coefficients")
    return 1 + 3 + (len(coef) - 1) + 2 + 2


def warpgroup_chain(gemm: float, s_latency: float, pv_latency: float, softmax: float, handoff: float,
                    sync: float, *, turn_gemms: float = 0.0, intra_overlap: bool = True) -> float:
    """Cycles from the start of one consumer warpgroup's S = Q K^T on the tensor core to the
    moment it can issue the next one (templates/attention/wgmma.cu.j2's consumer loop):
    its S(n) runs ``gemm`` cycles (after ``turn_gemms`` cycles of the other warpgroups'
    GEMMs queued ahead of it, when nothing orders the turns) and completes ``s_latency``
    later (wgmma.wait_group 1); its softmax of S(n) takes ``softmax``; with the kernel's
    intra-warpgroup pipelining that softmax runs while its own P V(n-1) occupies the
    tensor core (``gemm`` more cycles, done ``pv_latency`` after), so the warpgroup goes on
    at the later of the two; without it (FA3's ablation) P V waits for the softmax. Then
    wgmma.wait_group 0, O rescaled and P packed to bf16 (``handoff``: the warpgroup's own
    instructions per warp, one scheduler each), and the stage's full barriers, the turn's
    named barrier and the wgmma fence (``sync``)."""
    s_done = turn_gemms + gemm + s_latency
    if intra_overlap:
        ready = max(s_done + softmax, turn_gemms + 2 * gemm + pv_latency)
    else:
        ready = s_done + softmax + gemm + pv_latency
    return ready + handoff + sync


def wgmma_warpgroup_chain(c, fig, tensor: float, mufu: float, issue: float, chain: float, groups: int,
                          pingpong: bool, *, release: bool = False) -> float:
    """warpgroup_chain for porter's Hopper attention (block_m rows in ``groups`` consumer
    warpgroups of 64 rows, head dim d, block_n keys): each warpgroup's two GEMMs per K/V tile
    are 1 / (2 groups) of the tile's tensor time; its S wgmma is m64 n=block_n, its P V
    m64 n=d (the MMA latency base + per-N x N each). With ping-pong (the named-barrier turn)
    a warpgroup's GEMMs start as soon as it is ready and its softmax has the MUFU and issue
    slots to itself (the others are in their GEMM turn): its rows' share of the tile's
    MUFU / issue time plus the row reduction's depth. Without it the warpgroups issue
    together and the tensor core takes every S, then every P V: a softmax starts when its
    S is done but shares the MUFU and issue slots with the others' (the whole tile's time
    from the first S's completion), and its P V completes after all the S and the P V
    queued ahead of it (groups + 1 GEMMs after its S started). Hand-off: O (rows x d fp32 per
    warpgroup) rescaled and P (rows x block_n) packed two per instruction, over its 128
    threads. Sync: two mbarrier waits (K, V full), the turn's named barrier (ping-pong
    only) and the wgmma fence.

    ``release``: instead, when the last warpgroup releases the K/V stage its P V read, after
    the start of the first warpgroup's S on it: the kernel arrives on kv_empty right after
    wgmma.wait_group 0 (before the rescale), one K/V tile later (P V(n) is issued with
    S(n+1)); the period itself is added by kv_ring_cycles. With ping-pong the last
    warpgroup's turn starts 2 x gemm per warpgroup after the first's."""
    d, bn, bm = int(c["head_dim"]), int(c["block_n"]), int(c["block_m"])
    rows = bm // max(1, groups)
    gemm = tensor / max(1, groups) / 2
    base, per_n = fig["mma_latency_base_cycles"], fig["mma_latency_per_n_cycles"]
    handoff, sync = (0.0, 0.0) if release else (rows * (d + bn / 2) / 128, 2 * fig["mbarrier_cycles"] + fig["fence_cycles"]
                                                + (fig["named_barrier_cycles"] if pingpong else 0.0))
    if pingpong:
        softmax = max(mufu, issue) / max(1, groups) + chain
        own = warpgroup_chain(gemm, base + per_n * bn, base + per_n * d, softmax, handoff, sync)
        return own + ((groups - 1) * 2 * gemm if release else 0.0)
    softmax = max(mufu, issue) + chain
    ready = max(gemm + base + per_n * bn + softmax, (groups + 1) * gemm + base + per_n * d)
    return ready + handoff + sync


def kv_ring_cycles(stages: int, release: float, refill: float) -> float:
    """The least K/V tile period the kernel's ring of ``stages`` K/V stages sustains: stage
    n is filled before the first warpgroup's S(n) starts and refilled (tile n + stages)
    before its S(n + stages), ``stages`` periods later; between the two it is held one
    period (P V(n) is issued with S(n+1)) plus ``release`` cycles, then the refill takes
    ``refill`` (the producer's wake-up, the copy's latency, the K tile's bytes at the SM's
    L2 share, the consumer's wake-up). stages x P >= P + release + refill, so
    P >= (release + refill) / (stages - 1) (a single stage: no overlap at all)."""
    return (release + refill) / max(1, stages - 1)


def kv_hbm_bytes(groups: list, kv_tiles: list, units: int, kv_tile_bytes: float, l2_bytes: float) -> float:
    """HBM bytes of K and V under the kernel's tile walk (``groups[i]``: the (batch, kv head)
    tile i reads; ``kv_tiles[i]``: how many K/V tiles of ``kv_tile_bytes`` it reads), dealt to
    ``units`` persistent units in walk order (tile i runs in wave i // units). Tiles of one
    kv head in the same wave stream its K/V side by side (same start, same speed): one HBM
    read, the others hit the L2. A kv head read again in a later wave hits the L2 only if
    the bytes every wave in between streams (each of its kv heads' K/V once) fit in the L2
    (``l2_bytes``); else it comes from HBM again (a cyclic stream larger than an LRU cache
    keeps none of it). With kv heads walked inner (tile_order=heads_inner) a wave holds many
    heads' K/V at once, so a shape with many heads re-reads K/V every wave."""
    n = max(1, units)
    waves: dict = {}
    for i, (g, kv) in enumerate(zip(groups, kv_tiles)):
        w = waves.setdefault(i // n, {})
        w[g] = max(w.get(g, 0), kv)
    order = sorted(waves)
    streamed = {w: sum(waves[w].values()) * kv_tile_bytes for w in order}
    since = {}                     # kv head -> bytes streamed since its last read
    total = 0.0
    for w in order:
        for g in since:
            since[g] += streamed[w]
        for g, kv in waves[w].items():
            if g not in since or since[g] > l2_bytes:
                total += kv * kv_tile_bytes
            since[g] = 0.0
    return total




def tile_walk(tile_order: str, heads: int, q_tiles: int) -> list:
    """(batch * heads_q + head, Q tile) of each linear tile index, as decode_tile (templates/
    attention.cu.j2) maps it under knob ``tile_order``. ``heads_inner``: the Q tile is the
    slowest index, from the last (longest under a causal mask) down, (batch, head) inner: a
    wave spans ~units / heads Q tiles of every head. ``q_inner``: (batch, head) is the slowest
    index and each head's Q tiles run inner (a wave spans ~units / q_tiles heads, whose K/V
    stay in the L2): position r of head bh is pos = (r + bh) % q_tiles, Q tile q_tiles - 1 -
    pos (from the last down) in an even head and pos (from the first up) in an odd one. A
    persistent unit takes the same position of every head when the grid is a multiple of
    q_tiles; the rotation and the alternate direction spread the causal lengths it takes (a
    plain last-first walk gives one unit the longest tile of every head)."""
    if tile_order == "heads_inner":
        return [(i % heads, q_tiles - 1 - i // heads) for i in range(heads * q_tiles)]
    if tile_order == "q_inner":
        return [(bh, (r + bh) % q_tiles if bh % 2 else q_tiles - 1 - (r + bh) % q_tiles)
                for bh in range(heads) for r in range(q_tiles)]
    raise ValueError(f"tile_order {tile_order!r}: expected heads_inner or q_inner")


def epilogue_store_cycles(c, rows: int, d: int, fig) -> float:
    """The exposed part of storing an SM's O tile (rows x d bf16) after its last P V, by the
    kernel's ``o_store``. A warp's global store costs the 32-byte sectors it touches (CUDA C++
    Best Practices Guide, "Coalesced Access to Global Memory"); ``direct``: every thread
    stores its own row (tcgen05: 16 B per lane; wgmma / mma.sync: 4 lanes x 4 B of a row), so
    each sector is half written and the SM's L2 share takes twice O's bytes before the
    storing warps' later memory operations get through. ``tma`` (o_store=tma): the rows go
    to shared memory (O's bytes through the port), then per 64-column box a fence.proxy.async
    and two named barriers; the TMA engine reads the box and writes whole lines while the
    warps go on (not exposed)."""
    o_bytes = rows * d * 2
    if c.get("o_store") == "tma":
        boxes = d // int((c.get("o_staging") or {}).get("box_cols", 64))
        return (o_bytes / fig["smem_bytes_per_clk_per_sm"]
                + boxes * (fig["fence_cycles"] + 2 * fig["named_barrier_cycles"]))
    return 2 * o_bytes / fig.l2_bytes_per_clk_per_sm


def tile_costs(spec, arch, fig) -> dict:
    c = spec.config
    d, bm, bn = int(c["head_dim"]), int(c["block_m"]), int(c["block_n"])
    loop = c["mainloop"]
    kind = c.get("mma_kind") or arch.tensor_core.kinds_for_format(c.get("dtype", "bf16"))[0]
    rate = fig.mma_rate(kind)
    # A CTA pair (cta_group::2) works a block_m-row tile on two SMs: each SM's tensor core
    # computes its CTA's rows (cta_rows) of the pair's MMA, each CTA stages half of every
    # K and V tile and runs the softmax of its own rows. Every cost below is one SM's.
    cta_group = int(c.get("cta_group", 1))
    q_tiles = int(c.get("cta_q_tiles", 1))          # Q tiles each SM works per K/V tile
    rows = int(c.get("cta_rows", bm // cta_group)) * q_tiles
    tensor = 4.0 * rows * bn * d / rate
    kv = 2.0 * bn * d * 2 / cta_group
    scores = rows * bn
    mufu = scores / fig["mufu_ex2_per_clk_per_sm"]
    issue = scores * ISSUE_PER_SCORE / 32 / fig["issue_per_clk_per_sm"]
    if loop == "wgmma":
        groups = int(c.get("consumer_warpgroups", 1))
        reads = bm * d * 2 + groups * kv
        row_per_thread = bn / 4                     # wgmma m64 layout: a thread holds a quarter row
        overlap = bool(c.get("pingpong"))
        o_issue = bm * d / 32 / fig["issue_per_clk_per_sm"]   # O rescale in registers
        issue += o_issue
    elif loop == "tcgen05":
        groups = 1 if isinstance(c.get("warps"), dict) else 1
        reads = rows * d * 2 + q_tiles * kv         # Q, and this CTA's half of K / V (a pair) per Q tile
        row_per_thread = bn                         # one thread per row of S (TMEM lanes)
        overlap = True                              # the MMA warp runs ahead into the other S buffer
    elif loop == "mma_sync":
        warps = int(c.get("warps", 4))
        groups = max(1, warps // 4)
        reads = bm * d * 2 + warps * kv             # every warp reads all of K and V (ldmatrix)
        row_per_thread = bn / 4
        overlap = False
        issue += scores / 16 / fig["issue_per_clk_per_sm"]  # HMMA + ldmatrix per 16 scores
    else:
        raise PorterError(f"timing model: no attention model for mainloop '{loop}' ({spec.name})")
    rr = c.get("row_reduction")
    if rr:
        # the kernel states its row max / row sum's dependent ALU depth (a tree over
        # independent partials, or a single chain)
        chain = (int(rr["max_depth"]) + int(rr["sum_depth"])) * fig["alu_latency_cycles"]
    else:
        chain = row_per_thread / 2 * fig["alu_latency_cycles"]   # the max: two accumulators
    poly = float(c.get("poly_exp2_share", 0.0))
    if poly:
        # this share of the exponentials leaves the MUFU for the FMA pipe: each costs the
        # polynomial's instructions in issue slots instead of one MUFU op
        mufu *= 1.0 - poly
        issue += scores * poly * (poly_exp2_instructions(c) - 1) / 32 / fig["issue_per_clk_per_sm"]
    rescale = 0.0
    if "rescale_threshold_log2" in c:
        # O (f32, rows x d, in TMEM) loaded and stored back by the softmax warps on the tiles
        # that rescale it: every tile at threshold 0, else the descriptor's assumed share
        if "tmem_bytes_per_clk_per_sm" not in fig.values:
            raise PorterError(f"timing model: {spec.name} rescales O in Tensor Memory; the descriptor gives no "
                              "perf.tmem_bytes_per_clk_per_sm")
        share = 1.0 if float(c["rescale_threshold_log2"]) <= 0 else float(fig.values.get("lazy_rescale_tile_share", 1.0))
        rescale = share * 2 * rows * d * 4 / fig["tmem_bytes_per_clk_per_sm"]
    softmax_path = chain + max(mufu, issue) + rescale + 2 * fig["mbarrier_cycles"]
    turn = None
    if loop == "tcgen05" and q_tiles > 1:
        # one softmax warpgroup per Q tile: its own rows' share of the MUFU / issue work; the
        # correction warpgroup does the rescale; the loop through the tensor core closes on
        # the two hand-offs (p_full; stats -> correction -> o_ready) and this Q tile's MMAs
        softmax_path = chain + max(mufu, issue) / q_tiles + 2 * fig["mbarrier_cycles"]
        mma_lat = fig["mma_latency_base_cycles"] + fig["mma_latency_per_n_cycles"] * max(bn, d)
        turn = softmax_path + 2 * fig["mbarrier_cycles"] + tensor / q_tiles + mma_lat
    if groups >= 2 and overlap:
        softmax_path = max(mufu, issue) + rescale + chain / groups
    resources = {
        "tensor": tensor,
        "smem": (kv + reads) / fig["smem_bytes_per_clk_per_sm"],
        "mufu": mufu,
        "issue": issue,
        "l2": kv / fig.l2_bytes_per_clk_per_sm,
        "softmax": softmax_path,
    }
    if turn is not None:
        resources["softmax turn"] = turn
        resources["correction"] = rescale + 4 * fig["mbarrier_cycles"]   # its waits and release per Q tile pair
    if not overlap:
        resources["mma + softmax"] = tensor + softmax_path / (2 ** (groups - 1))
    if loop == "wgmma":
        # each consumer warpgroup's own dependency chain per K/V tile (warpgroup_chain): the
        # tile period is at least that chain; ping-pong hides only what the other
        # warpgroups' GEMMs cover, and the chain's excess over the tensor time is idle
        # (its O rescale is counted in the chain's hand-off, not in its softmax)
        resources["warpgroup chain"] = wgmma_warpgroup_chain(c, fig, tensor, mufu, issue - o_issue, chain, groups,
                                                             overlap)
    stages = int(c.get("stages", 2))
    if loop == "wgmma":
        # K/V ring (kv_ring_cycles): the stage a tile's P V reads is released one K/V tile
        # after its S, by the last warpgroup; refilled through the producer, the TMA and the
        # SM's L2 share (K, the first half of the stage, is what the next S waits for)
        held = wgmma_warpgroup_chain(c, fig, tensor, mufu, issue - o_issue, chain, groups, overlap, release=True)
        refill = (2 * fig["mbarrier_cycles"] + fig.ns_to_cycles(fig["tma_latency_ns"])
                  + kv / 2 / fig.l2_bytes_per_clk_per_sm)
        resources["k/v ring"] = kv_ring_cycles(stages, held, refill)
    inflight = min(max(1, stages - 1) * kv, fig["tma_inflight_kib"] * 1024)
    resources["tma window"] = kv * fig.ns_to_cycles(fig["tma_latency_ns"]) / inflight
    per_q_tile = (fig.ns_to_cycles(fig["tma_latency_ns"]) + 2 * rows * d * 2 / fig["smem_bytes_per_clk_per_sm"]
                  + fig["mma_latency_base_cycles"])   # rows: all the Q tiles an SM holds
    per_q_tile += epilogue_store_cycles(c, rows, d, fig)
    return {"resources": resources, "bm": bm, "bn": bn, "d": d, "per_q_tile": per_q_tile, "kind": kind,
            "cta_group": cta_group}


def model(spec, arch, fig, shape: str) -> dict:
    b, hq, hkv, sq, sk = parse_shape(shape)
    c = spec.config
    t = tile_costs(spec, arch, fig)
    bm, bn, d = t["bm"], t["bn"], t["d"]
    period = max(t["resources"].values())
    q_tiles = -(-sq // bm)
    causal = bool(c.get("causal"))
    lengths = []
    for qi in range(q_tiles):
        if causal:
            # bottom-right aligned: row r sees keys <= r + (sk - sq)
            last_row = min(sq, (qi + 1) * bm) - 1 + (sk - sq)
            n_kv = max(0, min(-(-sk // bn), last_row // bn + 1))
        else:
            n_kv = -(-sk // bn)
        lengths.append(n_kv)
    if c.get("persistent") is False:
        t["per_q_tile"] += fig.ns_to_cycles(fig["tma_latency_ns"]) + fig["cluster_barrier_cycles"]
    # the kernel's own walk (decode_tile in templates/attention.cu.j2, knob tile_order):
    # unit u takes linear = u, u + units, ...
    order = tile_walk(str(c.get("tile_order", TILE_ORDER)), b * hq, q_tiles)
    walk = [lengths[qi] for _, qi in order]
    tiles = [n * period + t["per_q_tile"] for n in walk]
    grid = int(c.get("grid_ctas", c.get("sm_count", fig.sm_count)))
    # a unit is what works one tile: a CTA, or a CTA pair (two SMs); L1's period is measured
    # per unit too (the pair's two SMs in the timed simulator)
    units = max(1, min(grid, fig.sm_count) // t["cta_group"])
    sched = Schedule(units, tuple(tiles), fig.ns_to_cycles(fig["tma_latency_ns"]), 0.0)
    # HBM: Q read and O written once, the LSE, and K / V as often as the walk re-reads them
    # past the L2 (kv_hbm_bytes): never less than once
    group = max(1, hq // hkv)
    walk_groups = [(bh // hq, (bh % hq) // group) for bh, _ in order]
    kv = kv_hbm_bytes(walk_groups, walk, units, 2.0 * bn * d * 2, fig.l2_bytes)
    hbm = b * 2 * hq * sq * d * 2 + max(kv, b * 2 * hkv * sk * d * 2) + b * hq * sq * 4
    kv_tiles = sum(lengths) * b * hq
    res = {r: v * kv_tiles / units for r, v in t["resources"].items()}
    flops = 4.0 * b * hq * sq * sk * d * (0.5 if causal else 1.0)
    return {"schedule": sched, "per_tile_resources": res, "hbm_bytes": hbm, "flops": flops,
            "bytes_moved": hbm, "peak_key": "bf16" if "bf16" in arch.peak_tflops else "", "mma_kind": t["kind"],
            "tile_kv": tuple(walk)}   # K/V tiles per tile (L1 costs them)
