"""``porter kernel``: exact names win over variants, and every arch lists every kernel a
family can produce (the real families; nothing is compiled)."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.descriptor.arch import load_arch
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


@pytest.mark.parametrize("arch_name", ["hopper", "rtx-blackwell"])
def test_pipeline_listing_is_kernel_lists(arch_name):
    """The kernels stage's listing (real families, nothing compiled) names every kernel
    `porter kernel list` names, in the same supported / unsupported split."""
    from porter import kernels
    from porter.descriptor.arch import load_arch
    from porter.commands.kernel import all_variants

    from porter.pipeline.context import Context

    arch = load_arch(arch_name)
    ctx = Context(arch=arch, base=None, runbook=None, out_dir=Path("unused"), store=None)
    ours = [v for fam_name in sorted(kernels.FAMILIES) for v in ctx.variants(fam_name, arch, complete=True)]
    theirs = all_variants(arch)
    assert [(v.name, hasattr(v, "features")) for v in ours] == [(v.name, hasattr(v, "features")) for v in theirs]
    assert any(v.name.endswith(".pair") and not hasattr(v, "features") for v in ours)


def test_show_prints_params_and_tensor_maps_as_lists_not_reprs(capsys):
    assert main(["kernel", "show", "gemm.fp8", "--arch", "hopper"]) == 0
    out = capsys.readouterr().out
    spec, = find_kernel("gemm.fp8", load_arch("hopper"))
    name, ctype = spec.config["params"][0]
    assert f"{ctype} {name}" in out
    assert "('" not in out and "{'" not in out and "['" not in out     # no Python reprs anywhere


def test_show_budget_static_smem_and_setmaxnreg_registers(tmp_path, monkeypatch):
    """Dynamic smem from the spec plus static from the last build of this very spec (the
    report's sum); the launch register count with the setmaxnreg split of the roles."""
    import json

    from porter.commands.kernel import last_build, registers_text, smem_text
    from porter.pipeline.work import jsonable

    hop = load_arch("hopper")
    spec, = find_kernel("gemm.fp8", hop)
    monkeypatch.chdir(tmp_path)
    built, where = last_build(spec, hop)
    assert built is None
    assert smem_text(spec, built, where, hop) == (f"dynamic {spec.smem_bytes} B + static (known after a build: "
                                                 "porter target hopper)")
    split = f"producer {spec.config['producer_regs']} / consumer {spec.config['consumer_regs']} via setmaxnreg"
    assert split in registers_text(spec, built, where, hop)

    folder = tmp_path / "build" / "hopper" / "kernels" / "gemm.fp8"
    folder.mkdir(parents=True)
    stored = {"resources": {"registers": 168, "shared_bytes": 1024}, "spec": jsonable(spec.to_dict())}
    (folder / "resources.json").write_text(json.dumps(stored))
    built, where = last_build(spec, hop)
    assert smem_text(spec, built, where, hop) == (f"dynamic {spec.smem_bytes} B + static 1024 B (from the last "
                                                 f"build, {where}) = {spec.smem_bytes + 1024} B")
    assert registers_text(spec, built, where, hop).startswith(f"168 at launch ({split}; from the last build")
    stored["spec"]["smem_bytes"] += 16            # a build of another configuration is not this kernel's
    (folder / "resources.json").write_text(json.dumps(stored))
    assert last_build(spec, hop)[0] is None
