"""What ``porter validate`` and ``porter bench`` run, and where: the kernels a
``--kernel`` pattern selects, the shapes ``--shapes`` names (checked against the
kernels before any device work), the GPU ``--device`` allows, and one kernel's
failure kept beside the others' results.

Exit codes both commands share: 0 passed or skipped, 1 a check failed, 2 bad input,
3 no matching GPU with ``--device on``.
"""

from __future__ import annotations

import re

EXIT_CODES = "exit codes: 0 passed (or skipped), 1 a check failed, 2 bad input, 3 no matching GPU with --device on"
SHAPE_FORMS = {
    "gemm": "MxNxK, e.g. 4096x4096x1024",
    "attention": "BxHxS or BxHqxHkvxSqxSk, e.g. 4x16x4096 or 2x8x2x1024x1024",
    "megakernel": "a model name for validate (e.g. tiny, tiny-gqa4), a decode position for bench (e.g. 1024)",
}


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


def one_family(specs) -> str:
    from porter.errors import PorterError

    families = {s.family for s in specs}
    if len(families) != 1:
        raise PorterError(f"--kernel selects kernels of several families ({', '.join(sorted(families))}); "
                          "name one family or one kernel")
    return families.pop()


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
    from porter.runtime.device_runs import NoDevice, match_device

    if mode == "off":
        return None, "device validation off (--device off)"
    if devices is None:
        from porter.pipeline import device as pdev

        devices, why = pdev.list_devices()
    dev, reason = match_device(arch, devices, why)
    if dev is None and mode == "on":
        raise NoDevice(reason)
    return dev, reason


def skipped_line(reason: str, specs, family: str, arch) -> str:
    """The one line both commands print (exit 0) when ``--device auto`` finds no matching GPU."""
    return (f"skipped: {reason}; device validation and benchmarks of {len(specs)} {family} kernel(s) "
            f"on {arch.name} still open")


def level_reached(spec, arch) -> tuple:
    """(highest porter.levels.Level ``spec`` reaches without a device, the first check
    that stopped it or ""): its build's level (render, NVRTC, SASS and limit checks; the
    compile comes from the on-disk cache when a device run built it already). A build
    that raises establishes nothing."""
    from porter.kernels.build import build_kernel
    from porter.levels import Level

    try:
        build = build_kernel(spec, arch)
    except Exception as exc:   # noqa: BLE001 - a broken render or toolchain: no level was established here
        return Level.FAILED, f"build raised {type(exc).__name__}: {exc}"
    failed = next((c for c in build.checks if not c.passed), None)
    return build.level, (f"{failed.name}: {failed.detail}" if failed else "")


def isolated(fn, spec, arch, *args, **kwargs) -> dict:
    """``fn(spec, arch, ...)``, or a failed result naming the error when this kernel's run
    raises, so one kernel's failure (a bad launch, a tensor map the driver refuses) is
    reported beside the others' results instead of ending the command. The failed
    result carries the level the kernel's build reaches, not one assumed. No device
    stays fatal."""
    from porter.errors import PorterError
    from porter.runtime.device_runs import NoDevice

    try:
        return fn(spec, arch, *args, **kwargs)
    except NoDevice:
        raise
    except PorterError as exc:
        return {"name": spec.name, "variant": spec.variant, "passed": False,
                "level": level_reached(spec, arch)[0].label, "error": str(exc), "checks": [], "rows": []}
