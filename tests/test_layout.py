"""The package's layout keeps data flowing one way (issue: import circles, loose modules,
GPU code in validation/): checked over the source, so a regression fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent


def _module_imports() -> dict[str, set[str]]:
    mods = {}
    for base, pkg in ((ROOT / "porter", "porter"), (ROOT / "validation", "porter.validation")):
        for f in base.rglob("*.py"):
            rel = f.relative_to(base).with_suffix("")
            name = ".".join((pkg, *rel.parts)).removesuffix(".__init__")
            deps = set()
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("porter"):
                    deps.add(node.module)
                    deps.update(f"{node.module}.{a.name}" for a in node.names)
                elif isinstance(node, ast.Import):
                    deps.update(a.name for a in node.names if a.name.startswith("porter"))
            mods[name] = deps
    return mods


def test_kernel_families_and_diff_have_no_import_circles():
    mods = _module_imports()
    graph = nx.DiGraph((m, d) for m, ds in mods.items() for d in ds if d in mods and d != m)
    watched = {"porter.commands.diff", "porter.report.diff_html", "porter.kernels.gemm", "porter.kernels.attention"}
    cycles = [c for c in nx.simple_cycles(graph) if watched & set(c)]
    assert cycles == []
    assert graph.has_edge("porter.commands.diff", "porter.report.opcodes")
    for path in ("gemm_wgmma", "gemm_tcgen05", "gemm_mma_sync"):
        assert "porter.kernels.gemm_variants" in mods[f"porter.kernels.{path}"]
        assert "porter.kernels.gemm" not in mods[f"porter.kernels.{path}"]


def test_package_root_holds_only_the_basics():
    loose = sorted(p.stem for p in (ROOT / "porter").glob("*.py"))
    assert loose == ["__init__", "__main__", "cli", "errors", "fsutil", "levels", "paths"]


def test_validation_holds_numerics_only():
    gpu = [n for n, ds in _module_imports().items() if n.startswith("porter.validation")
           for d in ds if d.startswith(("porter.runtime", "porter.emu")) or "cuda" in d]
    assert gpu == []
    for f in (ROOT / "validation").glob("*.py"):
        assert "cuda.bindings" not in f.read_text(), f.name


def test_the_simulator_never_imports_the_generators_encoders():
    """Independent judges: the simulator decodes descriptors, swizzles and layouts from the
    PTX ISA on its own, so a misreading shared with porter's generator cannot pass both."""
    mods = _module_imports()
    emu = {n: ds for n, ds in mods.items() if n.startswith("porter.emu")}
    assert len(emu) > 15
    for name, deps in emu.items():
        bad = [d for d in deps if "encodings" in d or "block_scale_layout" in d]
        assert bad == [], (name, bad)
        if name.startswith(("porter.emu.units", "porter.emu.ops")):
            assert not any(d.startswith("porter.kernels") for d in deps), name


def test_the_simulator_stands_on_its_own():
    """porter.emu is the simulator: it imports nothing of porter but the error types (the
    emulated device that builds porter's kernels lives in porter.runtime.emulated), and no
    import circle joins the runtime and the simulator."""
    mods = _module_imports()
    allowed = ("porter.errors", "porter.emu")
    emu = {n: ds for n, ds in mods.items() if n.startswith("porter.emu")}
    assert "porter.emu.device" not in emu and "porter.emu.validate" not in emu
    for name, deps in emu.items():
        bad = sorted(d for d in deps if not any(d == a or d.startswith(a + ".") for a in allowed))
        assert bad == [], (name, bad)
    graph = nx.DiGraph((m, d) for m, ds in mods.items() for d in ds if d in mods and d != m)
    cycles = [c for c in nx.simple_cycles(graph)
              if any(n.startswith("porter.emu") for n in c) and any(n.startswith("porter.runtime") for n in c)]
    assert cycles == []
    # the emulated device stands on the runtime side and uses the simulator (the edge goes one way)
    assert graph.has_edge("porter.runtime.emulated", "porter.emu.machine")
    assert not any(d.startswith("porter.runtime") for ds in emu.values() for d in ds)
