"""Validate a porter kernel in the simulator: the device harness's own host code
(inputs, poisoned outputs, tensor maps, fp64 references, tolerance policies) run on the
emulated device (``porter.runtime.emulated``). The level this can establish is
``emulated``: executed in porter's PTX simulator, not on a GPU. The shapes each family is
emulated at are in ``porter.runtime.emulated_cases``.
"""

from __future__ import annotations

import time

from porter.emu.errors import Unsupported
from porter.errors import PorterError
from porter.runtime.emulated_cases import emulation_shapes
from porter.validation.device_harness import mismatch_text

EMULATED_NOTE = "executed in porter's PTX simulator, not on a GPU"


def emulate(spec, arch, shapes=None, seeds: int = 2, source: str | None = None, smallest: bool = False,
            device=None, orders: int = 1) -> dict:
    """Run ``spec`` in the simulator at its emulation shapes (or ``shapes``) with ``seeds``
    input sets each. ``source``: an edited .cu to build instead of the rendered template.
    ``orders`` > 1: the first shape's first input set runs again under that many seeded warp
    orders in all (each launch of the emulated device draws a new order from its seed), so
    a bug that needs one particular interleaving gets more chances; the checks say which.

    Returns {name, variant, status, passed, level, checks, runs, seconds, reason}; status is
    "passed", "failed" or "not-emulated" (the kernel's PTX needs a form the simulator lacks,
    or its family has no emulation cases), and ``passed`` is None for "not-emulated"."""
    from porter.runtime.emulated import EmuDevice
    from porter.levels import Level
    from porter.runtime import device_runs

    start = time.perf_counter()
    result = {"name": spec.name, "variant": spec.variant, "status": "not-emulated", "passed": None,
              "level": None, "checks": [], "runs": [], "reason": "", "note": EMULATED_NOTE}
    shapes = list(shapes) if shapes else emulation_shapes(spec, smallest)
    if not shapes:
        result["reason"] = f"no emulation cases for the {spec.family} family yet"
        return _done(result, start)
    dev = device or EmuDevice()
    if source is not None:
        dev.sources[spec.name] = source
    try:
        fn = dev.load(spec, arch)
    except Unsupported as exc:
        result["reason"] = str(exc)
        return _done(result, start)
    try:
        checks = device_runs.validate_family(spec, arch, shapes, seeds, device=dev)
        for k in range(1, orders if dev.seed >= 0 else 1):     # a negative seed: round-robin, one order
            again = device_runs.validate_family(spec, arch, shapes[:1], 1, device=dev)
            checks += [{**c, "warp_order": k + 1} for c in again]
        error = ""
    except PorterError as exc:                     # a checker, a deadlock, a fault: this kernel fails
        checks, error = [], str(exc)
    result["checks"] = checks
    result["runs"] = [r.to_dict() for r in fn.runs]
    result["warnings"] = list(dict.fromkeys(w for r in fn.runs for w in r.warnings))   # porter.emu.isa_rules
    result.update(run_conditions(dev, checks))
    passed = bool(checks) and not error and all(c["passed"] for c in checks)
    result["passed"] = passed
    result["status"] = "passed" if passed else "failed"
    result["level"] = Level.EMULATED.label if passed else None
    if error:
        result["reason"] = error
    elif not passed:
        bad = next(c for c in checks if not c["passed"])
        detail = mismatch_text(bad)
        result["reason"] = (f"outside tolerance or unwritten at {check_where(bad)} seed {bad.get('seed')}"
                            + (f": {detail}" if detail else ""))
    return _done(result, start)


# The simulator's checks that every run has on (README "What it checks"); the race detector
# alone can be turned off (PORTER_EMU_RACES=0), so a report says whether it was on.
ALWAYS_CHECKED = ("memory bounds and alignment", "async results used before their wait",
                  "mbarrier, barrier and cluster rules", "Tensor Memory and tensor-core operand rules",
                  "deadlock and instruction budget")


def run_conditions(dev, checks: list[dict]) -> dict:
    """What a report says ran: the shapes and input seeds checked, the checks that were on,
    the emulated device's SM count and warp-order seed."""
    shapes, seeds = [], []
    for c in checks:
        shape = c.get("shape") if "shape" in c else {k: c[k] for k in ("model", "pos") if k in c} or None
        if isinstance(shape, dict) and "causal" in c:
            shape = {**shape, "causal": c["causal"]}
        if shape is not None and shape not in shapes:
            shapes.append(shape)
        if c.get("seed") is not None and c["seed"] not in seeds:
            seeds.append(c["seed"])
    races = "shared-memory races" if dev.check_races else "race detector off (PORTER_EMU_RACES=0)"
    return {"shapes": shapes, "seeds": seeds, "checks_on": [*ALWAYS_CHECKED, races],
            "sm_count": dev.sm_count, "warp_order_seed": dev.seed}


def check_where(check: dict) -> str:
    """Where a check ran, in the family's own terms: M x N x K; b/hq/hkv/sq/sk; model and
    decode position."""
    order = f" (warp order {check['warp_order']})" if check.get("warp_order") else ""
    if "model" in check:
        return f"model {check['model']} position {check.get('pos')}{order}"
    shape = check.get("shape")
    if isinstance(shape, dict):
        return " ".join(f"{k}={v}" for k, v in shape.items()) + (" causal" if check.get("causal") else "") + order
    if isinstance(shape, (list, tuple)):
        return "x".join(str(v) for v in shape) + order
    return str(shape) + order


def _done(result: dict, start: float) -> dict:
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def emulation_unit(payload: dict) -> dict:
    """A pipeline unit: emulate one kernel at its emulation shapes (the smallest and the
    reach shape: remainder tile, grouped-query heads, ragged lengths; one input set each),
    the smallest again under a second seeded warp order, and write emulation.json beside
    its other artifacts."""
    from porter.pipeline.work import jsonable, spec_from_dict, write_unit_json

    spec = spec_from_dict(payload["spec"])
    result = emulate(spec, payload["arch"], seeds=payload.get("seeds", 1), smallest=payload.get("smallest", False),
                     orders=payload.get("orders", 2))
    return write_unit_json(jsonable(result), payload.get("out_dir"), "emulation.json")
