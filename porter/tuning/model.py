"""Point predictions for ranking: the timing model's central time of a configuration at
one shape, without the range.

``porter.timing.predict`` evaluates the model 3 + 2 x (uncertain figures) times per call
(the central time, both ends of the range, each uncertain figure's sensitivity): 39 model
evaluations for a Hopper GEMM. A ranking reads only the central time, so screening every
legal configuration by ``predict`` spent 97% of its time on ranges nobody looked at. Here
the model runs once (the same ``_time`` that ``predict`` calls, so the central time is
``predict``'s to the last bit); the candidates that survive the screen get the full
``predict``, range and all, in the evaluate task. L1 (``level="L1"``) replaces the
per-tile period by the one measured in the timed simulator (``porter.timing.l1``).
"""

from __future__ import annotations


def point(arch, spec, product: str, shape: str, level: str = "L0") -> dict:
    """{time_us, tflops, gb_s, bound, level} of ``spec`` on ``product`` at ``shape``
    (predicted by porter's timing model, not measured)."""
    from porter.timing.figures import Figures
    from porter.timing.predict import _time   # the model's one evaluation (predict adds the range)

    if product and product != arch.product:
        arch = arch.for_product(product)
    seconds, resources, out = _time(spec, arch, Figures.of(arch), shape, level)
    flops = out.get("flops")
    bound = max(resources, key=lambda r: resources[r])
    direct = bool(out.get("direct"))
    if level == "L1" and not direct:
        bound = out.get("extra", {}).get("l1_bound", bound)   # the timed run's busiest unit, or its latency
    return {"time_us": seconds * 1e6, "tflops": flops / seconds / 1e12 if flops else None,
            "gb_s": out["bytes_moved"] / seconds / 1e9, "bound": bound,
            "level": "L0" if direct else level}
