"""The shapes each kernel family is emulated at (``porter validate --device emu``, the
emulation stage of ``porter target``, the CI cases in tests/test_emu_*.py).

Two shapes per kernel, both small enough for the simulator:

* the **smallest**: one tile (GEMM: a single k-block, the ``prev_stage`` edge of the ring;
  attention: grouped-query heads with ragged sequence lengths, seq_q > seq_k);
* the **reach** shape, for the bugs that only show away from round numbers: a **remainder
  tile** (the persistent grid's tiles are not a multiple of its CTAs, so one worker walks
  one tile more than the others), several tiles per worker (the TMA ring's phases and, on
  tcgen05, the double-buffered TMEM accumulators wrap), **grouped-query attention** (several
  query heads per K/V head), **ragged sequence lengths** (neither seq_q nor seq_k a multiple
  of the tile, seq_q < seq_k); for the megakernel the grouped-query model.

The emulation stage runs both shapes and the smallest again under a **second seeded warp
order** (``porter.runtime.emulated_runs.emulate(orders=2)``): bugs that need one particular
interleaving get two chances by default.

The emulated device has ``EMULATED_SMS`` SMs: the persistent kernels' worker count, and so
the remainder, is computed from it and the kernel's cluster, never from an arch's name.
"""

from __future__ import annotations

import math

EMULATED_SMS = 4          # porter.runtime.emulated.EmuDevice's default sm_count


def workers(spec, sms: int = EMULATED_SMS) -> int:
    """Persistent workers (CTAs, or clusters of them) the kernel gets on the emulated device."""
    cluster = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    slots = min(int(spec.config.get("grid_ctas") or sms), sms)
    return max(1, slots // cluster)


def remainder_tiles(spec) -> int:
    """Tiles for the reach shape: one more than a whole number of tiles per worker. Where the
    accumulators live in double-buffered Tensor Memory (tcgen05) the first worker walks three
    tiles, so a buffer is reused; elsewhere two."""
    w = workers(spec)
    return (2 * w + 1) if spec.config.get("mainloop") == "tcgen05" else (w + 1)


def _grid_of(tiles: int) -> tuple[int, int]:
    """(rows, cols) of units for ``tiles``: a square when it is one (a raster over both
    dimensions), else one column."""
    r = math.isqrt(tiles)
    return (r, r) if r * r == tiles else (tiles, 1)


def gemm_shapes(spec) -> list[tuple]:
    from porter.kernels import gemm

    um, un, uk = gemm.shape_multiples(spec)
    k_block = max(uk, int(spec.config.get("tile_k", uk)))
    rows, cols = _grid_of(remainder_tiles(spec))
    return [(um, un, k_block), (rows * um, cols * un, 4 * k_block)]


def attention_shapes(spec) -> list[tuple]:
    """(batch, heads_q, heads_kv, seq_q, seq_k)."""
    bm = int(spec.config["block_m"])
    tiles = remainder_tiles(spec)
    # q-tiles per head: the largest divisor of the tile count up to 3 that leaves >= 2
    # query heads (grouped-query: all of them on one K/V head)
    q_tiles = max(d for d in (1, 2, 3) if tiles % d == 0 and tiles // d >= 2)
    seq_q = (q_tiles - 1) * bm + (44 if q_tiles > 1 else 100)      # the last q-tile is partial
    return [(1, 2, 1, 160, 100), (1, tiles // q_tiles, 1, seq_q, seq_q + 130)]


def emulation_shapes(spec, smallest: bool = False) -> list:
    if spec.family == "gemm":
        shapes = gemm_shapes(spec)
    elif spec.family == "attention":
        shapes = attention_shapes(spec)
    elif spec.family == "megakernel":
        # the tiny Llama-shaped models (the second with grouped-query attention, 4 query
        # heads per K/V head), planned on the emulated device's few queues
        shapes = ["tiny", "tiny-gqa4"]
    else:
        return []
    return shapes[:1] if smallest else shapes
