"""What a requested run will cost, before it starts: host memory, and under emulation the
simulated warp-instructions and time. ``porter validate`` refuses a run beyond its limits
with one line (``--max-host-gb``, ``--time-limit`` raise them) instead of allocating until
MemoryError or simulating for minutes in silence, and says how long an accepted large run
will take.

Host memory is the arrays the harness holds for one shape: inputs and outputs on the host
and on the (emulated) device, their fp64 copies for the reference, the reference itself,
and for attention the fp64 score matrix the reference forms. The figures are estimates
from the shape, sized on the high side.

Simulated time is scaled from a calibration run of the kernel's own smallest emulation
shape (porter.runtime.emulated_cases): warp-instructions grow with the work (GEMM M*N*K,
attention B*Hq*Sq*Sk*D), at the rate that run showed on this machine.
"""

from __future__ import annotations

import os

from porter.errors import PorterError

GB = 10**9
MEMORY_FLAG = "--max-host-gb"
TIME_FLAG = "--time-limit"


def physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_host_limit_bytes() -> int:
    """Half this machine's memory (the rest is for everything else running here)."""
    total = physical_memory_bytes()
    return total // 2 if total else 8 * GB


def host_bytes(spec, shape) -> int:
    """Host memory one shape of ``spec`` needs in the validation harness (an estimate)."""
    if spec.family == "gemm":
        m, n, k = shape
        eb = max(1, int(spec.config.get("element_bytes", 2)))
        # A and B: quantized host and device copies, fp32 and fp64 copies for the references;
        # C: bf16 host and device copies, an fp32 read-back and two fp64 references.
        return (m * k + n * k) * (2 * eb + 4 + 8) + m * n * (2 * 2 + 4 + 8 + 8)
    if spec.family == "attention":
        b, hq, hkv, sq, sk = shape
        d = int(spec.config.get("head_dim", 128))
        q_o = b * hq * sq * d
        kv = 2 * b * hkv * sk * d
        scores = b * hq * sq * sk
        # bf16 host and device copies, fp64 copies; the fp64 reference's scores and
        # probabilities, and the same-precision reference's (fp32).
        return (q_o * 2 + kv) * (2 * 2 + 8) + scores * (8 + 8 + 4 + 4) + b * hq * sq * (4 + 8)
    return 0      # the megakernel's shapes are model names: tiny configurations


def work(spec, shape) -> float:
    """What the simulated instructions grow with, for scaling from the calibration shape."""
    if spec.family == "gemm":
        m, n, k = shape
        return float(m) * n * k
    if spec.family == "attention":
        b, hq, _hkv, sq, sk = shape
        return float(b) * hq * sq * sk * int(spec.config.get("head_dim", 128))
    return 0.0


def _gb(n: float) -> str:
    return f"{n / GB:,.1f} GB" if n >= GB / 10 else f"{n / 2**20:,.0f} MiB"


def _shape_text(shape) -> str:
    return "x".join(str(v) for v in shape) if isinstance(shape, (list, tuple)) else str(shape)


def check_host_memory(specs, shapes, limit_gb: float | None) -> None:
    """Refuse, in one line, a shape whose host arrays would exceed the limit."""
    if not shapes:
        return
    limit = default_host_limit_bytes() if limit_gb is None else int(limit_gb * GB)
    for spec in specs:
        for shape in shapes:
            need = host_bytes(spec, shape)
            if need > limit:
                raise PorterError(
                    f"shape {_shape_text(shape)}: {spec.name} would need about {_gb(need)} of host memory for its "
                    f"inputs, outputs and fp64 references, beyond the limit of {_gb(limit)}"
                    + (" (half this machine's memory)" if limit_gb is None else "")
                    + f"; give a smaller shape, or raise the limit with {MEMORY_FLAG}")


def emulation_estimate(spec, arch, shape, calibrate) -> dict | None:
    """{warp_instructions, seconds, from_shape} for one emulated launch at ``shape``, scaled
    from ``calibrate(spec, arch, shape0) -> (warp_instructions, seconds)`` at the kernel's
    smallest emulation shape; None when there is nothing to scale (no cases, the megakernel)."""
    from porter.runtime.emulated_cases import emulation_shapes

    small = emulation_shapes(spec, smallest=True)
    if not small or not work(spec, shape) or not work(spec, small[0]):
        return None
    ratio = work(spec, shape) / work(spec, small[0])
    if ratio <= 4:            # about the calibration's own size: nothing worth estimating
        return None
    measured = calibrate(spec, arch, small[0])
    if not measured or not measured[0] or not measured[1]:
        return None           # the calibration run did not run (a failure is the real run's to report)
    instructions, seconds = measured
    return {"warp_instructions": int(instructions * ratio), "seconds": seconds * ratio,
            "from_shape": _shape_text(small[0]), "from_instructions": int(instructions)}


def check_emulation_time(spec, shape, estimate: dict | None, limit_s: float | None) -> str:
    """'' or the line that says how long an accepted run takes; PorterError beyond the limit."""
    if estimate is None:
        return ""
    what = (f"{spec.name} at {_shape_text(shape)}: about {estimate['warp_instructions']:,} simulated "
            f"warp-instructions, about {estimate['seconds']:,.0f} s in porter's PTX simulator (scaled from "
            f"{estimate['from_instructions']:,} at {estimate['from_shape']} on this machine)")
    if limit_s is not None and estimate["seconds"] > limit_s:
        raise PorterError(f"{what}: beyond the wall-clock limit of {limit_s:g} s per run; give a smaller shape, "
                          f"or raise the limit with {TIME_FLAG} SECONDS (0: none)")
    return what
