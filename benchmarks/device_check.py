"""One prepared device check: validate and benchmark every Hopper kernel in one short GPU visit.

Two phases, so a lent H200's minutes go to running kernels, not compiling them:

    python benchmarks/device_check.py prepare     # here (toolchain, no GPU): cubins + manifest
                                                  # in build/device_check/
    python3 benchmarks/device_check.py run        # on the GPU machine (no toolchain needed)

The device call (carry the prepared folder; ``--budget`` 300 s of kernel work, within
7 minutes of device time with the machine's start, so a rerun fits a 15-minute visit):

    run(command="PYTHONUNBUFFERED=1 python3 benchmarks/device_check.py run", carry=["build/device_check"],
        timeout_s=360)

``plan`` prints the visit's timeline (every child, its estimate, what ``--budget`` drops).

``run`` refuses a manifest from another checkout or arch (one line saying what
differs), validates every kernel form first, each in its own child process with a time
limit (a smoke launch at its smallest shape first, a watchdog on every launch), then
benchmarks the forms that validated in the order of what they decide (A/B pairs of a
changed kernel's old and new form first), each beside porter's timing-model prediction;
it skips a benchmark that no longer fits ``--budget`` seconds (300), writes
``results.json`` and ``run.log`` to ``--out`` (default ``$OUT``, else
build/device_check/out), and prints a compact table last (measured beside predicted,
the prediction labelled "predicted by porter's timing model, not measured", and one line
per A/B or tuned-vs-default pair). ``rehearse`` runs prepare and run end to end against
porter's rehearsal GPU (``porter.runtime.fakedriver``) on a machine without a driver:
kernels that pass, fail, fault and hang, gemm.bf16's primary cubin refused so its nvcc
13.0 fallback loads, the fp8 GEMM and the megakernel (run in porter's VM) benchmarked,
the manifest's source check on; ``--snapshot`` rehearses on a copy of the checkout, and
``PORTER_GPU_BINDINGS=DIR`` with the GPU machine's cuda-bindings 13.0 installed there. The logic lives in ``porter.runtime.device_check``; this
script only makes the checkout importable (the device machine's python3 has no porter
install: it puts the checkout on ``sys.path`` and maps ``porter.validation`` onto
``validation/``).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREPARED = ROOT / "build" / "device_check"


def _import_porter() -> None:
    """Make ``porter`` and ``porter.validation`` importable from this checkout."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        import porter.validation  # noqa: F401  (installed, or an editable install)
        return
    except ModuleNotFoundError:
        pass
    spec = importlib.util.spec_from_file_location(
        "porter.validation", ROOT / "validation" / "__init__.py",
        submodule_search_locations=[str(ROOT / "validation")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["porter.validation"] = module
    spec.loader.exec_module(module)
    import porter

    porter.validation = module


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("phase", choices=("prepare", "plan", "run", "rehearse", "child"),
                   help="prepare: build cubins here; plan: print the visit's timeline from the manifest; run: on the "
                        "GPU machine; rehearse: prepare + run on the rehearsal GPU; child: one kernel (used by run)")
    p.add_argument("kernel", nargs="?", help="child: the kernel")
    p.add_argument("--out", type=Path, help="prepare: the prepared folder (build/device_check); "
                                            "run: where results go ($OUT, else build/device_check/out)")
    p.add_argument("--prepared", type=Path, help="run: the prepared folder (default $PORTER_CUBIN_DIR or build/device_check)")
    p.add_argument("--budget", type=float, default=None, help="run: seconds for all kernels together (default 300)")
    p.add_argument("--profile", default="full", choices=("full", "rehearsal"),
                   help="prepare: the shapes (rehearsal: small ones a CPU model can compute)")
    p.add_argument("--kernels", nargs="+", metavar="NAME", help="only these kernels")
    p.add_argument("--child-limit", type=float, help="run: seconds each kernel's child may take (default per family)")
    p.add_argument("--no-fallback", action="store_true", help="prepare: no fallback cubins (nvcc <= 13.0)")
    p.add_argument("--fallback-kernels", nargs="+", metavar="NAME",
                   help="prepare: fallback cubins for these kernels only (default: every kernel)")
    p.add_argument("--snapshot", action="store_true",
                   help="rehearse: on a copy of the checkout (a shared tree edited meanwhile cannot go stale)")
    p.add_argument("--phase", dest="child_phase", default="validate", choices=("validate", "bench"),
                   help="child: validate or benchmark the kernel form")
    p.add_argument("--ab", action="append", metavar="KERNEL:KEY=VALUE[,KEY=VALUE]",
                   help="prepare/rehearse: also build this previous form of KERNEL (--set knobs) and benchmark "
                        "it against the default, first (repeatable)")
    args = p.parse_args(argv)
    _import_porter()
    from porter.errors import PorterError
    from porter.runtime import device_check as dc

    script = Path(__file__).resolve()
    try:
        if args.phase == "child":
            if not args.kernel:
                raise PorterError("child: name the kernel")
            return dc.child(args.kernel, args.child_phase)
        if args.phase == "prepare":
            return dc.prepare(args.out or PREPARED, profile=args.profile, fallback=not args.no_fallback,
                              kernels=args.kernels, ab=args.ab, fallback_kernels=args.fallback_kernels)
        budget = args.budget if args.budget is not None else dc.BUDGET_S
        if args.phase == "plan":
            from porter.runtime import cubins

            folder = args.prepared or Path(os.environ.get(cubins.CUBIN_DIR_ENV) or PREPARED)
            print("\n".join(dc.plan_lines(cubins.read_manifest(folder), budget, args.kernels)))
            return 0
        if args.phase == "rehearse":
            return dc.rehearse(args.out or PREPARED / "rehearsal", script, budget, kernels=args.kernels,
                               child_limit_s=args.child_limit, ab=args.ab, snapshot=args.snapshot)
        out = args.out or Path(os.environ.get("OUT") or PREPARED / "out")
        return dc.run(out, script, budget, prepared=args.prepared, kernels=args.kernels,
                      child_limit_s=args.child_limit)
    except PorterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
