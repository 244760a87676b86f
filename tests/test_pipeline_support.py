"""A tiny real kernel family ("fake") for the pipeline, report, diff and kernel-command
tests, so they do not depend on the real families' progress. Not a test module itself:
it holds the family and the fixtures' helpers (pytest collects nothing from it).

The family renders through porter.compile.render (a template in a temp folder with one
feature branch and one included primitive), compiles for real with NVRTC, has a SASS
rule and a CPU numerics model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

FAMILY = "fake"
BROKEN = False      # tests flip this to add a variant whose SASS check must fail
PAIRS = False       # tests flip this to add a form the family creates only where the arch has cta_pair
TOKEN = "0"         # written into the source: a new token forces a real NVRTC compile

TEMPLATE = """\
// fake family kernel {{ spec.name }} (session {{ token }})
{% include "common/common.cuh" %}
{% if arch.has("tmem") %}
{% include "tmem/fake_scale.cuh" %}
{% endif %}
extern "C" __global__ void {{ spec.entry }}(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
{% if arch.has("tmem") %}
        y[i] = fake_scale(a) * x[i] + y[i];
{% else %}
        y[i] = a * x[i] + y[i];
{% endif %}
    }
}
// block {{ spec.config["block"] }}
"""
COMMON = "// fake common header\n#define FAKE_COMMON 1\n"
PRIMITIVE = "// fake tmem-only helper\n__device__ __forceinline__ float fake_scale(float a) { return a * 0.5f + a * 0.5f; }\n"


def write_templates(root: Path) -> Path:
    (root / "common").mkdir(parents=True, exist_ok=True)
    (root / "tmem").mkdir(parents=True, exist_ok=True)
    (root / "fake.cu.j2").write_text(TEMPLATE)
    (root / "common" / "common.cuh").write_text(COMMON)
    (root / "tmem" / "fake_scale.cuh").write_text(PRIMITIVE)
    return root


def install(monkeypatch, template_root: Path, token: str = "0") -> None:
    """Register this module as the only kernel family and point porter.compile.render at the
    temp template folder."""
    import jinja2

    import porter.kernels
    import porter.compile.render

    mod = sys.modules[__name__]
    monkeypatch.setattr(porter.kernels, "FAMILIES", {"fake": "fake"})
    monkeypatch.setitem(sys.modules, "porter.kernels.fake", mod)
    monkeypatch.setattr(mod, "TOKEN", token)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(template_root)]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    monkeypatch.setattr(porter.compile.render, "environment", lambda: env)


def variants(arch):
    from porter.kernels.base import KernelSpec, SassRule, Unsupported

    NO_SPILLS = (SassRule(r"(STL|LDL)\b", "local-memory spill or stack traffic"),)

    feats = ("tmem",) if arch.has("tmem") else ("wgmma",) if arch.has("wgmma") else ()
    out = [KernelSpec(family="fake", name="fake.axpy", variant="fake.axpy", entry="fake_axpy",
                      config={"block": 128 if arch.has("tmem") else 64}, features=feats,
                      sass_required=(SassRule(r"FFMA", "the multiply-add of axpy"),),
                      sass_forbidden=NO_SPILLS, threads=128, template="fake.cu.j2")]
    if arch.has("fp4"):
        out.append(KernelSpec(family="fake", name="fake.fp4", variant="fake.fp4", entry="fake_fp4",
                              config={"block": 256}, features=("fp4",),
                              sass_required=(SassRule(r"FFMA", "the multiply-add"),),
                              sass_forbidden=NO_SPILLS, threads=256, template="fake.cu.j2"))
    else:
        out.append(Unsupported("fake", "fake.fp4", "fake.fp4", ("fp4",), "no fp4 on this arch"))
    if PAIRS and arch.has("cta_pair"):   # like attention's .pair specs: absent, not Unsupported, elsewhere
        out.append(KernelSpec(family="fake", name="fake.axpy.pair", variant="fake.axpy", entry="fake_axpy_pair",
                              config={"block": 128}, features=("tmem", "cta_pair"),
                              sass_required=(SassRule(r"FFMA", "the multiply-add of axpy"),),
                              sass_forbidden=NO_SPILLS, threads=128, template="fake.cu.j2"))
    if BROKEN:
        out.append(KernelSpec(family="fake", name="fake.broken", variant="fake.broken", entry="fake_broken",
                              config={"block": 32}, features=(),
                              sass_required=(SassRule(r"HGMMA", "a wgmma the kernel does not have"),),
                              threads=32, template="fake.cu.j2"))
    return out


def render(spec, arch) -> str:
    from porter.compile.render import render as render_template

    return render_template("fake.cu.j2", spec=spec, arch=arch, token=TOKEN)


def numerics(spec, arch) -> dict:
    """axpy in float32 against float64, per size: the kernel's arithmetic on the CPU."""
    cases = []
    for n in (64, 1000, 4096):
        rng = np.random.default_rng(n)
        x, y = rng.standard_normal(n), rng.standard_normal(n)
        a = 1.5
        out = np.float32(a) * x.astype(np.float32) + y.astype(np.float32)
        ref = a * x + y
        err = float(np.max(np.abs(out - ref)))
        tol = 4 * float(np.finfo(np.float32).eps) * float(np.max(np.abs(ref)))
        cases.append({"shape": [n], "max_abs_err": err, "tolerance": tol, "passed": err <= tol})
    return {"passed": all(c["passed"] for c in cases), "results": cases}


def child_run(out_dir: str, template_root: str, token: str, runbook: str) -> int:
    """Run the pipeline in a separate process (concurrency test): set up the family here."""
    import pytest

    from porter.pipeline import RunOptions, run_target

    with pytest.MonkeyPatch.context() as mp:
        install(mp, Path(template_root), token)
        result = run_target(RunOptions("blackwell", base="hopper", runbook=runbook, out=Path(out_dir),
                                       jobs=1, device="off"))
    return result.exit_code


RUNBOOK = """\
name: fake-bringup
summary: the pipeline over the fake family
base: hopper
stages:
  - {id: descriptor, title: Descriptor, day: 1, needs: [], kind: descriptor-check, proves: it loads}
  - {id: before, title: Before, day: 1, needs: [descriptor], kind: baseline, proves: base kernels on the target}
  - {id: kernels, title: Kernels, day: 2, needs: [descriptor], kind: kernels, family: "*", proves: they build}
  - {id: numerics, title: Numerics, day: 3, needs: [kernels], kind: numerics, proves: arithmetic}
  - {id: device, title: Device, day: 5, needs: [numerics], kind: device, proves: runs on a GPU}
  - {id: report, title: Report, day: 5, needs: [before, device], kind: report, proves: a report}
"""
