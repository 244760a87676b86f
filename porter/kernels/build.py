"""Render, compile, disassemble and check one kernel spec for one arch.

The result carries every artifact (.cu, .ptx, .cubin, .sass, resources) and the
checks with their verdicts, plus the highest validation level reached. The
pipeline, ``porter kernel`` and ``porter diff`` all go through here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from porter.compile import sass as sasslib
from porter.errors import CompileError
from porter.kernels.base import KernelSpec
from porter.levels import Level
from porter.compile.toolchain import CompileResult, compile_cuda


@dataclass
class Check:
    name: str
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class KernelBuild:
    spec: KernelSpec
    target: str
    source: str = ""
    compiled: CompileResult | None = None
    compile_error: str = ""
    sass: str = ""
    histogram: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    level: Level = Level.FAILED

    @property
    def ok(self) -> bool:
        return self.level >= Level.SASS_CHECKED


def sass_checks(spec: KernelSpec, histogram: dict) -> list[Check]:
    checks = []
    for rule in spec.sass_required:
        n = sasslib.count_matching(histogram, rule.pattern)
        checks.append(Check(f"sass has {rule.pattern}", n > 0,
                            f"{n} x {rule.pattern} ({rule.why})" if n else f"missing {rule.pattern}: {rule.why}"))
    for rule in spec.sass_forbidden:
        n = sasslib.count_matching(histogram, rule.pattern)
        checks.append(Check(f"sass has no {rule.pattern}", n == 0,
                            "absent" if n == 0 else f"{n} x {rule.pattern}: {rule.why}"))
    return checks


def limit_checks(spec: KernelSpec, arch, res) -> list[Check]:
    """Registers, shared memory, Tensor Memory, threads and cluster within the descriptor."""
    static_smem = res.shared_bytes if res else 0
    smem = static_smem + spec.smem_bytes
    checks = [
        Check("shared memory", smem <= arch.smem_per_block_bytes,
              f"{smem} B (static {static_smem} + dynamic {spec.smem_bytes}) of {arch.smem_per_block_bytes} B per block"),
        Check("threads", spec.threads <= arch.max_threads_per_block,
              f"{spec.threads} of {arch.max_threads_per_block} per block"),
        Check("tensor memory", spec.tmem_columns <= arch.tmem.columns,
              f"{spec.tmem_columns} of {arch.tmem.columns} columns"),
    ]
    cluster_size = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    if cluster_size > 1:
        checks.append(Check("cluster", arch.has("clusters") and cluster_size <= arch.cluster.max_portable,
                            f"{cluster_size} CTAs of {arch.cluster.max_portable} portable"))
    if res is not None:
        checks.append(Check("registers", res.registers <= arch.max_regs_per_thread,
                            f"{res.registers} of {arch.max_regs_per_thread} per thread"))
        spilled = res.spill_store_bytes + res.spill_load_bytes + res.local_bytes
        checks.append(Check("no spills", spilled == 0,
                            f"spill stores {res.spill_store_bytes} B, loads {res.spill_load_bytes} B, local {res.local_bytes} B"))
    return checks


def build_kernel(spec: KernelSpec, arch, source: str | None = None) -> KernelBuild:
    """Render (unless ``source`` is given), compile for ``arch.target`` and check."""
    from porter.kernels import family_module

    build = KernelBuild(spec=spec, target=arch.target)
    build.source = source if source is not None else family_module(spec.family).render(spec, arch)
    build.level = Level.RENDERED
    try:
        build.compiled = compile_cuda(build.source, arch.target, f"{spec.name}.cu")
    except CompileError as exc:
        build.compile_error = str(exc)
        build.checks.append(Check("compile", False, str(exc)))
        return build
    build.level = Level.COMPILED
    build.checks.append(Check("compile", True, f"cubin for {arch.target}"))
    build.sass = sasslib.disassemble(build.compiled.cubin)
    hist = sasslib.opcode_histogram(build.sass, spec.entry)
    if not hist:  # the entry name may be mangled; fall back to the whole cubin
        hist = sasslib.opcode_histogram(build.sass)
    build.histogram = dict(hist)
    all_res = sasslib.resource_usage(build.compiled.cubin, build.compiled.log)
    res = all_res.get(spec.entry) or next(iter(all_res.values()), None)
    build.resources = res.to_dict() if res else {}
    build.checks += sass_checks(spec, hist) + limit_checks(spec, arch, res)
    if all(c.passed for c in build.checks):
        build.level = Level.SASS_CHECKED
    return build
