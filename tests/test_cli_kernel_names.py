"""``porter kernel``: exact names win over variants, and every arch lists every kernel a
family can produce (the real families; nothing is compiled)."""

from __future__ import annotations

import pytest

from porter.arch import load_arch
from porter.cli import main
from porter.commands.kernel import all_variants, find_kernel, match_kernels


def _shown(out: str) -> list[str]:
    """Kernel names the show command printed a heading for."""
    return [line.split()[0] for line in out.splitlines() if " on " in line and line.split()[0].count(".")]


def test_exact_name_shows_only_that_kernel(capsys):
    assert main(["kernel", "show", "gemm.nvfp4", "--arch", "blackwell"]) == 0
    assert _shown(capsys.readouterr().out) == ["gemm.nvfp4"]
    assert main(["kernel", "show", "gemm.bf16", "--arch", "hopper"]) == 0
    out = capsys.readouterr().out
    assert _shown(out) == ["gemm.bf16"] and "unsupported" not in out


def test_globs_and_variants_select_many():
    bw = load_arch("blackwell")
    assert [s.name for s in find_kernel("gemm.nvfp4*", bw)] == ["gemm.nvfp4", "gemm.nvfp4.pair"]
    assert {s.name for s in find_kernel("attention.bf16.hd128", bw)} == {"attention.hd128", "attention.hd128.pair"}
    every = all_variants(bw)
    assert {s.family for s in match_kernels(every, "gemm")} == {"gemm"} and len(match_kernels(every, "gemm")) == 8


def test_render_exact_pair_name_renders_the_pair(capsys):
    assert main(["kernel", "render", "gemm.bf16.pair", "--arch", "blackwell"]) == 0
    assert "porter_gemm_bf16_pair_tcgen05" in capsys.readouterr().out


@pytest.mark.parametrize("arch", ["hopper", "blackwell", "rtx-blackwell"])
def test_every_arch_lists_the_same_kernels(arch):
    names = {v.name for v in all_variants(load_arch(arch))}
    others = [{v.name for v in all_variants(load_arch(o))} for o in ("hopper", "blackwell") if o != arch]
    for other in others:
        assert other == names


def test_hopper_lists_attention_pairs_as_unsupported_with_the_reason(capsys):
    hop = load_arch("hopper")
    pair = next(v for v in all_variants(hop) if v.name == "attention.hd128.pair")
    assert not hasattr(pair, "features") and "cta_pair" in pair.missing and "tcgen05" in pair.missing
    assert main(["kernel", "list", "--arch", "hopper"]) == 0
    out = capsys.readouterr().out
    assert "attention.hd128.pair" in out and "attention.hd64.causal.pair" in out
    assert "kernel (spec name)" in out and "variant" in out
    assert main(["kernel", "show", "attention.hd128.pair", "--arch", "hopper"]) == 0
    assert "unsupported, needs tcgen05, tmem, cta_pair" in capsys.readouterr().out
