"""The porting plan: which primitives and kernels change between two archs, and why.

A networkx DiGraph links descriptor features to the primitives (kernels_src/<folder>)
that need them, primitives to the templates that ``{% include %}`` them (scanned from
the template text, so the graph follows the code), templates to the kernel variants
rendered from them, and features straight to the templates that test
``arch.has("...")`` and to the variants that declare them. The feature difference
between a base arch and a target marks every descendant as changing; the plan lists
them in topological order (primitives before the kernels built on them), each with
the features that force the change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# Which descriptor features each primitive folder in kernels_src/ needs. A folder
# missing here is matched by name (a folder named like a feature needs it); "common"
# needs nothing. Probes are not primitives (they prove features; see porter.descriptor.probes).
PRIMITIVE_FEATURES = {
    "common": (),
    "tma": ("tma",),
    "mbarrier": ("mbarrier",),
    "wgmma": ("wgmma",),
    "tcgen05": ("tcgen05",),
    "tmem": ("tmem",),
    "cluster": ("clusters",),
    "clusters": ("clusters",),
    "dsmem": ("dsmem",),
    "cta_pair": ("cta_pair",),
    # Block scales are staged into Tensor Memory with tcgen05.cp: an arch with block-scaled
    # MMA but no TMEM (sm_120a's mma.sync) cannot use these headers.
    "block_scale": ("block_scale_mx", "tcgen05", "tmem"),
    "block_scales": ("block_scale_mx", "tcgen05", "tmem"),
    "blockscale": ("block_scale_mx", "tcgen05", "tmem"),
    "scales": ("block_scale_mx", "tcgen05", "tmem"),
    "nvfp4": ("block_scale_nvfp4", "fp4"),
    "fp8": ("fp8",),
    "fp4": ("fp4",),
    "setmaxnreg": ("setmaxnreg",),
}
NOT_PRIMITIVES = {"probes"}
# The folder a claimed feature's primitives must live in: a descriptor that claims one
# of these with no such folder has not been brought up yet (the primitives stage fails).
FEATURE_PRIMITIVE = {"wgmma": "wgmma", "tcgen05": "tcgen05", "tmem": "tmem", "tma": "tma",
                     "mbarrier": "mbarrier"}

# What part of a kernel each feature decides: the "why" of a change.
FEATURE_ROLE = {
    "mma_sync": "MMA issue (one warp, mma.sync), register fragments and accumulators",
    "cp_async": "per-thread asynchronous global->shared copies (cp.async, wait_group)",
    "wgmma": "MMA issue (warpgroup wgmma), register accumulators and the register epilogue",
    "tcgen05": "MMA issue (one thread, tcgen05.mma) and its completion via tcgen05.commit",
    "tmem": "accumulator storage (Tensor Memory alloc, tcgen05.ld) and the epilogue",
    "cta_pair": "CTA-pair tiles (cta_group::2) and the 2-CTA cluster launch",
    "clusters": "cluster launch and TMA multicast",
    "dsmem": "distributed shared memory exchange between CTAs",
    "tma": "global->shared tile loads (TMA tensor maps)",
    "mbarrier": "pipeline barriers (expect_tx / try_wait)",
    "fp8": "fp8 operand formats",
    "fp6": "fp6 operand formats",
    "fp4": "fp4 operand formats",
    "block_scale_mx": "MX block-scale staging (ue8m0 scales into TMEM)",
    "block_scale_nvfp4": "NVFP4 block scales (ue4m3 per 16, scale_vec::4X)",
    "setmaxnreg": "register reallocation between producer and consumer warps",
    "cluster_launch_control": "dynamic tile scheduling (clusterlaunchcontrol.try_cancel takes over unstarted clusters)",
}

# The jobs a kernel's primitives do and who can do each: (needs, primitive folder, how),
# the first entry whose needs the arch meets does the job there, else the fallback (no
# primitive). A port swaps a job's primitive when its doer changes. Listed in the order
# data flows through a kernel (load, wait, multiply, hold, scale, spread), which is the
# order the swaps are made in: each later job consumes what the earlier ones produce.
# A need is a descriptor feature, or an Arch attribute (tma_multicast) where no feature
# says it.
PRIMITIVE_JOBS = (
    ("global->shared tile loads", ((("tma",), "tma", "TMA tensor-map loads"),
                                   (("cp_async",), "cp_async", "per-thread cp.async copies")), ""),
    ("stage completion", ((("mbarrier",), "mbarrier", "mbarrier expect_tx / try_wait"),
                          (("cp_async",), "cp_async", "cp.async commit / wait_group")), ""),
    ("MMA issue", ((("tcgen05",), "tcgen05", "one-thread tcgen05.mma"),
                   (("wgmma",), "wgmma", "warpgroup wgmma"),
                   (("mma_sync",), "mma_sync", "warp-level mma.sync")), ""),
    ("accumulator storage", ((("tmem",), "tmem", "Tensor Memory (tcgen05.alloc, tcgen05.ld epilogue)"),),
     "registers (register epilogue)"),
    ("block-scale delivery", ((("block_scale_mx", "tmem"), "block_scale", "scales staged into Tensor Memory with tcgen05.cp"),
                              (("block_scale_mx", "mma_sync"), "mma_sync", "scale registers of mma.sync (.block_scale)")),
     "none (no block-scaled MMA)"),
    ("CTA pairs", ((("cta_pair",), "tcgen05", "cta_group::2 MMAs across a 2-CTA cluster"),), "single-CTA tiles"),
    ("operand sharing across a cluster", ((("clusters", "tma_multicast"), "tma", "TMA multicast"),),
     "each CTA loads its own operands"),
    ("register reallocation", ((("setmaxnreg",), "", "setmaxnreg between producer and consumer warps"),),
     "a fixed per-thread register budget"),
)


def _meets(arch, need: str) -> bool:
    from porter.descriptor.arch_schema import FEATURES

    return arch.has(need) if need in FEATURES else bool(getattr(arch, need, False))


def _doer(arch, doers, fallback):
    return next(((p, how, needs) for needs, p, how in doers if all(_meets(arch, n) for n in needs)),
                ("", fallback, ()))


def primitive_swaps(base, target) -> list[dict]:
    """The primitive swaps a port from ``base`` to ``target`` makes, in order: each job
    whose doer changes, with the primitives (kernels_src folders) out and in and the
    feature changes that force it."""
    folders = set(primitive_folders())
    out = []
    for job, doers, fallback in PRIMITIVE_JOBS:
        (pb, hb, nb), (pt, ht, nt) = _doer(base, doers, fallback), _doer(target, doers, fallback)
        if hb == ht:
            continue
        because = [f"{n} lost" for n in nb if not _meets(target, n)]
        because += [f"{n} gained" for n in nt if not _meets(base, n)]
        out.append({"job": job, "from": hb, "to": ht, "from_primitive": pb, "to_primitive": pt,
                    "to_primitive_exists": (pt in folders) if pt else None, "because": because})
    return out


# Features that are a tensor-core path's machinery rather than a capability of the kernel:
# a kernel missing only these (or the "wgmma|tcgen05" alternative) is blocked on a path
# for the target's own generation, not on anything the target lacks.
PATH_MACHINERY = {"wgmma", "tcgen05", "tmem"}

_INCLUDE = re.compile(r"""\{%-?\s*include\s+["']([^"']+)["']""")
# {% include "gemm/" ~ cfg.mainloop ~ ".cu.j2" %}: any template under that prefix may be used
_DYNAMIC_INCLUDE = re.compile(r"""\{%-?\s*include\s+["']([^"']+)["']\s*~""")
_HAS = re.compile(r"""\bhas\(\s*["'](\w+)["']\s*\)""")


def primitive_folders() -> list[str]:
    from porter import paths

    root = paths.data_dir("kernels_src")
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and p.name not in NOT_PRIMITIVES and not p.name.startswith("."))


def primitive_needs(folder: str, known_features=None) -> tuple[str, ...]:
    if folder in PRIMITIVE_FEATURES:
        return PRIMITIVE_FEATURES[folder]
    if known_features is None:
        from porter.descriptor.arch_schema import FEATURES as known_features
    return (folder,) if folder in known_features else ()


def file_needs(relpath: str, known_features=None) -> tuple[str, ...]:
    """Features one primitive file needs: its folder's, plus a feature its name starts
    with (attention/wgmma_frag.cuh needs wgmma)."""
    if known_features is None:
        from porter.descriptor.arch_schema import FEATURES as known_features
    folder, _, rest = relpath.partition("/")
    needs = list(primitive_needs(folder, known_features))
    stem = Path(rest).name.split(".")[0]
    for feat in known_features:
        if (stem == feat or stem.startswith(feat + "_")) and feat not in needs:
            needs.append(feat)
    return tuple(needs)


def scan_includes(text: str) -> list[str]:
    """Included paths in a template or primitive, in order."""
    return _INCLUDE.findall(text)


def template_include_order() -> dict[str, int]:
    """Primitive folder -> position of its first include across the templates (the order
    the templates inline them in, which is their dependency order)."""
    from porter import paths

    order: dict[str, int] = {}
    try:
        root = paths.data_dir("templates")
    except FileNotFoundError:
        return order
    for tpl in sorted(root.rglob("*.j2")):
        for inc in scan_includes(tpl.read_text(encoding="utf-8", errors="replace")):
            folder = inc.split("/")[0]
            if "/" in inc and folder not in order:
                order[folder] = len(order)
    return order


_ANY_INCLUDE = re.compile(r"""\{%-?\s*include\s+["']([^"']+)["']\s*(~)?""")


def template_file_order() -> dict[str, int]:
    """Primitive file (kernels_src-relative) -> position of its first include when the
    top-level templates (templates/*.j2, by name) are inlined the way Jinja does it:
    included templates expanded in place (dynamic ``"gemm/" ~ x`` includes: every
    template under the prefix). Each template inlines a header after everything it
    needs, so first appearance is a valid order for all of them together."""
    from porter import paths

    order: dict[str, int] = {}
    try:
        troot, sroot = paths.data_dir("templates"), paths.data_dir("kernels_src")
    except FileNotFoundError:
        return order
    seen: set[Path] = set()

    def walk(path: Path) -> None:
        if path in seen:
            return
        seen.add(path)
        for m in _ANY_INCLUDE.finditer(path.read_text(encoding="utf-8", errors="replace")):
            inc, dynamic = m.group(1), m.group(2)
            if dynamic:
                for sub in sorted(troot.glob(inc + "*.j2")):
                    walk(sub)
            elif (troot / inc).is_file():
                walk(troot / inc)
            elif (sroot / inc).is_file():
                walk(sroot / inc)
                if inc.endswith(".cuh") and inc not in order:
                    order[inc] = len(order)

    for tpl in sorted(troot.glob("*.j2")):
        walk(tpl)
    return order


def scan_feature_tests(text: str) -> set[str]:
    """Features a template tests with ``arch.has("...")``."""
    return set(_HAS.findall(text))


@dataclass
class PlanItem:
    node: str              # "primitive:tcgen05", "template:gemm.cu.j2", "kernel:gemm.bf16"
    kind: str              # primitive | template | kernel
    name: str
    because: list[str]     # "wgmma lost", "tmem gained"
    action: str            # what has to happen
    families: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"node": self.node, "kind": self.kind, "name": self.name,
                "because": self.because, "action": self.action}


@dataclass
class Plan:
    base: str
    target: str
    lost: list[str]
    gained: list[str]
    items: list[PlanItem]
    summary: list[str]     # one line per changed feature
    notes: list[str]
    swaps: list = field(default_factory=list)   # primitive_swaps(base, target), in order

    def to_dict(self) -> dict:
        return {"base": self.base, "target": self.target, "lost": self.lost,
                "gained": self.gained, "summary": self.summary,
                "items": [i.to_dict() for i in self.items], "notes": self.notes, "swaps": self.swaps}

    def text(self) -> str:
        lines = [f"porting plan {self.base} -> {self.target}",
                 f"  features lost:   {', '.join(self.lost) or 'none'}",
                 f"  features gained: {', '.join(self.gained) or 'none'}", ""]
        lines += [f"  {s}" for s in self.summary]
        if self.swaps:
            lines += ["", "  primitive swaps, in order:"]
            for n, sw in enumerate(self.swaps, 1):
                out = f"{sw['from_primitive']}/ " if sw["from_primitive"] else ""
                into = f"{sw['to_primitive']}/ " if sw["to_primitive"] else ""
                missing = " (no kernels_src folder yet: write it)" if sw["to_primitive_exists"] is False else ""
                lines.append(f"  {n:3d}. {sw['job']}: {out}{sw['from']} -> {into}{sw['to']}{missing} "
                             f"({'; '.join(sw['because']) or 'figures'})")
        if self.items:
            lines += ["", "  in dependency order:"]
            for n, item in enumerate(self.items, 1):
                lines.append(f"  {n:3d}. {item.kind:9s} {item.name:28s} {item.action} "
                             f"({'; '.join(item.because)})")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def arch_features(arch) -> set[str]:
    feats = getattr(arch, "features", None)
    if feats is not None:
        return set(feats)
    from porter.descriptor.arch_schema import FEATURES

    return {f for f in FEATURES if arch.has(f)}


def feature_diff(base, target) -> tuple[list[str], list[str]]:
    """(lost, gained) features from ``base`` to ``target`` (porter.descriptor.archdiff when present)."""
    try:
        from porter.descriptor.archdiff import diff_archs  # the arch engineer's full diff, when present
    except ImportError:
        diff_archs = None
    if diff_archs is not None:
        d = diff_archs(base, target)
        return sorted(d.features_lost), sorted(d.features_gained)
    b, t = arch_features(base), arch_features(target)
    return sorted(b - t), sorted(t - b)


def kernel_specs(arch, families=None, complete: bool = False) -> tuple[list, list[str]]:
    """Every family's variants for ``arch`` (specs and Unsupported) plus notes on families
    that failed; with ``complete``, also an Unsupported for each kernel a family builds only
    on other installed archs (see offered_elsewhere), so two archs list the same names."""
    from porter import kernels as kreg

    out, notes = [], []
    for fam in sorted(families if families is not None else kreg.FAMILIES):
        try:
            own = list(kreg.family_module(fam).variants(arch))
        except Exception as exc:  # a family under construction must not hide the rest
            notes.append(f"family {fam}: variants() failed for {arch.name}: {type(exc).__name__}: {exc}")
            continue
        out += merge_listing(own, offered_elsewhere(arch, own, fam)) if complete else own
    return out, notes


def merge_listing(own: list, extra: list) -> list:
    """``own`` with each entry of ``extra`` placed after the last one of its variant
    (a ``.pair`` spec next to its single-CTA sibling), else at the end."""
    out = list(own)
    for e in extra:
        at = max((i for i, v in enumerate(out) if v.variant == e.variant), default=len(out) - 1)
        out.insert(at + 1, e)
    return out


def offered_elsewhere(arch, own: list, family: str) -> list:
    """Unsupported entries for the kernels ``family`` builds on other installed archs but
    does not list for ``arch`` at all (a family may only create a form, e.g. a CTA-pair
    spec, where the descriptor has the feature). Missing features come from a spec that
    builds elsewhere: its features this arch lacks."""
    from porter import kernels as kreg
    from porter.descriptor.arch import list_archs, load_arch
    from porter.kernels.base import Unsupported

    known = {v.name for v in own}
    found: dict[str, Unsupported] = {}
    for name in list_archs():
        try:
            other = load_arch(name)
            if other.digest == arch.digest:
                continue
            theirs = list(kreg.family_module(family).variants(other))
        except Exception:   # a broken descriptor or family is reported where it is used, not here
            continue
        for v in theirs:
            if v.name in known:
                continue
            features = getattr(v, "features", None)
            if features is None:                 # unsupported there too: keep looking for a build
                found.setdefault(v.name, Unsupported(
                    v.family, v.name, v.variant, (),
                    f"not offered on {arch.name}; unsupported on {other.name} too: {v.reason or 'no reason given'}"))
                continue
            missing = tuple(f for f in features if f not in arch_features(arch))
            reason = (f"the family builds it only where the descriptor has those (as {other.name} does)"
                      if missing else f"not offered on {arch.name} (built on {other.name})")
            if v.name not in found or not found[v.name].missing:
                found[v.name] = Unsupported(v.family, v.name, v.variant, missing, reason)
    return list(found.values())


def build_graph(archs, families=None):
    """The feature -> primitive -> template -> kernel graph over the kernels of ``archs``."""
    import networkx as nx

    from porter import paths
    from porter.descriptor.arch_schema import FEATURES

    g = nx.DiGraph()
    notes: list[str] = []
    for feat in FEATURES:
        g.add_node(f"feature:{feat}", kind="feature", name=feat)
    src_root = paths.data_dir("kernels_src")
    for folder in primitive_folders():
        node = f"primitive:{folder}"
        g.add_node(node, kind="primitive", name=folder)
        for feat in primitive_needs(folder, FEATURES):
            g.add_edge(f"feature:{feat}", node)
        for file in sorted((src_root / folder).rglob("*")):
            if file.is_file():
                text = file.read_text(encoding="utf-8", errors="replace")
                for inc in scan_includes(text):
                    dep = inc.split("/")[0]
                    if dep != folder and (src_root / dep).is_dir() and dep not in NOT_PRIMITIVES:
                        g.add_edge(f"primitive:{dep}", node)
                for feat in scan_feature_tests(text):
                    if feat in FEATURES:
                        g.add_edge(f"feature:{feat}", node)
    tpl_root = paths.data_dir("templates")
    for tpl in sorted(tpl_root.rglob("*.j2")):
        name = str(tpl.relative_to(tpl_root))
        node = f"template:{name}"
        g.add_node(node, kind="template", name=name)
        text = tpl.read_text(encoding="utf-8", errors="replace")
        for inc in scan_includes(text):
            first = inc.split("/")[0]
            if (tpl_root / inc).is_file():
                g.add_edge(f"template:{inc}", node)
            elif (src_root / first).is_dir() and first not in NOT_PRIMITIVES:
                g.add_edge(f"primitive:{first}", node)
        for prefix in _DYNAMIC_INCLUDE.findall(text):
            for other in sorted(tpl_root.glob(prefix + "*.j2")):
                g.add_edge(f"template:{other.relative_to(tpl_root)}", node)
        for feat in scan_feature_tests(text):
            if feat in FEATURES:
                g.add_edge(f"feature:{feat}", node)
    for arch in archs:
        specs, fam_notes = kernel_specs(arch, families)
        notes += fam_notes
        for spec in specs:
            node = f"kernel:{spec.name}"
            g.add_node(node, kind="kernel", name=spec.name, family=spec.family)
            template = getattr(spec, "template", "")
            if template:
                g.add_edge(f"template:{template}", node)
            for feat in getattr(spec, "features", ()) or ():
                g.add_edge(f"feature:{feat}", node)
    for node, data in g.nodes(data=True):   # nodes only reached through an edge
        if "kind" not in data:
            kind, _, name = node.partition(":")
            data.update(kind=kind, name=name)
    return g, notes


def sources_used(specs, arch) -> tuple[set[str] | None, list[str]]:
    """Template and primitive names (``gemm/tcgen05.cu.j2``, ``tmem/tmem.cuh``) that rendering
    ``specs`` for ``arch`` loads, and notes on renders that failed (None when none rendered).

    Rendered, not scanned: a template's include may depend on the config (``"gemm/" ~
    cfg.mainloop``), so only a render says which side of a feature branch is used."""
    import jinja2

    from porter import kernels as kreg
    from porter.compile import render as render_mod

    original = render_mod.environment
    env = original()
    inner, loaded = env.loader, set()

    class RecordingLoader(jinja2.BaseLoader):
        def get_source(self, environment, template):
            loaded.add(template)
            return inner.get_source(environment, template)

    # A fresh cache, so every template a render needs goes through the loader once. The
    # swap below is process-wide, as in porter.planning.srcdiff: the pipeline's parallel work runs
    # in worker processes, not threads.
    recording = env.overlay(loader=RecordingLoader(), cache_size=64)
    notes, rendered = [], 0
    render_mod.environment = lambda: recording
    try:
        for spec in specs:
            if not hasattr(spec, "features"):
                continue
            try:
                kreg.family_module(spec.family).render(spec, arch)
                rendered += 1
            except Exception as exc:  # a family under construction must not hide the rest
                notes.append(f"{spec.name}: render failed for {arch.name}: {type(exc).__name__}: {exc}")
    finally:
        render_mod.environment = original
    return (loaded if rendered else None), notes


def family_generations(family: str) -> set[str]:
    """Tensor-core generations the family's templates handle: templates/<family>/<generation>.cu.j2."""
    from porter import paths
    from porter.descriptor.arch_schema import GENERATIONS

    folder = paths.data_dir("templates") / family
    if not family or not folder.is_dir():
        return set()
    return {p.name.removesuffix(".cu.j2") for p in folder.glob("*.cu.j2")} & set(GENERATIONS)


def _is_path_alternative(missing: str) -> bool:
    from porter.descriptor.arch_schema import GENERATIONS

    return "|" in missing and set(missing.split("|")) <= set(GENERATIONS)


def needs_new_path(family: str, missing, generation: str) -> bool:
    """Whether a kernel the target cannot build is blocked only on a template path for the
    target's tensor-core generation: no template of its family handles that generation
    (the family says so with a "wgmma|tcgen05" alternative, or its templates/<family>/
    folder has none for it), and everything else it misses is another path's machinery.
    A kernel that also needs a capability the target lacks (cta_pair) stays unsupported:
    a new path would not build it either."""
    if generation == "none":      # no tensor core: there is no path to write
        return False
    handled = family_generations(family)
    alternative = any(_is_path_alternative(m) for m in missing)
    if generation in handled or not (handled or alternative):
        return False
    return all(m in PATH_MACHINERY or _is_path_alternative(m) for m in missing)


def _path_steps(items: list[PlanItem], blocked: dict[str, str], generation: str) -> list[PlanItem]:
    """One "write a <generation> path" step per family with blocked kernels, its reasons
    those of the kernels it unblocks."""
    steps = []
    for family in sorted({blocked[i.name] for i in items if i.name in blocked}):
        because = sorted({w for i in items if blocked.get(i.name) == family for w in i.because})
        name = f"{family}/{generation}.cu.j2"
        steps.append(PlanItem(f"template:{name}", "template", name, because,
                              f"write a {generation} path: templates/{name} (no template handles "
                              f"tensor_core.generation '{generation}')", [family]))
    return steps


def _kernel_reasons(name: str, base_specs: dict, target_specs: dict, changed: dict, target_feats: set) -> list[str]:
    """Why one kernel changes: the changed features its target spec uses, plus those its
    base spec used that the target lacks (wgmma lost); for a kernel the target cannot
    build, the features it misses there."""
    t, b = target_specs.get(name), base_specs.get(name)
    feats = list(getattr(t, "features", ()) or ()) + list(getattr(t, "missing", ()) or ())
    feats += [f for f in (getattr(b, "features", ()) or ()) if f not in target_feats]
    return sorted({changed[f"feature:{f}"] for f in feats if f"feature:{f}" in changed})


def _no_longer_used(kind: str, name: str, used_target, used_base, target_name: str) -> str:
    """"no longer used on ARCH" for a template or primitive folder no target kernel renders
    from ("not used" when no base kernel did either); "" when used or unknown."""
    if kind not in ("template", "primitive") or used_target is None:
        return ""

    def uses(used) -> bool:
        if kind == "template":
            return name in used
        return any(u.split("/", 1)[0] == name for u in used if "/" in u)

    if uses(used_target):
        return ""
    return f"{'no longer' if used_base is not None and uses(used_base) else 'not'} used on {target_name}"


def porting_plan(base, target, families=None) -> Plan:
    """Every primitive, template and kernel that changes from ``base`` to ``target``."""
    import networkx as nx

    lost, gained = feature_diff(base, target)
    g, notes = build_graph([base, target], families)
    changed = {f"feature:{f}": f"{f} {'lost' if f in lost else 'gained'}" for f in lost + gained}
    target_feats = arch_features(target)
    # Kernels the target's families do not build (unsupported, or not offered there):
    # the plan must not promise a rebuild for them.
    target_specs = kernel_specs(target, families)[0]
    base_specs = kernel_specs(base, families)[0]
    unsupported_on_target = {s.name: s.missing for s in target_specs if not hasattr(s, "features")}
    generation = target.tensor_core.generation
    # Kernel -> family, for kernels that wait on a template path for the target's generation.
    blocked = {s.name: s.family for s in target_specs
               if s.name in unsupported_on_target and needs_new_path(s.family, s.missing, generation)}
    offered_on_target = {s.name for s in target_specs}
    by_name_target = {s.name: s for s in target_specs}
    by_name_base = {s.name: s for s in base_specs}
    # What the target's kernels actually render from (None: nothing rendered, say nothing).
    used_target, render_notes = sources_used(target_specs, target)
    used_base, _ = sources_used(base_specs, base)
    notes += render_notes
    items: list[PlanItem] = []
    reach: dict[str, set[str]] = {}
    rank = {"feature": 0, "primitive": 1, "template": 2, "kernel": 3}
    for node in nx.lexicographical_topological_sort(g, key=lambda n: (rank[g.nodes[n].get("kind", "kernel")], n)):
        data = g.nodes[node]
        if data["kind"] == "feature":
            continue
        if data["kind"] == "kernel":
            # From the specs, not the graph: a template's edges reach every kernel rendered
            # from it, whatever features that kernel itself uses.
            why = set(_kernel_reasons(data["name"], by_name_base, by_name_target, changed, target_feats))
        else:
            why = {changed[a] for a in nx.ancestors(g, node) if a in changed}
        if not why:
            continue
        needs = {a.split(":", 1)[1] for a in g.predecessors(node) if a.startswith("feature:")}
        unused = _no_longer_used(data["kind"], data["name"], used_target, used_base, target.name)
        if data["kind"] == "primitive":
            missing = sorted(needs - target_feats)
            action = (f"{unused or f'not used on {target.name}'} (needs {', '.join(missing)})" if missing
                      else unused or f"write or port for {target.name}")
        elif data["kind"] == "template":
            action = unused or "re-render: feature branches and included primitives change"
        elif data["name"] not in offered_on_target:
            action = f"not offered on {target.name}: its family lists no such variant there"
        elif data["name"] in blocked:
            missing = ", ".join(unsupported_on_target[data["name"]]) or "a template path"
            action = f"blocked: needs the {generation} path (unsupported on {target.name}, missing {missing})"
        elif data["name"] in unsupported_on_target:
            missing = ", ".join(unsupported_on_target[data["name"]]) or "a template path"
            action = f"unsupported on {target.name} (missing {missing}): nothing to rebuild"
        elif not hasattr(by_name_base.get(data["name"]), "features"):
            # not built on the base (unsupported or not offered there): nothing to port from
            action = f"build and validate: new on {target.name}"
        else:
            action = "rebuild and re-validate"
        items.append(PlanItem(node, data["kind"], data["name"], sorted(why), action,
                              [data.get("family", "")] if data["kind"] == "kernel" else []))
        for w in why:
            reach.setdefault(w, set()).add(node)
    # Kernels no feature change touches can still change: a persistent kernel's grid follows
    # the SM count, a pipeline's depth the shared memory. Those are changes too.
    listed = {i.name for i in items}
    figures = figure_changes(base, target)
    for name in sorted(set(by_name_base) & set(by_name_target) - listed):
        b, t = by_name_base[name], by_name_target[name]
        if not (hasattr(b, "features") and hasattr(t, "features")):
            continue
        diffs = config_changes(b, t)
        if not diffs:
            continue
        why = figures + [f"config {d}" for d in diffs]
        node = f"kernel:{name}"
        items.append(PlanItem(node, "kernel", name, why,
                              "re-plan and re-validate: the same code, configured for the target's figures",
                              [t.family]))
        reach.setdefault("figures", set()).add(node)
    # The new templates come after every existing template and before the kernels they unblock.
    first_kernel = next((n for n, i in enumerate(items) if i.kind == "kernel"), len(items))
    items[first_kernel:first_kernel] = _path_steps(items, blocked, generation)
    summary = []
    for feat in lost + gained:
        label = changed[f"feature:{feat}"]
        fams = sorted({g.nodes[n].get("family") for n in reach.get(label, ()) if g.nodes[n]["kind"] == "kernel"})
        prims = sorted(g.nodes[n]["name"] for n in reach.get(label, ()) if g.nodes[n]["kind"] == "primitive")
        role = FEATURE_ROLE.get(feat, f"code that tests {feat}")
        where = ", ".join(f"{f}.*" for f in fams if f)
        where = f"change in {where}" if where else "change (no registered kernel uses it yet)"
        prim = f"; primitives: {', '.join(prims)}" if prims else ""
        summary.append(f"{label} -> {role}: {where}{prim}")
    if reach.get("figures"):
        names = sorted(i.name for i in items if i.node in reach["figures"])
        summary.append(f"{'; '.join(figures) or 'figures unchanged'} -> configuration only (grid, "
                       f"pipeline depth, tiles): re-plan {', '.join(names)}")
    return Plan(base.name, target.name, lost, gained, items, summary, notes, primitive_swaps(base, target))


# Descriptor figures a kernel's configuration may follow, with their display names.
CONFIG_FIGURES = (("sm_count", "SMs"), ("smem_per_block_bytes", "shared memory per block (B)"),
                  ("smem_per_sm_bytes", "shared memory per SM (B)"), ("max_threads_per_sm", "threads per SM"),
                  ("max_regs_per_thread", "registers per thread"), ("l2_bytes", "L2 (B)"))


def figure_changes(base, target) -> list[str]:
    """'SMs 132 -> 148' for each configuration-relevant figure that differs."""
    out = []
    for attr, label in CONFIG_FIGURES:
        b, t = getattr(base, attr, None), getattr(target, attr, None)
        if b is not None and t is not None and b != t:
            out.append(f"{label} {b} -> {t}")
    return out


def config_changes(base_spec, target_spec, most: int = 4) -> list[str]:
    """What differs between one kernel's spec on the base and on the target: shared
    memory, threads, cluster, then config keys ('grid: 132 -> 148'), at most ``most``."""
    out = []
    for attr in ("smem_bytes", "threads", "cluster"):
        b, t = getattr(base_spec, attr, None), getattr(target_spec, attr, None)
        if b != t:
            out.append(f"{attr}: {b} -> {t}")
    cb, ct = dict(base_spec.config or {}), dict(target_spec.config or {})
    for key in sorted(set(cb) | set(ct)):
        if cb.get(key) != ct.get(key):
            b, t = cb.get(key, "-"), ct.get(key, "-")
            short = all(isinstance(v, (int, float, str, bool)) and len(str(v)) <= 24 for v in (b, t))
            out.append(f"{key}: {b} -> {t}" if short else f"{key} changes")
    return out[:most] + ([f"and {len(out) - most} more"] if len(out) > most else [])


def most_different_arch(target, candidates=None):
    """The installed descriptor whose feature set differs most from ``target``'s (ties: by name)."""
    from porter.descriptor.arch import list_archs, load_arch

    best, best_score = None, -1
    tf = arch_features(target)
    for name in candidates if candidates is not None else list_archs():
        other = load_arch(name)
        if other.digest == target.digest:
            continue
        score = len(arch_features(other) ^ tf)
        if score > best_score:
            best, best_score = other, score
    return best
