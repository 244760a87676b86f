"""L2 of porter's timing model: a per-tile period (from L0, or measured later by a timed
simulator run) extrapolated to a full shape on one product.

time = launch + prologue + the busiest unit's tiles x their periods + the last epilogue,
where tiles are dealt to the persistent units in the kernel's own order (tile i goes to
unit i mod units: a static persistent schedule, so the last wave's tail and causal
attention's unequal tile lengths show) or, for a dynamically scheduled kernel (cluster
launch control: ``dynamic``), greedily: each unit starts one tile, and every later tile
goes to the unit that frees first, paying ``fetch_cycles`` (what the hand-over of a
taken-over tile leaves exposed) on top of its period. With equal tiles the greedy walk
gives the busiest unit as many tiles as the static one: dynamic scheduling evens out
unequal tiles, it does not remove wave quantisation. The whole is capped from below by the HBM
bytes the tile order leaves after the L2 (a wave whose working set fits in the L2 reads
each operand from HBM once; one that does not re-reads it every wave).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    units: int                 # tiles processed at once (persistent CTAs, or CTA pairs / clusters)
    tile_cycles: tuple         # per tile, in the kernel's walk order: its period in cycles
    prologue_cycles: float
    epilogue_cycles: float     # exposed after the last tile
    dynamic: bool = False      # greedy: the next tile to the unit that frees first (cluster launch control)
    fetch_cycles: float = 0.0  # dynamic: exposed cost of each tile a unit takes over (not its first)

    def _loads(self) -> tuple[list[float], list[int]]:
        """(cycles, tiles) per unit."""
        n = max(1, self.units)
        loads, counts = [0.0] * n, [0] * n
        if not self.dynamic:
            for i, c in enumerate(self.tile_cycles):
                loads[i % n] += c
                counts[i % n] += 1
            return loads, counts
        free = []                                    # (time the unit frees, unit)
        for i, c in enumerate(self.tile_cycles):
            if i < n:                                # every unit starts on its own tile
                loads[i], counts[i] = c, 1
                heapq.heappush(free, (c, i))
                continue
            t, u = heapq.heappop(free)               # the first to free takes the next tile
            loads[u] = t + self.fetch_cycles + c
            counts[u] += 1
            heapq.heappush(free, (loads[u], u))
        return loads, counts

    def busiest_cycles(self) -> float:
        return max(self._loads()[0])

    @property
    def waves(self) -> int:
        """Tiles the busiest unit runs (static: ceil(tiles / units))."""
        if not self.dynamic:
            return -(-len(self.tile_cycles) // max(1, self.units))
        loads, counts = self._loads()
        return counts[loads.index(max(loads))]

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
