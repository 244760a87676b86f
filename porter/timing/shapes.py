"""The standard shapes per kernel family: the benchmark shapes the device check times
(porter.runtime.device_runs), written the way `porter predict --shapes` takes them."""

from __future__ import annotations

from porter.errors import PorterError


def standard_shapes(spec) -> list[str]:
    from porter.runtime import device_runs as dr

    if spec.family == "gemm":
        return ["x".join(map(str, s)) for s in dr.GEMM_BENCH_SHAPES]
    if spec.family == "attention":
        return ["x".join(map(str, s)) for s in dr.ATTENTION_BENCH_SHAPES]
    if spec.family == "megakernel":
        return [str(p) for p in dr.MEGAKERNEL_BENCH_POS]
    raise PorterError(f"timing model: no standard shapes for kernel family '{spec.family}'")
