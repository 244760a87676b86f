"""``porter plan ARCH --from BASE``: what must change to port the kernels, in dependency order."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("plan", help="porting plan: primitives and kernels that change from BASE to ARCH, and why")
    p.add_argument("arch", help="target descriptor name or path")
    p.add_argument("--from", dest="base", metavar="BASE", help="base arch (default: the most different installed one)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from porter.arch import load_arch
    from porter.errors import PorterError
    from porter.plan import most_different_arch, porting_plan

    target = load_arch(args.arch)
    base = load_arch(args.base) if args.base else most_different_arch(target)
    if base is None:
        raise PorterError(f"plan {args.arch}: no other descriptor to port from; give --from BASE")
    if base.digest == target.digest:
        raise PorterError(f"--from {args.base}: the base is the target itself; pick another arch")
    plan = porting_plan(base, target)
    print(json.dumps(plan.to_dict(), indent=1) if args.json else plan.text())
    return 0
