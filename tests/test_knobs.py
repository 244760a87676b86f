"""Knobs (``--set``): every family's configuration overridable, held to the same budgets.

The defaults stay the defaults (byte-identical sources), a knob that changes the kernel
changes its source, an impossible combination is one PorterError line naming the knob and
the limit, and knobs reach the pipeline's cache keys."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import family_module
from porter.kernels import knobs as K
from porter.kernels.base import KernelSpec

ARCHS = ("ampere", "hopper", "blackwell", "rtx-blackwell")


@pytest.fixture(scope="module")
def archs():
    return {name: load_arch(name) for name in ARCHS}


def _built(arch):
    return [s for fam in ("gemm", "attention", "megakernel") for s in family_module(fam).variants(arch)
            if isinstance(s, KernelSpec)]


# ---- parsing --------------------------------------------------------------------------------------

def test_parse_sets_types_values():
    got = K.parse_sets(["stages=3", "tile=128x256", "persistent=off", "pingpong=true",
                        "accumulation=tensor-core", "gemm.bf16:tile_n=128"])
    assert got == {"stages": 3, "tile": (128, 256), "persistent": False, "pingpong": True,
                   "accumulation": "tensor-core", "gemm.bf16:tile_n": 128}


@pytest.mark.parametrize("items, words", [
    (["stages"], "expected KEY=VALUE"),
    (["stages="], "expected KEY=VALUE"),
    (["Stages=3"], "not a knob name"),
    (["stages=3", "stages=4"], "already set to 3"),
])
def test_parse_sets_rejects_bad_items_in_one_line(items, words):
    with pytest.raises(PorterError) as exc:
        K.parse_sets(items)
    assert words in str(exc.value) and "\n" not in str(exc.value)


# ---- defaults stay the defaults ---------------------------------------------------------------------

@pytest.mark.parametrize("arch_name", ARCHS)
def test_default_knobs_render_the_default_source_and_are_legal(archs, arch_name):
    arch = archs[arch_name]
    for spec in _built(arch):
        knobs = K.default_knobs(arch, spec.name)
        space = K.knob_space(arch, spec.name)
        assert knobs, spec.name
        for name, value in knobs.items():
            assert name in space, (spec.name, name)
            # integer ranges list a ladder; every other default is one of the listed values
            if name not in ("grid_ctas", "group_m", "pages"):
                assert value in space[name], (spec.name, name, value, space[name])
        assert K.check_knobs(arch, spec.name, knobs) is None
        again = K.spec_with_knobs(arch, spec.name, knobs)
        module = family_module(spec.family)
        assert module.render(again, arch) == module.render(spec, arch), spec.name
        # the same configuration; a knobbed spec also records its knobs and an explicit grid
        assert {k: again.config[k] for k in spec.config} == dict(spec.config)
        assert set(again.config) - set(spec.config) <= {"knobs", "grid_ctas", "tile_order"}
        assert again.config.get("tile_order", "m") == "m"
        assert again.config.get("grid_ctas", arch.sm_count) == spec.config.get("grid_ctas", arch.sm_count)
        assert K.spec_with_knobs(arch, spec.name, {}) == spec


# ---- a knob changes the kernel -------------------------------------------------------------------

CHANGES = [
    ("hopper", "gemm.fp8", {"promote_every_k": 256}, "PROMOTE_STAGES"),
    ("hopper", "gemm.bf16", {"consumers": 1}, "constexpr int CONSUMERS = 1;"),
    ("hopper", "gemm.bf16", {"cluster_m": 1, "stages": 2}, "constexpr int STAGES = 2;"),
    ("hopper", "gemm.bf16", {"group_m": 1}, "constexpr int GROUP_M = 1;"),
    ("blackwell", "gemm.bf16", {"acc_buffers": 1, "tile": (128, 128)}, "constexpr int ACC_BUFFERS = 1;"),
    ("blackwell", "gemm.nvfp4.pair", {"stages": 3}, "constexpr int STAGES = 3;"),
    ("ampere", "gemm.bf16", {"warp_m": 32, "warp_n": 32, "tile": (64, 64)}, "constexpr int WARP_M = 32;"),
    ("rtx-blackwell", "gemm.fp8", {"epilogue": "direct"}, None),
    ("rtx-blackwell", "gemm.fp8", {"promote_every_k": 256}, "PROMOTE_STAGES = 2"),
    ("hopper", "gemm.bf16", {"tile_order": "n"}, "tile_order n"),
    ("blackwell", "gemm.fp8.pair", {"tile_order": "n"}, "tile_order n"),
    ("hopper", "attention.hd64", {"pingpong": False}, None),
    ("hopper", "attention.hd128", {"consumers": 1}, "kConsumerWarpgroups = 1;"),
    ("blackwell", "attention.hd128", {"stages": 2}, None),
    ("ampere", "attention.hd128", {"block_n": 32}, None),
    ("hopper", "megakernel.llama-decode", {"compute_warps": 4}, None),
]


@pytest.mark.parametrize("arch_name, kernel, knobs, shows", CHANGES)
def test_a_knob_changes_the_rendered_kernel(archs, arch_name, kernel, knobs, shows):
    arch = archs[arch_name]
    default = K.spec_with_knobs(arch, kernel, None)
    spec = K.spec_with_knobs(arch, kernel, knobs)
    module = family_module(default.family)
    source = module.render(spec, arch)
    assert source != module.render(default, arch)
    if shows:
        assert shows in source
    now = module.knobs_of(arch, spec)
    for name, value in knobs.items():
        if name != "tile":
            assert now[name] == value


def test_tile_order_n_covers_every_tile_once_grouped_by_columns():
    from porter.kernels import gemm

    num_m, num_n, group, grid = 6, 10, 4, 7
    tiles = [t for cta in range(grid) for t in gemm.tile_order(num_m, num_n, group, cta, grid, order_by="n")]
    assert sorted(tiles) == [(m, n) for m in range(num_m) for n in range(num_n)]
    walk = gemm.tile_order(num_m, num_n, group, order_by="n")
    assert walk[:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]   # along a row inside 4 tile-columns


def test_persistent_off_launches_one_cta_per_tile(archs):
    from porter.runtime.gemm import _grid

    arch = archs["hopper"]
    spec = K.spec_with_knobs(arch, "gemm.bf16", {"persistent": False})
    assert spec.config["persistent"] is False
    m, n = 4096, 4096
    units = (m // spec.config["shape_multiple"][0]) * (n // spec.config["shape_multiple"][1])
    assert units > arch.sm_count and _grid(spec, m, n) == 2 * units   # clusters of 2 CTAs, one unit each
    default = K.spec_with_knobs(arch, "gemm.bf16", None)
    assert _grid(default, m, n) == arch.sm_count


# ---- illegal combinations: one line naming the knob and the limit --------------------------------

ILLEGAL = [
    ("hopper", "gemm.bf16", {"stages": 9}, "stages=9", "2..8"),
    ("hopper", "gemm.bf16", {"tile_n": 256, "stages": 5}, "stages=5", "smem_per_block_bytes"),
    ("hopper", "gemm.fp8", {"consumers": 1, "tile_n": 256, "accumulation": "promoted"}, "tile_n=256", "setmaxnreg"),
    ("hopper", "gemm.bf16", {"tile_n": 100}, "tile_n=100", "legal values"),
    ("hopper", "gemm.bf16", {"cluster_m": 16}, "cluster_m=16", "max_portable"),
    ("hopper", "gemm.bf16", {"grid_ctas": 7}, "grid_ctas=7", "multiple of 2"),
    ("hopper", "gemm.bf16", {"promote_every_k": 128}, "promote_every_k=128", "never promotes"),
    ("hopper", "gemm.bf16", {"stagez": 3}, "stagez", "its knobs"),
    ("blackwell", "gemm.nvfp4", {"tile_n": 256, "stages": 4}, "stages=4", "smem_per_block_bytes"),
    ("blackwell", "gemm.bf16", {"tile": (64, 128)}, "tile_m=64", "TMEM lane"),
    ("blackwell", "attention.hd128", {"block_n": 256}, "block_n=256", "tmem.columns"),
    ("hopper", "attention.hd128", {"block_n": 256}, "block_n=256", "setmaxnreg"),
    ("hopper", "attention.hd128", {"stages": 4}, "stages=4", "smem_per_block_bytes"),
    ("hopper", "attention.hd128", {"consumers": 3}, "consumers=3", "setmaxnreg"),
    ("hopper", "attention.hd64", {"consumers": 1, "pingpong": True}, "pingpong=true", "consumers=2"),
    ("ampere", "attention.hd128", {"row_tiles": 2}, "row_tiles=2", "registers"),
    ("ampere", "gemm.bf16", {"tile": (256, 256)}, "tile_m=256", "registers"),
    ("hopper", "megakernel.llama-decode", {"pages": 12}, "pages=12", "at most 11"),
    ("rtx-blackwell", "gemm.bf16", {"promote_every_k": 256}, "promote_every_k=256", "never promotes"),
    ("rtx-blackwell", "gemm.fp8", {"promote_every_k": 100}, "promote_every_k=100", "multiple of TILE_K 128"),
    ("hopper", "gemm.bf16", {"tile_order": "diagonal"}, "tile_order=diagonal", "legal values: m, n"),
]


@pytest.mark.parametrize("arch_name, kernel, knobs, names, limit", ILLEGAL)
def test_illegal_knobs_are_one_line_naming_knob_and_limit(archs, arch_name, kernel, knobs, names, limit):
    arch = archs[arch_name]
    why = K.check_knobs(arch, kernel, knobs)
    assert why is not None and "\n" not in why
    assert why.startswith(kernel) and names in why and limit in why, why
    with pytest.raises(PorterError):
        K.spec_with_knobs(arch, kernel, knobs)


def test_knob_space_follows_the_descriptor(archs):
    # Hopper: clusters with multicast; consumer warpgroups within max_threads_per_block.
    hop = K.knob_space(archs["hopper"], "gemm.bf16")
    assert hop["cluster_m"][0] == 1 and max(hop["cluster_m"]) == archs["hopper"].cluster.max_portable
    # Ampere has no clusters: the mma.sync path has no cluster knob at all; sm_count bounds the grid.
    amp = K.knob_space(archs["ampere"], "gemm.bf16")
    assert "cluster_m" not in amp and max(amp["grid_ctas"]) == archs["ampere"].sm_count
    # Block-scaled tcgen05 tiles take whole 128-row scale chunks only.
    assert all(n % 128 == 0 for n in K.knob_space(archs["blackwell"], "gemm.nvfp4")["tile_n"])
    with pytest.raises(PorterError, match="unsupported on hopper"):
        K.knob_space(archs["hopper"], "gemm.nvfp4")


# ---- several kernels: unscoped knobs go where they exist, KERNEL:key to KERNEL ---------------------

def test_apply_knobs_unscoped_and_scoped(archs):
    arch = archs["hopper"]
    specs = _built(arch)
    out, notes = K.apply_knobs(arch, specs, K.parse_sets(["pingpong=false"]))
    by = {s.name: s for s in out}
    assert by["attention.hd64"].config["pingpong"] is False
    assert by["gemm.bf16"] == next(s for s in specs if s.name == "gemm.bf16")
    assert len(notes) == 1 and "gemm.bf16" in notes[0] and "left at the default" in notes[0]
    out, _ = K.apply_knobs(arch, specs, K.parse_sets(["gemm.fp8:stages=3"]))
    by = {s.name: s for s in out}
    assert by["gemm.fp8"].config["stages"] == 3 and by["gemm.bf16"].config["stages"] != 3
    with pytest.raises(PorterError, match="none of the selected kernels"):
        K.apply_knobs(arch, specs, {"bogus": 1})
    with pytest.raises(PorterError, match="no such knob"):
        K.apply_knobs(arch, specs, {"gemm.fp8:pingpong": True})


# ---- the pipeline never reuses a default stage result for a knobbed run ---------------------------

def test_knobs_enter_the_cached_stage_key(tmp_path):
    from types import SimpleNamespace

    from porter.pipeline.context import PASSED, Context, StageResult
    from porter.pipeline.store import StageStore

    calls = []

    def compute():
        calls.append(1)
        return StageResult("kernels", "kernels", "k", PASSED, "ok")

    stage = SimpleNamespace(id="kernels")
    store = StageStore(tmp_path / ".stages")
    for knobs in ({}, {}, {"stages": 3}, {"stages": 3}, {"stages": 4}):
        ctx = Context(arch=None, base=None, runbook=None, out_dir=tmp_path, store=store, knobs=knobs)
        ctx.cached_stage(stage, "same-inputs", compute)
    assert len(calls) == 3   # default, stages=3, stages=4; the repeats are hits


# ---- the CLI ------------------------------------------------------------------------------------

def test_cli_render_and_show_take_set(capsys):
    from porter.cli import main

    assert main(["kernel", "render", "gemm.bf16", "--arch", "hopper"]) == 0
    default = capsys.readouterr().out
    assert main(["kernel", "render", "gemm.bf16", "--arch", "hopper", "--set", "stages=2"]) == 0
    knobbed = capsys.readouterr().out
    assert knobbed != default and "constexpr int STAGES = 2;" in knobbed
    assert main(["kernel", "show", "gemm.bf16", "--arch", "hopper", "--set", "tile=128x128"]) == 0
    assert "legal values" in capsys.readouterr().out
    assert main(["kernel", "render", "gemm.bf16", "--arch", "hopper", "--set", "stages=99"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "stages=99" in err


# ---- compiled and sass-checked (the compile cache makes reruns cheap) -----------------------------

COMPILED = [
    ("hopper", "gemm.fp8", {"promote_every_k": 256}),
    ("hopper", "gemm.bf16", {"consumers": 1, "cluster_m": 1, "stages": 2}),
    ("blackwell", "gemm.bf16", {"tile": (128, 128), "acc_buffers": 1, "stages": 2}),
    ("ampere", "gemm.bf16", {"warp_m": 32, "warp_n": 32, "tile": (64, 64)}),
    ("rtx-blackwell", "gemm.fp8", {"promote_every_k": 256, "tile_order": "n"}),
    ("hopper", "attention.hd64", {"pingpong": False, "block_n": 64, "stages": 2}),
    ("blackwell", "attention.hd128", {"stages": 2}),
    ("hopper", "attention.hd128.causal", {"consumers": 3, "block_n": 64}),
    ("hopper", "megakernel.llama-decode", {"compute_warps": 4, "pages": 4}),
]


@pytest.mark.parametrize("arch_name, kernel, knobs", COMPILED)
def test_knobbed_kernels_compile_and_pass_their_sass_checks(archs, arch_name, kernel, knobs):
    from porter.kernels.build import build_kernel
    from porter.levels import Level

    arch = archs[arch_name]
    build = build_kernel(K.spec_with_knobs(arch, kernel, knobs), arch)
    assert build.level >= Level.SASS_CHECKED, [c.to_dict() for c in build.checks if not c.passed]


# ---- emulated: one knobbed kernel per family runs in porter's PTX simulator -------------------------

EMULATED = [
    ("blackwell", "gemm.bf16", {"tile": (128, 128), "acc_buffers": 1, "stages": 2}),
    ("hopper", "gemm.fp8", {"promote_every_k": 256, "tile_order": "n"}),
    ("rtx-blackwell", "gemm.fp8", {"promote_every_k": 256, "tile_order": "n"}),
    ("hopper", "attention.hd64", {"pingpong": False, "block_n": 64, "stages": 2}),
    ("hopper", "megakernel.llama-decode", {"compute_warps": 4, "pages": 4}),
]


@pytest.mark.parametrize("arch_name, kernel, knobs", EMULATED)
def test_knobbed_kernels_pass_in_the_simulator(archs, arch_name, kernel, knobs):
    """Executed in porter's PTX simulator (not on a GPU) at the smallest emulation shape."""
    from porter.runtime.emulated_runs import emulate

    arch = archs[arch_name]
    result = emulate(K.spec_with_knobs(arch, kernel, knobs), arch, seeds=1, smallest=True)
    assert result["status"] == "passed", result.get("reason")


def test_cli_validate_emulates_a_knobbed_kernel(capsys):
    """`porter validate ARCH --kernel K --device emu --set ...` runs the knobbed kernel (one
    consumer warpgroup, no cluster: a 64-row tile) in porter's PTX simulator, not the default."""
    import json

    from porter.cli import main

    code = main(["validate", "hopper", "--kernel", "gemm.bf16", "--device", "emu", "--seeds", "1", "--json",
                 "--set", "consumers=1", "--set", "cluster_m=1", "--set", "stages=2"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["passed"], report
    assert [r["name"] for r in report["results"]] == ["gemm.bf16"]


def test_cli_target_refuses_bad_knobs_before_any_stage(tmp_path, capsys):
    from porter.cli import main

    out = tmp_path / "t"
    assert main(["target", "hopper", "--kernel", "gemm.bf16", "--out", str(out), "--set", "bogus=1"]) == 2
    assert "has a knob 'bogus'" in capsys.readouterr().err
    assert main(["target", "hopper", "--kernel", "gemm", "--out", str(out), "--set", "gemm.fp8:stages=99"]) == 2
    assert "gemm.fp8: --set stages=99" in capsys.readouterr().err
    assert not out.exists()


def test_set_applies_on_top_of_a_tuned_configuration(archs):
    """A tuned default records its knobs in its config: --set changes that configuration
    (the tuned knobs stay unless overridden; a tile given as tile=MxN replaces tile_n)."""
    arch = archs["hopper"]
    tuned = family_module("gemm").spec_with_knobs(arch, "gemm.bf16", {"stages": 3, "tile_n": 128})
    assert K.on_top_of(tuned, {"group_m": 2}) == {"stages": 3, "tile_n": 128, "group_m": 2}
    assert K.on_top_of(tuned, {"tile": (64, 256)}) == {"stages": 3, "tile": (64, 256)}
    assert K.on_top_of(K.spec_with_knobs(arch, "gemm.bf16", None), {"stages": 2}) == {"stages": 2}


@pytest.mark.parametrize("arch_name", ARCHS)
def test_every_listed_value_is_legal_alone_or_one_line_naming_its_knob(archs, arch_name):
    """The tuner's space: each value of each knob, set alone, builds or is refused in one line
    that starts with the kernel and the knob (never a generic chooser error)."""
    arch = archs[arch_name]
    for spec in _built(arch):
        for knob, values in K.knob_space(arch, spec.name).items():
            for value in values:
                why = K.check_knobs(arch, spec.name, {knob: value})
                assert why is None or ("\n" not in why and why.startswith(f"{spec.name}: --set ")), why
