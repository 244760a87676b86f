"""``porter predict ARCH``: each kernel's predicted time on each product, from porter's
timing model (porter.timing), with the binding resource and the range its uncertain
figures allow. Every figure printed is predicted, not measured, and says so."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("predict", help="predicted speed of each kernel per product and shape (timing model, not measured)")
    p.add_argument("arch", help="descriptor name or path")
    p.add_argument("--kernel", default=None, help="a family (gemm, attention, megakernel) or a kernel name")
    p.add_argument("--product", action="append", default=None,
                   help="a product the descriptor names (repeatable; default: every product)")
    p.add_argument("--shapes", nargs="+", default=None, help="shapes (default: the device check's benchmark shapes)")
    p.add_argument("--json", action="store_true", help="print a JSON list of predictions")
    p.add_argument("--calibration", action="store_true",
                   help="print the calibration table (published ladders, one fitted factor) and the held-back "
                        "anchors beside raw predictions, as Markdown, for the products this descriptor names")
    p.add_argument("--no-cache", action="store_true",
                   help="predict afresh instead of reading porter's prediction cache (content-keyed; see porter.timing.cache)")
    p.add_argument("--level", choices=("L0", "L1"), default="L0",
                   help="L1: each kernel's per-tile period from the simulator's timed mode (porter.timing.l1; "
                        "seconds to a minute per kernel, then cached like L0, keyed on the simulator's source too) instead of L0's from its configuration")
    from porter.kernels.knobs import add_set_argument

    add_set_argument(p)
    p.set_defaults(func=run)


def _specs(arch, kernel):
    from porter import kernels
    from porter.commands.device_common import select_kernels
    from porter.kernels.base import KernelSpec

    if kernel:
        return select_kernels(arch, kernel)[0]
    out = []
    for fam in kernels.FAMILIES:
        out.extend(s for s in kernels.family_module(fam).variants(arch) if isinstance(s, KernelSpec))
    return out


def predictions(arch, specs, products, shapes, *, cache: bool = True, stats: dict | None = None,
                level: str = "L0") -> list[dict]:
    """``Prediction.to_dict()`` per kernel, product and shape; read from porter's content-keyed
    prediction cache where an earlier run made it (``cache=False`` recomputes, and stores)."""
    from porter.timing import predict, standard_shapes
    from porter.timing.cache import cached_predict

    out = []
    for spec in specs:
        for product in products:
            for shape in (shapes or standard_shapes(spec)):
                if cache:
                    out.append(cached_predict(arch, spec, product=product, shape=shape, stats=stats, level=level))
                else:
                    out.append(predict(arch, spec, product=product, shape=shape, level=level).to_dict())
    return out


def anchor_for(pred: dict) -> dict | None:
    """The published figure for this prediction's product, kernel and shape (the held-back
    anchors of porter.timing.calibration: cuBLAS, cuDNN, FA3, FA4, ThunderKittens), with its
    source and the prediction's error against it; None where nobody publishes one."""
    from porter.timing.calibration import HELD_BACK

    for product, kernel, shape, tflops, what in HELD_BACK:
        if (product, kernel, shape) == (pred["product"], pred["kernel"], pred["shape"]) and pred["tflops"]:
            return {"tflops": tflops, "what": what, "error": round(pred["tflops"] / tflops - 1, 4)}
    return None


def run(args) -> int:
    import json

    from porter.descriptor.arch import load_arch
    from porter.errors import PorterError
    from porter.kernels.knobs import apply_knobs, parse_sets
    from porter.timing import LABEL

    arch = load_arch(args.arch)
    if args.calibration:
        return _calibration(arch, getattr(args, "level", "L0"))
    specs = _specs(arch, args.kernel)
    knobs = parse_sets(args.knobs)
    if knobs:
        specs, notes = apply_knobs(arch, specs, knobs)
    products = args.product or list(arch.product_names)
    for p in products:
        if p not in arch.product_names:
            raise PorterError(f"--product {p}: {arch.name} names {', '.join(arch.product_names)}")
    if args.shapes and len({s.family for s in specs}) > 1:
        raise PorterError("--shapes: the selected kernels are of several families; name one with --kernel")
    preds = predictions(arch, specs, products, args.shapes, cache=not args.no_cache,
                        level=getattr(args, "level", "L0"))
    for p in preds:
        p["anchor"] = anchor_for(p)
    if args.json:
        print(json.dumps(preds, indent=1))
        return 0
    print(f"{arch.name}: {LABEL}")
    print(f"{'kernel':28} {'product':14} {'shape':22} {'time us':>10} {'range us':>21} {'TFLOP/s':>8} {'GB/s':>8} {'% peak':>6}  bound")
    for p in preds:
        tf = f"{p['tflops']:8.0f}" if p["tflops"] is not None else f"{'-':>8}"
        print(f"{p['kernel']:28} {p['product']:14} {p['shape']:22} {p['time_us']:10.1f} "
              f"{p['low']:10.1f}-{p['high']:<10.1f} {tf} {p['gb_s']:8.0f} {p['pct_peak']:6.1f}  {p['bound']}")
    anchored = [p for p in preds if p["anchor"]]
    if anchored:
        print("\npublished figures for the same product and shape (measured by others; the prediction beside it is not):")
    for p in anchored:
        a = p["anchor"]
        print(f"  {p['kernel']} {p['product']} {p['shape']}: published {a['tflops']:.0f} TFLOP/s, predicted "
              f"{p['tflops']:.0f} ({100 * a['error']:+.1f}%): {a['what']}")
    for p in preds:     # what a queue model's instruction costs and counter wake-up came from (the megakernel)
        if p["extra"].get("costs"):
            print(f"{p['kernel']} {p['product']} ({p['level']}): instruction costs from {p['extra']['costs']}; "
                  f"counter wake-up from {p['extra'].get('wake_up', '-')}")
    return 0


def _calibration(arch, level: str = "L0") -> int:
    from porter.timing import LABEL
    from porter.timing.calibration import PRODUCT, calibrate, held_back, held_back_markdown, table_markdown

    print(f"{arch.name}: {LABEL}\n")
    if PRODUCT in arch.product_names:
        print(table_markdown(calibrate(arch, level)) + "\n")
    else:
        print(f"No calibration: the published ladders are {PRODUCT} figures and {arch.name} does not name that "
              "product; nothing is fitted for it.\n")
    rows = held_back(arch)
    if rows:
        print("Held-back anchors beside raw predictions (nothing fitted, nothing tuned to them):\n")
        print(held_back_markdown(rows))
    return 0
