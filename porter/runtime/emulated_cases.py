"""The shapes each kernel family is emulated at (``porter validate --device emu``, the
emulation stage of ``porter target``, the CI cases).

Small shapes that still walk every path: for a GEMM a single k-block, then a problem of
several cluster units on the emulated device's one cluster (the persistent scheduler walks
several tiles, the TMA ring's phases wrap); for attention ragged sequence lengths with
grouped-query heads, causal with seq_q > seq_k and seq_q < seq_k.
"""

from __future__ import annotations


def emulation_shapes(spec, smallest: bool = False) -> list[tuple]:
    if spec.family == "gemm":
        from porter.kernels import gemm

        mult = gemm.shape_multiples(spec)
        tile_k = int(spec.config.get("tile_k", mult[2]))
        k_block = max(mult[2], tile_k)
        shapes = [(mult[0], mult[1], k_block), (2 * mult[0], 2 * mult[1], 4 * k_block)]
        if spec.config.get("mainloop") == "tcgen05":   # 3 tiles per persistent CTA (pair) of the 4-SM device
            shapes[1] = (4 // int(spec.config.get("cta_group", 1)) * mult[0], 3 * mult[1], 4 * k_block)
    elif spec.family == "attention":
        # (batch, heads_q, heads_kv, seq_q, seq_k)
        shapes = [(1, 2, 1, 160, 100), (1, 2, 2, 100, 230)]
        if spec.config.get("mainloop") == "tcgen05":   # >= 3 tiles per persistent CTA (pair), seq_q < seq_k
            shapes[1] = (1, 4, 2, 300, 420)
    elif spec.family == "megakernel":
        # the tiny Llama-shaped models, planned on the emulated device's few queues
        shapes = ["tiny", "tiny-gqa4"]
    else:
        return []
    return shapes[:1] if smallest else shapes
