"""The attention model deals tiles to the persistent units in the kernel's own walk.

decode_tile (templates/attention.cu.j2) takes heads inner and the last Q tile first, so
under a causal mask the longest tiles go out in the first wave and the short ones fill the
tail. A model that walked heads outer and Q tiles first-to-last put a whole head's long
tiles on the same few units and predicted H200 causal attention 1.47x slow (538 against
785 TFLOP/s at 1x16x16x16384x16384).
"""

from __future__ import annotations

import re

from porter.descriptor.arch import load_arch
from porter.kernels.knobs import spec_with_knobs
from porter.paths import data_dir
from porter.timing import attention_model
from porter.timing.figures import Figures


def test_decode_tile_is_heads_inner_longest_first():
    text = (data_dir("templates") / "attention.cu.j2").read_text()
    body = text[text.index("Tile decode_tile("):]
    body = body[:body.index("return t;")]
    assert re.search(r"int bh = linear % \(p\.batch \* p\.heads_q\);", body), body
    assert re.search(r"int qt = p\.q_tiles - 1 - linear / \(p\.batch \* p\.heads_q\);", body), body


def test_model_walk_matches_decode_tile():
    arch = load_arch("hopper")
    spec = spec_with_knobs(arch, "attention.hd128.causal", {})
    b, h, s = 1, 3, 1024
    out = attention_model.model(spec, arch, Figures.of(arch), f"{b}x{h}x{h}x{s}x{s}")
    walk = out["tile_kv"]
    bm, bn = int(spec.config["block_m"]), int(spec.config["block_n"])
    q_tiles = -(-s // bm)
    assert len(walk) == b * h * q_tiles
    for linear, n in enumerate(walk):
        qt = q_tiles - 1 - linear // (b * h)          # decode_tile's Q tile
        assert n == min(-(-s // bn), ((qt + 1) * bm - 1) // bn + 1), (linear, qt, n)
    assert walk[0] == max(walk) and walk[-1] == min(walk)
    assert list(out["schedule"].tile_cycles) == sorted(out["schedule"].tile_cycles, reverse=True)
