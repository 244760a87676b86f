"""``porter validate ARCH --kernel FAMILY|NAME``: run kernels on a GPU against the references.

Each selected kernel runs on device 0 at several shapes with fresh random inputs and
poisoned outputs, and every output is judged by the variant's tolerance policy
(``porter.validation.device_harness``). The GPU must be the descriptor's: a sm_100a
kernel is refused on a compute capability 9.0 GPU, with the reason.

``--device``: ``on`` fails (exit 3, one line) without a matching GPU; ``auto`` says
"skipped: ..." and exits 0; ``off`` runs only the CPU numerics model of each kernel.
Exit codes: 0 all passed (or skipped), 1 a check failed, 2 bad input, 3 no device.

The kernel selection, shape parsing and device decision here are shared with
``porter bench``.
"""

from __future__ import annotations

import re

DEVICE_MODES = ("auto", "on", "off")
SHAPE_FORMS = {
    "gemm": "MxNxK, e.g. 4096x4096x1024",
    "attention": "BxHxS or BxHqxHkvxSqxSk, e.g. 4x16x4096 or 2x8x2x1024x1024",
    "megakernel": "a model name for validate (e.g. tiny, tiny-gqa4), a decode position for bench (e.g. 1024)",
}


def register(sub) -> None:
    p = sub.add_parser("validate", help="run kernels on a GPU of the arch against the CPU references")
    p.add_argument("arch", help="descriptor name or path (the GPU must have its compute capability)")
    p.add_argument("--kernel", required=True, metavar="FAMILY|NAME",
                   help="a family (gemm, attention, megakernel) or one kernel, e.g. gemm.bf16")
    p.add_argument("--device", choices=DEVICE_MODES, default="auto",
                   help="on: fail without a matching GPU; auto: skip without one; off: the CPU numerics model only (at its own shapes)")
    p.add_argument("--shapes", nargs="+", metavar="SHAPE", help="; ".join(f"{k}: {v}" for k, v in SHAPE_FORMS.items()))
    p.add_argument("--seeds", type=int, default=2, help="fresh random inputs per shape (default 2)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=run)


# ---- shared with porter bench ------------------------------------------------------------

def select_kernels(arch, kernel: str) -> tuple[list, list]:
    """(specs to run, Unsupported ones) for a family name or one kernel name / variant.

    A single named kernel that the arch does not support is an error; a family's
    unsupported variants are reported beside the ones that run.
    """
    from porter import kernels
    from porter.commands.kernel import find_kernel
    from porter.errors import PorterError
    from porter.kernels.base import Unsupported

    if kernel in kernels.FAMILIES:
        every = list(kernels.family_module(kernel).variants(arch))
    else:
        every = find_kernel(kernel, arch)
    specs = [s for s in every if not isinstance(s, Unsupported)]
    unsupported = [s for s in every if isinstance(s, Unsupported)]
    if not specs:
        why = "; ".join(f"{u.name}: {u.reason or 'needs ' + ', '.join(u.missing)}" for u in unsupported)
        raise PorterError(f"--kernel {kernel}: nothing runs on {arch.name} ({arch.target}): {why}")
    return specs, unsupported


def parse_shapes(family: str, items, purpose: str = "validate") -> list | None:
    """Shapes from the command line for ``family``; None keeps the harness's defaults."""
    from porter.errors import PorterError

    if not items:
        return None
    out = []
    for item in items:
        if family == "megakernel":
            out.append(_megakernel_shape(item, purpose))
            continue
        parts = item.lower().split("x")
        if not all(re.fullmatch(r"[1-9][0-9]*", p) for p in parts):
            raise PorterError(f"shape '{item}': {family} shapes are {SHAPE_FORMS[family]} (positive integers)")
        dims = tuple(int(p) for p in parts)
        if family == "gemm":
            if len(dims) != 3:
                raise PorterError(f"shape '{item}': a GEMM shape is {SHAPE_FORMS['gemm']}")
            out.append(dims)
        elif family == "attention":
            if len(dims) == 3:
                b, h, s = dims
                dims = (b, h, h, s, s)
            if len(dims) != 5:
                raise PorterError(f"shape '{item}': an attention shape is {SHAPE_FORMS['attention']}")
            if dims[1] % dims[2]:
                raise PorterError(f"shape '{item}': heads_q {dims[1]} must be a multiple of heads_kv {dims[2]}")
            out.append(dims)
        else:
            raise PorterError(f"--shapes: no shape format for family {family!r}")
    return out


def _megakernel_shape(item: str, purpose: str):
    from porter.errors import PorterError

    if purpose == "bench":
        if not re.fullmatch(r"[1-9][0-9]*", item):
            raise PorterError(f"shape '{item}': megakernel bench shapes are decode positions (positive integers)")
        return int(item)
    from porter.validation.model_config import load_model_config

    load_model_config(item)          # a PorterError naming the known models when unknown
    return item


def check_shapes(specs, shapes) -> None:
    """Reject shapes a kernel cannot take before any device work (the GEMM tiles)."""
    if not shapes:
        return
    from porter.kernels import gemm as gemm_family

    for spec in specs:
        if spec.family == "gemm":
            for m, n, k in shapes:
                gemm_family.check_problem_shape(spec, m, n, k)


def decide_device(arch, mode: str, devices=None, why: str = "") -> tuple[dict | None, str]:
    """(device to use, "") or (None, the one-line reason). ``mode`` on raises NoDevice
    (exit 3); auto returns the reason for a "skipped:" line; off never looks."""
    from porter.validation.device_runs import NoDevice, match_device

    if mode == "off":
        return None, "device validation off (--device off)"
    if devices is None:
        from porter.pipeline import device as pdev

        devices, why = pdev.list_devices()
    dev, reason = match_device(arch, devices, why)
    if dev is None and mode == "on":
        raise NoDevice(reason)
    return dev, reason


def isolated(fn, spec, *args, **kwargs) -> dict:
    """``fn(spec, ...)``, or a failed result naming the error when this kernel's run raises,
    so one kernel's failure (a bad launch, a tensor map the driver refuses) is reported
    beside the others' results instead of ending the command. No device stays fatal."""
    from porter.errors import PorterError
    from porter.validation.device_runs import NoDevice

    try:
        return fn(spec, *args, **kwargs)
    except NoDevice:
        raise
    except PorterError as exc:
        return {"name": spec.name, "variant": spec.variant, "passed": False, "level": "sass-checked",
                "error": str(exc), "checks": [], "rows": []}


def one_family(specs) -> str:
    from porter.errors import PorterError

    families = {s.family for s in specs}
    if len(families) != 1:
        raise PorterError(f"--kernel selects kernels of several families ({', '.join(sorted(families))}); "
                          "name one family or one kernel")
    return families.pop()


# ---- the command ---------------------------------------------------------------------------

def run(args) -> int:
    import json

    from porter.arch import load_arch
    from porter.errors import PorterError
    from porter.pipeline.work import jsonable

    if args.seeds < 1:
        raise PorterError(f"--seeds {args.seeds}: need at least one seed")
    arch = load_arch(args.arch)
    specs, unsupported = select_kernels(arch, args.kernel)
    family = one_family(specs)
    shapes = parse_shapes(family, args.shapes, "validate")
    check_shapes(specs, shapes)
    dev, reason = decide_device(arch, args.device)
    if dev is None and args.device == "auto":
        print(f"skipped: {reason}; device validation of {len(specs)} {family} kernel(s) on {arch.name} still open")
        return 0
    if args.device == "off":
        results = [_numerics_only(spec, arch) for spec in specs]
    else:
        from porter.validation import device_harness

        results = [isolated(device_harness.validate, spec, arch, None, shapes, args.seeds) for spec in specs]
    report = {"arch": arch.name, "target": arch.target, "device": dev, "mode": args.device,
              "results": results, "unsupported": [u.to_dict() for u in unsupported],
              "passed": all(r["passed"] for r in results)}
    if args.json:
        print(json.dumps(jsonable(report), indent=1))
    else:
        print(_text(report))
    return 0 if report["passed"] else 1


def _numerics_only(spec, arch) -> dict:
    from porter.kernels import family_module
    from porter.levels import Level

    res = family_module(spec.family).numerics(spec, arch)
    passed = bool(res and res.get("passed"))
    return {"name": spec.name, "variant": spec.variant, "numerics": res, "passed": passed,
            "level": (Level.NUMERICS if passed else Level.SASS_CHECKED).label,
            "note": "CPU numerics model only; device validation not run (--device off)"}


def _check_line(c: dict) -> str:
    where = c.get("shape") or c.get("model")
    if isinstance(where, dict):
        where = "x".join(str(v) for v in where.values())
    elif isinstance(where, (list, tuple)):
        where = "x".join(map(str, where))
    bits = [f"{'pass' if c['passed'] else 'FAIL'} {where} seed {c.get('seed')}"]
    for key in ("rel_fro_err", "worst_ratio", "deepgemm_diff", "max_abs_err", "allowed_err", "logits_rel_err"):
        if key in c and isinstance(c[key], float):
            bits.append(f"{key} {c[key]:.3g}")
    written = c.get("written")
    for w in written if isinstance(written, list) else [written] if written else []:
        if not w["passed"]:
            bits.append(f"{w['unwritten']} of {w['elements']} {w['what']} elements unwritten")
    return "  " + ", ".join(bits)


def _text(report: dict) -> str:
    dev = report["device"]
    head = f"{report['arch']} ({report['target']})" + (f" on device {dev['index']} {dev['name']}" if dev else "")
    lines = [f"validate {head}"]
    for r in report["results"]:
        lines.append(f"{r['name']}: {'passed' if r['passed'] else 'FAILED'} (level {r['level']})"
                     + (f"; {r['note']}" if r.get("note") else "") + (f": {r['error']}" if r.get("error") else ""))
        lines += [_check_line(c) for c in r.get("checks", [])]
    for u in report["unsupported"]:
        lines.append(f"{u['name']}: unsupported on {report['arch']} ({u['reason'] or 'needs ' + ', '.join(u['missing'])})")
    n = len(report["results"])
    ok = sum(r["passed"] for r in report["results"])
    lines.append(f"{ok} of {n} kernel(s) passed")
    return "\n".join(lines)
