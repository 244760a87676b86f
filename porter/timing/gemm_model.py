"""L0 of porter's timing model for the GEMM family: what one tile costs each resource of
an SM, from the kernel's configuration (porter.kernels' KernelSpec.config) and the
descriptor's perf figures; porter.timing.schedule turns it into a time for a shape.

Per K step of a tile (``tile_k`` of K), on one SM, in cycles:
- tensor: the CTA's MMA FLOPs / the kind's dense rate;
- smem: one shared-memory port (perf.smem_bytes_per_clk_per_sm) carries the TMA (or
  cp.async) writes of the stage AND the MMA's operand reads, by operand mode: wgmma SS
  reads A once and B once per consumer warpgroup; tcgen05 SS reads A and this CTA's B
  (a CTA pair reads only its half of B: the pair's MMA shares it), block scales are read
  once more when staged into TMEM; mma.sync reads its fragments with ldmatrix, A once per
  warp column and B once per warp row;
- l2: the bytes this SM pulls from the L2 (a multicast operand counted once per cluster)
  at its share of the L2's bandwidth;
- issue: warp instructions (MMA, fragment loads, fp8 promotion adds) / the schedulers;
- tma window: a stage's bytes x the copy latency / the bytes in flight (the stages ahead
  of the consumer, capped by the TMA window): Little's law;
- mma pipeline: warpgroup consumers that wait for their wgmma before releasing a stage
  expose the MMA latency, hidden by the other consumers' MMAs.
The tile's period is the largest of these (they overlap); the epilogue is exposed per tile
unless the accumulator is double-buffered (tcgen05 acc_buffers >= 2). A TMA-store epilogue
(wgmma ``epilogue=tma``) exposes only the threads' write of C into shared memory, the fences
and the meetings; the TMA's read of it is counted on the tile's shared-memory port and its
bytes on the tile's L2 share. A staged epilogue's st.global leave at the SM's L2 share, exposed.

schedule=clc (cluster launch control): the tiles go greedily to the unit that frees first
(porter.timing.schedule), and each tile a unit takes over pays what its hand-over leaves
exposed (``clc_fetch_cycles``).
"""

from __future__ import annotations

from porter.errors import PorterError

from .schedule import Schedule, operand_hbm_bytes

OUT_BYTES = 2  # porter's GEMMs write bf16 C


def element_bits(arch, kind: str) -> float:
    """Bits per operand element: every MMA kind's K spans 256 bits of A (PTX ISA)."""
    return 256.0 / arch.tensor_core.k_of(kind)


def parse_shape(shape: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(x) for x in shape.lower().split("x"))
    except ValueError:
        raise PorterError(f"shape '{shape}': a GEMM shape is MxNxK, e.g. 8192x8192x8192") from None
    if min(m, n, k) <= 0:
        raise PorterError(f"shape '{shape}': dimensions must be positive")
    return m, n, k


def tile_costs(spec, arch, fig) -> dict:
    """Cycles per K step of one tile on one SM, per resource, plus the tile's geometry."""
    c = spec.config
    kind = c["kind"]
    bits = element_bits(arch, kind)
    loop = c["mainloop"]
    cta_group = int(c.get("cta_group", 1))
    tile_m, tile_n, tile_k = int(c["tile_m"]), int(c["tile_n"]), int(c["tile_k"])
    cta_m = int(c.get("cta_rows", tile_m // cta_group))          # rows this SM's MMA computes
    b_rows = int(c.get("b_rows_per_cta", tile_n))                 # B rows this CTA stages
    cluster = max(1, spec.cluster[0] * spec.cluster[1] * spec.cluster[2])
    a_bytes = cta_m * tile_k * bits / 8
    b_full = tile_n * tile_k * bits / 8
    scale_bytes = 0.0
    if c.get("block_scale"):
        scale_bytes = (cta_m + b_rows) * tile_k / int(c["scale_block_k"])
    rate = fig.mma_rate(kind)
    flops = 2.0 * cta_m * tile_n * tile_k
    tensor = flops / rate
    issue_instr = 0.0
    consumers = int(c.get("consumers", 1))
    if loop == "wgmma":
        multicast = cluster if c.get("cluster_m", 1) > 1 else 1
        b_staged = b_full                                          # every CTA holds the whole B tile
        writes = a_bytes + b_staged
        reads = a_bytes + consumers * b_full                       # SS: B once per consumer
        l2 = a_bytes + b_full / multicast
        mma_n = int(c["mma_n"])
        n_mma = (cta_m // 64) * (tile_n // mma_n) * (tile_k // int(c["mma_k"]))
        issue_instr = n_mma * 4 + 8 * consumers                    # one per warp + fences / waits
        if c.get("promote_every_k"):
            regs = cta_m * tile_n / (128 * consumers)              # accumulator registers per thread
            promotions = tile_k / int(c["promote_every_k"])
            issue_instr += promotions * regs * 4 * consumers       # one FADD per register per warp
        # a consumer's serial chain per K step: wait on the stage's full barrier, fence,
        # issue, wait for its wgmma (the MMA latency), release the stage (arrive on empty);
        # hidden while the other consumers' MMAs keep the tensor core busy
        latency = (fig["mma_latency_base_cycles"] + fig["mma_latency_per_n_cycles"] * mma_n
                   + 2 * fig["mbarrier_cycles"] + fig["fence_cycles"])
        per_consumer = tensor / consumers
        pipeline = tensor + max(0.0, latency - (consumers - 1) * per_consumer)
    elif loop == "tcgen05":
        writes = a_bytes + b_rows * tile_k * bits / 8 + scale_bytes
        reads = a_bytes + b_rows * tile_k * bits / 8 + scale_bytes  # SS; a pair reads its half of B
        l2 = writes
        n_mma = tile_k // int(c["mma_k"])
        issue_instr = n_mma + 8
        pipeline = tensor                                          # one thread issues, commits async
    elif loop == "mma_sync":
        warps_m, warps_n = int(c["warps_m"]), int(c["warps_n"])
        writes = a_bytes + b_full + scale_bytes
        reads = warps_n * a_bytes + warps_m * b_full               # ldmatrix fragments
        l2 = writes
        n_mma = (tile_m // int(c["mma_m"])) * (tile_n // int(c["mma_n"])) * (tile_k // int(c["mma_k"]))
        ldmatrix = reads / 512                                     # ldmatrix.x4: 512 bytes per warp
        copies = writes / 512                                      # 16-byte copies, 32 lanes
        issue_instr = n_mma + ldmatrix + copies + 0.1 * n_mma      # + address arithmetic
        if c.get("promote_every_k"):
            issue_instr += tile_k / int(c["promote_every_k"]) * tile_m * tile_n / 32
        pipeline = tensor
    else:
        raise PorterError(f"timing model: no GEMM model for mainloop '{loop}' ({spec.name})")
    stage_bytes = writes
    stages = int(c["stages"])
    inflight = min(max(1, stages - 1) * stage_bytes, fig["tma_inflight_kib"] * 1024)
    # a stage's round trip: the consumer's arrive on its empty barrier, the producer's wait,
    # the copy, the full barrier's completion; Little's law over the stages ahead
    round_trip = fig.ns_to_cycles(fig["tma_latency_ns"]) + 2 * fig["mbarrier_cycles"]
    tma_window = stage_bytes * round_trip / inflight
    resources = {
        "tensor": tensor,
        "smem": (writes + reads) / fig["smem_bytes_per_clk_per_sm"],
        "l2": l2 / fig.l2_bytes_per_clk_per_sm,
        "issue": issue_instr / fig["issue_per_clk_per_sm"],
        "tma window": tma_window,
        "mma pipeline": pipeline,
    }
    # the epilogue: C leaves through shared memory (written, read back) and global stores
    out_tile = cta_m * tile_n * OUT_BYTES
    # ... after the tile's last MMA completes (its latency) and the consumers meet at a named barrier
    drain = (fig["mma_latency_base_cycles"] + fig["mma_latency_per_n_cycles"] * int(c.get("mma_n", tile_n))
             + fig["named_barrier_cycles"])
    smem_rate = fig["smem_bytes_per_clk_per_sm"]
    # C's bytes leave the SM at its share of the L2's bandwidth (as attention's O stores do)
    stores = out_tile / fig.l2_bytes_per_clk_per_sm
    async_smem = async_l2 = 0.0
    if c.get("epilogue_mode") == "tma":
        # epilogue=tma: the threads write each 64-column chunk once, fence it and meet twice;
        # one thread's TMA store reads it back and sends it to the L2 while the warpgroup goes
        # on (the next tile's mainloop): that read and those bytes are port and L2 costs of the
        # tile, not exposed time
        chunks = tile_n // 64
        epilogue = out_tile / smem_rate + chunks * (fig["fence_cycles"] + 2 * fig["named_barrier_cycles"]) + drain
        async_smem, async_l2 = out_tile / smem_rate, stores
    else:
        # staged: written, then read back by the threads and stored with st.global, the
        # read-back under the stores, which go no faster than the SM's L2 share; then the last
        # stores' L2 round trip before the next tile's first wgmma may reuse the registers
        epilogue = (out_tile / smem_rate + max(out_tile / smem_rate, stores) + fig.ns_to_cycles(fig["l2_latency_ns"])
                    + drain)
    overlapped = int(c.get("acc_buffers", 1)) >= 2
    prologue = (fig.ns_to_cycles(fig["tma_latency_ns"]) + fig["cluster_barrier_cycles"]
                + fig["mma_latency_base_cycles"])
    return {"resources": resources, "tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k,
            "cta_group": cta_group, "cluster": cluster, "epilogue": epilogue,
            "epilogue_overlapped": overlapped, "epilogue_async_smem": async_smem,
            "epilogue_async_l2": async_l2, "prologue": prologue, "bits": bits,
            "scale_bytes_per_element": (1.0 / int(c["scale_block_k"])) if c.get("block_scale") else 0.0}


def clc_fetch_cycles(fig, t: dict, per_tile: float, arch=None) -> float:
    """Cycles a taken-over tile waits for its hand-over under schedule=clc (the kernel's two
    tile slots, templates/gemm/tcgen05.cu.j2). The scheduler asks for tile r + 2 once the
    epilogue (the slot's last reader) has finished tile r: that is ``epilogue`` after the MMAs
    of tile r, i.e. one period before the MMAs of tile r + 2 could start plus one more for
    tile r + 1. The answer takes the try_cancel round trip (perf.clc_round_trip_ns) and two
    mbarrier hand-offs (response, slot); then the producer's first loads of the tile take
    the TMA latency. Whatever of that exceeds the two periods stalls the MMAs:
        max(0, epilogue + round trip + 2 mbarriers + TMA latency - 2 x period)."""
    if "clc_round_trip_ns" not in fig.values:
        where = f"{arch.path}: " if arch is not None else ""
        raise PorterError(f"{where}perf.clc_round_trip_ns: schedule=clc needs the try_cancel round trip in "
                          "ns for porter's timing model; add it (with its range under perf.uncertain if no "
                          "source gives it)")
    handover = (t["epilogue"] + fig.ns_to_cycles(fig["clc_round_trip_ns"]) + 2 * fig["mbarrier_cycles"]
                + fig.ns_to_cycles(fig["tma_latency_ns"]))
    return max(0.0, handover - 2 * per_tile)


def model(spec, arch, fig, shape: str) -> dict:
    m, n, k = parse_shape(shape)
    t = tile_costs(spec, arch, fig)
    c = spec.config
    k_steps = -(-k // t["tile_k"])
    res = {r: v * k_steps for r, v in t["resources"].items()}
    res["smem"] += t["epilogue_async_smem"]        # a TMA-store epilogue's read of its staging tiles
    res["l2"] += t["epilogue_async_l2"]            # ... and its bytes to the L2
    per_tile = max(res.values()) + (0.0 if t["epilogue_overlapped"] else t["epilogue"])
    if c.get("persistent") is False:
        per_tile += t["prologue"]          # every tile is a fresh CTA: its pipeline fill is exposed
    tiles = (-(-m // t["tile_m"])) * (-(-n // t["tile_n"]))
    grid = int(c.get("grid_ctas", arch.sm_count))
    grid = min(grid, fig.sm_count) if c.get("grid_ctas") else fig.sm_count
    units = max(1, grid // t["cta_group"])
    dynamic = c.get("schedule") == "clc"
    fetch = clc_fetch_cycles(fig, t, per_tile, arch) if dynamic else 0.0
    sched = Schedule(units, (per_tile,) * tiles, t["prologue"],
                     t["epilogue"] if t["epilogue_overlapped"] else 0.0, dynamic=dynamic, fetch_cycles=fetch)
    bytes_a = t["bits"] / 8 + t["scale_bytes_per_element"]
    hbm = operand_hbm_bytes(fig, rows=m, cols=n, depth_bytes_a=k * bytes_a, depth_bytes_b=k * bytes_a,
                            tile_m=t["tile_m"], tile_n=t["tile_n"], units=units,
                            group_m=int(c.get("group_m", 0)), out_bytes=OUT_BYTES)
    out = {"schedule": sched, "per_tile_resources": res, "per_tile": True, "hbm_bytes": hbm, "flops": 2.0 * m * n * k,
           "bytes_moved": hbm, "peak_key": _peak_key(arch, c), "mma_kind": c["kind"]}
    if dynamic:
        out["extra"] = {"schedule": "clc: greedy tile walk (cluster launch control)",
                        "clc_fetch_exposed_cycles": round(fetch, 1)}
    return out


def _peak_key(arch, c) -> str:
    from porter.descriptor.arch_schema import PEAK_DTYPES

    fmt = c.get("a_format", "bf16")
    for key, members in PEAK_DTYPES.items():
        if fmt in members and key in arch.peak_tflops:
            return key
    return ""
