"""The porting plan: feature diff -> primitives, templates and kernels, in dependency order."""

from __future__ import annotations

import json

import pytest

from porter.descriptor.arch import load_arch
from porter.planning.plan import (arch_features, build_graph, feature_diff, file_needs, most_different_arch,
                         porting_plan, scan_feature_tests, scan_includes)


@pytest.fixture()
def fake(monkeypatch, tmp_path):
    import test_pipeline_support as fam

    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    return fam


def test_scanners_read_includes_and_feature_tests():
    text = '{% include "tma/tma.cuh" %}\n{%- include \'tmem/tmem.cuh\' %}\n{% if arch.has("tmem") and not arch.has( "wgmma" ) %}'
    assert scan_includes(text) == ["tma/tma.cuh", "tmem/tmem.cuh"]
    assert scan_feature_tests(text) == {"tmem", "wgmma"}
    assert file_needs("attention/wgmma_frag.cuh") == ("wgmma",)
    assert file_needs("tcgen05/tcgen05.cuh") == ("tcgen05",)
    assert file_needs("common/common.cuh") == ()


def test_hopper_to_blackwell_feature_diff():
    lost, gained = feature_diff(load_arch("hopper"), load_arch("blackwell"))
    assert lost == ["wgmma"]
    assert {"tcgen05", "tmem", "cta_pair", "fp4"} <= set(gained)


def test_plan_hopper_to_blackwell_wgmma_lost_changes_the_kernels_in_order(fake):
    plan = porting_plan(load_arch("hopper"), load_arch("blackwell"))
    wgmma_line = next(s for s in plan.summary if s.startswith("wgmma lost"))
    assert "MMA issue" in wgmma_line and "fake.*" in wgmma_line
    tmem_line = next(s for s in plan.summary if s.startswith("tmem gained"))
    assert "accumulator storage" in tmem_line and "fake.*" in tmem_line
    kinds = [i.kind for i in plan.items]
    # topological: every primitive before every template before every kernel
    assert kinds == sorted(kinds, key=["primitive", "template", "kernel"].index)
    axpy = next(i for i in plan.items if i.name == "fake.axpy")
    assert "wgmma lost" in axpy.because and "tmem gained" in axpy.because
    # the wgmma primitives (kernels_src/wgmma) are retired on blackwell, and said so (the
    # fake family never includes them, so "not used" rather than "no longer used")
    wg = [i for i in plan.items if i.kind == "primitive" and i.name == "wgmma"]
    assert wg and "not used on blackwell" in wg[0].action
    json.dumps(plan.to_dict())


def test_plan_names_real_gemm_when_registered():
    from porter import kernels

    # A family that is missing or fails to import is a failure here, never a skip: the
    # plan would silently leave its kernels out.
    assert "gemm" in kernels.FAMILIES, "the gemm family is not registered"
    kernels.family_module("gemm")
    plan = porting_plan(load_arch("hopper"), load_arch("blackwell"))
    line = next(s for s in plan.summary if s.startswith("wgmma lost"))
    assert "gemm.*" in line
    gemm_items = [i for i in plan.items if i.kind == "kernel" and i.name.startswith("gemm.")]
    assert gemm_items and all(i.because for i in gemm_items)


def test_graph_edges_follow_template_includes(fake):
    g, _ = build_graph([load_arch("blackwell")])
    # the fake spec declares tmem; real templates that include tcgen05 primitives are linked
    assert g.has_edge("feature:tmem", "kernel:fake.axpy")
    assert g.has_edge("feature:tcgen05", "primitive:tcgen05")
    # Every template that includes tma/ is linked from the tma primitive: an empty graph
    # (no include scanned) must fail here, not pass.
    tma_users = set(g.successors("primitive:tma"))
    assert {"template:gemm.cu.j2", "template:attention.cu.j2"} <= tma_users, tma_users
    assert all(n.startswith("template:") for n in tma_users)
    assert g.has_edge("template:gemm/tcgen05.cu.j2", "template:gemm.cu.j2")
    assert any(n.startswith("template:") for n in g.predecessors("kernel:fake.axpy")), \
        list(g.predecessors("kernel:fake.axpy"))


def test_most_different_arch_is_not_the_target():
    bw = load_arch("blackwell")
    other = most_different_arch(bw)
    assert other is not None and other.digest != bw.digest
    assert arch_features(other) != arch_features(bw)


def test_cli_plan_text_and_json(fake, capsys):
    from porter.cli import main

    assert main(["plan", "blackwell", "--from", "hopper"]) == 0
    out = capsys.readouterr().out
    assert "wgmma lost" in out and "in dependency order" in out
    assert main(["plan", "blackwell", "--from", "hopper", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["lost"] == ["wgmma"] and data["items"]


def test_template_file_order_inlines_included_templates_in_place():
    from porter.planning.plan import template_file_order

    order = template_file_order()
    assert "common/common.cuh" in order, f"no template includes common/common.cuh: {sorted(order)}"
    assert "tcgen05/tcgen05.cuh" in order and "tmem/tmem.cuh" in order
    # every header the templates include comes after common/, which they all include first
    assert order["common/common.cuh"] == 0
    for later in ("tcgen05/tcgen05.cuh", "tmem/tmem.cuh"):
        if later in order and "tcgen05/tcgen05.cuh" in order:
            assert order["tcgen05/tcgen05.cuh"] <= order[later]


def test_block_scale_headers_need_tensor_memory():
    # They stage scales with tcgen05.cp into TMEM: an arch with block-scaled MMA but no
    # TMEM (sm_120a) must leave them out rather than fail to compile them.
    from porter.planning.plan import file_needs

    assert {"block_scale_mx", "tcgen05", "tmem"} <= set(file_needs("block_scale/block_scale.cuh"))


@pytest.fixture(scope="module")
def real_h2b():
    from porter import kernels

    assert {"gemm", "attention"} <= set(kernels.FAMILIES), "the gemm and attention families must be registered"
    for family in ("gemm", "attention"):
        kernels.family_module(family)   # an import error fails these tests, it does not skip them
    return porting_plan(load_arch("hopper"), load_arch("blackwell"))


def test_kernel_reasons_come_from_the_features_its_specs_use(real_h2b):
    items = {i.name: i for i in real_h2b.items if i.kind == "kernel"}
    # bf16 uses no block scales: the template's include of block_scale/ must not leak in
    assert items["gemm.bf16"].because == ["tcgen05 gained", "tmem gained", "wgmma lost"]
    assert "block_scale_mx gained" not in items["gemm.nvfp4"].because
    # nvfp4 is not built on hopper, so it loses nothing there
    assert items["gemm.nvfp4"].because == ["block_scale_nvfp4 gained", "fp4 gained", "tcgen05 gained", "tmem gained"]
    assert "block_scale_mx gained" in items["gemm.mxfp8"].because
    assert {"cta_pair gained", "tcgen05 gained"} <= set(items["attention.hd128.pair"].because)
    # a kernel the base could not build is new on the target, not a rebuild
    assert "new on blackwell" in items["gemm.bf16.pair"].action
    assert items["gemm.bf16"].action == "rebuild and re-validate"
    wgmma = next(s for s in real_h2b.summary if s.startswith("wgmma lost"))
    assert "attention.*" in wgmma and "gemm.*" in wgmma


def test_templates_the_target_no_longer_renders_are_labelled(real_h2b):
    templates = {i.name: i.action for i in real_h2b.items if i.kind == "template"}
    for name in ("gemm/wgmma.cu.j2", "attention/wgmma.cu.j2"):
        assert templates[name] == "no longer used on blackwell", (name, templates[name])
    for name in ("gemm/tcgen05.cu.j2", "attention/tcgen05.cu.j2", "gemm.cu.j2"):
        assert templates[name].startswith("re-render"), (name, templates[name])
    prims = {i.name: i.action for i in real_h2b.items if i.kind == "primitive"}
    assert prims["wgmma"].startswith("no longer used on blackwell")
    kinds = [i.kind for i in real_h2b.items]
    assert kinds == sorted(kinds, key=["primitive", "template", "kernel"].index)


@pytest.fixture(scope="module")
def real_b2rtx():
    from porter import kernels

    assert {"gemm", "attention"} <= set(kernels.FAMILIES), "the gemm and attention families must be registered"
    for family in ("gemm", "attention"):
        kernels.family_module(family)
    return porting_plan(load_arch("blackwell"), load_arch("rtx-blackwell"))


def test_a_target_generation_with_its_template_paths_needs_no_path_step(real_b2rtx):
    # gemm/mma_sync.cu.j2 and attention/mma_sync.cu.j2 exist: nothing waits on a new path
    # (test_needs_new_path_* keeps the step logic covered for a generation without one).
    assert not [i for i in real_b2rtx.items if i.action.startswith("write a ")]
    kinds = [i.kind for i in real_b2rtx.items]
    assert kinds == sorted(kinds, key=["primitive", "template", "kernel"].index)
    assert "write a mma_sync path" not in real_b2rtx.text()
    json.dumps(real_b2rtx.to_dict())


def test_kernels_built_by_the_new_path_are_rebuilt(real_b2rtx):
    actions = {i.name: i.action for i in real_b2rtx.items if i.kind == "kernel"}
    for name in ("gemm.bf16", "gemm.fp8", "gemm.mxfp8", "gemm.nvfp4", "attention.hd64", "attention.hd128.causal"):
        assert not actions[name].startswith(("blocked", "unsupported")), (name, actions[name])
    # a pair form also needs cta_pair, which rtx-blackwell lacks: a new path would not build it
    assert actions["gemm.bf16.pair"].endswith("nothing to rebuild")
    assert "cta_pair" in actions["gemm.bf16.pair"]


def test_needs_new_path_follows_the_templates_and_the_missing_features():
    from porter.planning.plan import family_generations, needs_new_path

    assert family_generations("gemm") == {"wgmma", "tcgen05", "mma_sync"}
    assert family_generations("no-such-family") == set()
    # every generation porter knows now has a gemm template: none is missing a path
    assert not needs_new_path("gemm", ("tcgen05|wgmma",), "mma_sync")
    assert not needs_new_path("gemm", ("tcgen05", "tmem"), "mma_sync")
    assert not needs_new_path("gemm", ("cta_pair", "tcgen05", "tmem"), "mma_sync")
    # hopper has a wgmma template: block-scaled GEMM there lacks the capability, not a path
    assert not needs_new_path("gemm", ("block_scale_mx", "tcgen05", "tmem"), "wgmma")
    assert not needs_new_path("gemm", ("tcgen05|wgmma",), "none")
    # a family without a template folder is blocked only when it says so itself
    assert needs_new_path("no-such-family", ("wgmma|tcgen05",), "mma_sync")
    assert not needs_new_path("no-such-family", ("tcgen05", "tmem"), "mma_sync")


def test_hopper_to_blackwell_has_no_path_step(real_h2b):
    assert not any(i.action.startswith(("write a ", "blocked")) for i in real_h2b.items)


def test_plan_lists_kernels_rescheduled_by_figures_alone(real_h2b):
    """The megakernel uses no feature that changes, but its grid follows the SM count
    (issue #11): a plan that leaves it out hides a change."""
    items = {i.name: i for i in real_h2b.items if i.kind == "kernel"}
    mk = items["megakernel.llama-decode"]
    assert "SMs 132 -> 148" in mk.because and "config grid: 132 -> 148" in mk.because
    assert mk.action.startswith("re-plan")
    assert any("re-plan megakernel.llama-decode" in s for s in real_h2b.summary)
    kinds = [i.kind for i in real_h2b.items]
    assert kinds == sorted(kinds, key=["primitive", "template", "kernel"].index)


def test_config_changes_name_what_differs():
    from types import SimpleNamespace

    from porter.planning.plan import config_changes, figure_changes

    a = SimpleNamespace(smem_bytes=1, threads=128, cluster=(1, 1, 1), config={"grid": 132, "x": [1] * 40})
    b = SimpleNamespace(smem_bytes=2, threads=128, cluster=(1, 1, 1), config={"grid": 148, "x": [2] * 40})
    assert config_changes(a, b) == ["smem_bytes: 1 -> 2", "grid: 132 -> 148", "x changes"]
    assert config_changes(a, a) == []
    h, w = SimpleNamespace(sm_count=132), SimpleNamespace(sm_count=148)
    assert figure_changes(h, w) == ["SMs 132 -> 148"] and figure_changes(h, h) == []
