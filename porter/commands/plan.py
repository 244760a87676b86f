"""``porter plan ARCH --from BASE``: what must change to port the kernels, in dependency order."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("plan", help="porting plan: primitives and kernels that change from BASE to ARCH, and why")
    p.add_argument("arch", help="target descriptor name or path")
    p.add_argument("--from", dest="base", metavar="BASE",
                   help="base arch (default: the descriptor's identity.previous)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from porter.descriptor.arch import load_arch
    from porter.errors import PorterError
    from porter.pipeline.runner import choose_base
    from porter.planning.plan import porting_plan

    target = load_arch(args.arch)
    base, why = choose_base(target, args.base)
    if base is None:
        raise PorterError(f"plan {args.arch}: no base arch to port from ({why}); give --from BASE")
    if base.digest == target.digest:
        raise PorterError(f"--from {args.base}: the base is the target itself; pick another arch")
    plan = porting_plan(base, target)
    if args.json:
        print(json.dumps({**plan.to_dict(), "base_why": why}, indent=1))
    else:
        print(f"base: {base.name} ({why})")
        print(plan.text())
    return 0
