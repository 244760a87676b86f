"""L2 of porter's timing model: a per-tile period (from L0, or measured later by a timed
simulator run) extrapolated to a full shape on one product.

time = launch + prologue + the busiest unit's tiles x their periods + the last epilogue,
where tiles are dealt to the persistent units in the kernel's own order (tile i goes to
unit i mod units: a static persistent schedule, so the last wave's tail and causal
attention's unequal tile lengths show), and the whole is capped from below by the HBM
bytes the tile order leaves after the L2 (a wave whose working set fits in the L2 reads
each operand from HBM once; one that does not re-reads it every wave).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    units: int                 # tiles processed at once (persistent CTAs, or CTA pairs / clusters)
    tile_cycles: tuple         # per tile, in the kernel's walk order: its period in cycles
    prologue_cycles: float
    epilogue_cycles: float     # exposed after the last tile

    def busiest_cycles(self) -> float:
        loads = [0.0] * max(1, self.units)
        for i, c in enumerate(self.tile_cycles):
            loads[i % len(loads)] += c
        return max(loads)

    @property
    def waves(self) -> int:
        return -(-len(self.tile_cycles) // max(1, self.units))

    @property
    def tail_fraction(self) -> float:
        """How full the last wave is (1.0 when the tiles divide evenly)."""
        rem = len(self.tile_cycles) % max(1, self.units)
        return 1.0 if rem == 0 else rem / self.units


def extrapolate(sched: Schedule, fig, hbm_bytes: float, launch: bool = True) -> dict:
    """Seconds for the kernel on ``fig``'s product, and the part each term took."""
    clock = fig.clock_hz
    compute_s = (sched.prologue_cycles + sched.busiest_cycles() + sched.epilogue_cycles) / clock
    launch_s = fig["launch_us"] * 1e-6 if launch else 0.0
    hbm_s = hbm_bytes / fig.hbm_bytes_per_s_sustained
    return {"time_s": launch_s + max(compute_s, hbm_s), "compute_s": compute_s, "hbm_s": hbm_s,
            "launch_s": launch_s, "waves": sched.waves, "tail_fraction": sched.tail_fraction}


def operand_hbm_bytes(fig, *, rows: int, cols: int, depth_bytes_a: float, depth_bytes_b: float,
                      tile_m: int, tile_n: int, units: int, group_m: int, out_bytes: float) -> float:
    """HBM bytes of a tiled product C[rows, cols] = A[rows, :] B[cols, :]^T under a grouped
    tile order (``group_m`` tile rows walked together): each wave touches a block of A rows
    and B columns; if that block fits in the L2 every operand comes from HBM once, else the
    wave's block is read again every wave."""
    tiles_m, tiles_n = -(-rows // tile_m), -(-cols // tile_n)
    unique = rows * depth_bytes_a + cols * depth_bytes_b
    waves = -(-(tiles_m * tiles_n) // max(1, units))
    gm = max(1, min(group_m or tiles_m, tiles_m))
    a_tiles = min(tiles_m, gm * max(1, -(-units // (gm * tiles_n)))) if units >= gm * tiles_n else gm
    b_tiles = min(tiles_n, -(-units // gm))
    wave_bytes = a_tiles * tile_m * depth_bytes_a + b_tiles * tile_n * depth_bytes_b
    operands = unique if wave_bytes <= fig.l2_bytes else max(unique, waves * wave_bytes)
    return operands + rows * cols * out_bytes
