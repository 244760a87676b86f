"""Every Hopper GEMM and attention kernel executed in porter's PTX simulator (level
"emulated": not on a GPU) at shapes that walk every path, several seeds each, with the
device harness's poisoned outputs, fp64 references and tolerance policies.

GEMM: a single k-block, then 2x2 cluster units on the emulated device's one cluster (the
persistent scheduler walks several tiles and the TMA ring's phases wrap). Attention:
ragged sequence lengths, grouped-query heads, causal with seq_q > seq_k and seq_q < seq_k.
"""

from __future__ import annotations

import pytest

from porter.runtime.emulated_runs import emulate, emulation_shapes
from porter.kernels import family_module

HOPPER_KERNELS = [("gemm", "gemm.bf16"), ("gemm", "gemm.fp8"), ("attention", "attention.hd64"),
                  ("attention", "attention.hd64.causal"), ("attention", "attention.hd128"),
                  ("attention", "attention.hd128.causal")]


@pytest.mark.parametrize("family,name", HOPPER_KERNELS, ids=[n for _, n in HOPPER_KERNELS])
def test_hopper_kernel_emulated(family, name, hopper):
    spec = next(s for s in family_module(family).variants(hopper) if s.name == name)
    result = emulate(spec, hopper, seeds=2)
    assert result["status"] == "passed", result["reason"]
    shapes = emulation_shapes(spec)
    assert len(result["checks"]) == 2 * len(shapes) >= 4
    for c in result["checks"]:
        written = c["written"] if isinstance(c["written"], list) else [c["written"]]
        assert c["passed"] and written and all(w["passed"] and w["unwritten"] == 0 for w in written)
    assert len({c["seed"] for c in result["checks"]}) == len(result["checks"])   # a fresh input set each
    runs = result["runs"]
    assert runs and all(r["warp_instructions"] > 1000 for r in runs)
    if family == "gemm":
        # the larger case covers 3 cluster units on the emulated device's 4 SMs (2 clusters
        # of 2 CTAs): a remainder, one cluster's persistent scheduler walks 2 units, the other 1
        m, n, _ = shapes[1]
        units = (m // shapes[0][0]) * (n // shapes[0][1])
        assert runs[-1]["ctas"] == 4 and units == 3
        assert runs[-1]["wgmma"] > runs[0]["wgmma"]
