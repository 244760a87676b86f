"""K and V come from HBM as often as the attention kernel's tile walk re-reads them past the
L2 (porter.timing.attention_model.kv_hbm_bytes). decode_tile walks kv heads inner, so a
wave of persistent tiles streams many heads' K/V at once: with few heads (or short
sequences) that fits in the L2 and K/V are read once; with many heads and long sequences
(the FA3 paper's ablation shape, 4 x 16 heads x 8448) every wave re-reads them. Every
figure here is predicted by porter's timing model, not measured."""

from __future__ import annotations

from porter.descriptor.arch import load_arch
from porter.kernels.knobs import spec_with_knobs
from porter.timing import attention_model, predict
from porter.timing.attention_model import kv_hbm_bytes
from porter.timing.figures import Figures

MB = 1 << 20


def test_tiles_of_one_head_in_one_wave_read_its_kv_once():
    # 4 units, 2 heads, 2 tiles each, all in one wave: each head's 10 tiles read once
    groups = [0, 1, 0, 1]
    assert kv_hbm_bytes(groups, [10] * 4, 4, 1.0, l2_bytes=1e9) == 20.0


def test_a_later_wave_hits_the_l2_only_if_what_streamed_in_between_fits():
    # 2 units: wave 0 reads heads 0 and 1, wave 1 reads them again (10 tiles of 1 MB each)
    groups, kv = [0, 1, 0, 1], [10] * 4
    fits = kv_hbm_bytes(groups, kv, 2, MB, l2_bytes=50 * MB)       # 20 MB per wave streamed
    thrash = kv_hbm_bytes(groups, kv, 2, MB, l2_bytes=15 * MB)
    assert fits == 20 * MB                  # read once
    assert thrash == 40 * MB                # read again in wave 1


def test_many_heads_at_long_sequences_re_read_kv_every_wave_on_h100():
    arch = load_arch("hopper").for_product("H100 SXM")
    spec = spec_with_knobs(arch, "attention.hd128", {})
    fig = Figures.of(arch)
    b, h, s, d = 4, 16, 8448, 128
    once = b * 2 * h * s * d * 2                      # K and V, each read once
    out = attention_model.model(spec, arch, fig, f"{b}x{h}x{h}x{s}x{s}")
    qo = b * 2 * h * s * d * 2 + b * h * s * 4        # Q in, O out, LSE
    kv = out["hbm_bytes"] - qo
    waves = -(-(b * h * (s // 128)) // fig.sm_count)
    assert kv > 10 * once                             # 64 heads' K/V (277 MB) per wave > the 50 MB L2
    assert kv <= waves * once * 1.0001
    # few heads: a wave's K/V fit in the L2, read once
    small = attention_model.model(spec, arch, fig, "1x2x2x4096x4096")
    q_o, k_v, lse = 2 * 2 * 4096 * d * 2, 2 * 2 * 4096 * d * 2, 2 * 4096 * 4
    assert small["hbm_bytes"] == q_o + k_v + lse


def test_the_re_reads_bind_the_fa3_ablation_shape_on_h100_not_on_h200():
    hop = load_arch("hopper")
    spec = spec_with_knobs(hop, "attention.hd128", {})
    h100 = predict(hop, spec, product="H100 SXM", shape="4x16x16x8448x8448")
    h200 = predict(hop, spec, product="H200 SXM", shape="4x16x16x8448x8448")
    assert h100.bound == "hbm"                        # 3.35 TB/s
    assert h200.bound != "hbm" and h200.tflops > h100.tflops   # 4.8 TB/s
