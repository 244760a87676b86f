"""The numerics-model level judges only shapes the kernel itself can take: every GEMM
shape the CPU model runs passes the kernel's own check_problem_shape, and every
attention case passes the host-side input checks and launch plan of its kernel (which
masks sequence tails, so any Sq, Sk is a shape it takes)."""
from __future__ import annotations

import numpy as np
import pytest

from porter.descriptor.arch import load_arch
from porter.kernels import attention, gemm
from porter.kernels.base import Unsupported

ARCHS = ("hopper", "blackwell")
# A check's multiply-adds: 2^27 takes about 0.3 s in the numpy model (nvfp4, the slowest).
MAX_MACS = 1 << 27


def _specs(family, name):
    arch = load_arch(name)
    return arch, [s for s in family.variants(arch) if not isinstance(s, Unsupported)]


@pytest.mark.parametrize("arch_name", ARCHS)
def test_gemm_numerics_runs_only_shapes_the_kernel_takes(arch_name, monkeypatch):
    from porter.validation import gemm_numerics

    arch, specs = _specs(gemm, arch_name)
    assert specs
    for spec in specs:
        ran = []

        def record(variant, m, n, k, seed=0, mma_k=None, promote_k=None):
            ran.append((m, n, k))
            return {"shape": (m, n, k), "seed": seed, "mma_k": mma_k, "promote_k": promote_k, "passed": True}

        monkeypatch.setattr(gemm_numerics, "check_gemm", record)
        result = gemm.numerics(spec, arch)
        shapes = sorted(set(ran))
        assert result["passed"] and shapes == sorted(gemm.numerics_shapes(spec)), spec.name
        assert len(shapes) >= 3 and any(m != n for m, n, _ in shapes), spec.name
        for m, n, k in shapes:
            gemm.check_problem_shape(spec, m, n, k)          # raises for a shape the kernel refuses
            assert m * n * k <= MAX_MACS, (spec.name, m, n, k)
        # K long enough to wrap the shared-memory ring and restart every promotion interval.
        cfg = spec.config
        longest = max(k for _, _, k in shapes)
        assert longest > cfg["stages"] * cfg["tile_k"], spec.name
        if cfg.get("promote_every_k"):
            assert longest // cfg["promote_every_k"] >= 3, spec.name


def test_gemm_numerics_shapes_follow_the_cluster_unit():
    """Hopper's 2-CTA clusters walk 2 M tiles as one unit: M must be a multiple of 256."""
    arch = load_arch("hopper")
    spec = gemm.make_spec(arch, "bf16")
    um, un, uk = gemm.shape_multiples(spec)
    assert (um, un, uk) == tuple(spec.config["shape_multiple"])
    assert all(m % um == 0 and n % un == 0 and k % uk == 0 for m, n, k in gemm.numerics_shapes(spec))


@pytest.mark.parametrize("arch_name", ARCHS)
def test_attention_numerics_cases_are_shapes_the_kernel_takes(arch_name, monkeypatch):
    import ml_dtypes

    from porter.validation import attention_numerics

    arch, specs = _specs(attention, arch_name)
    assert specs
    for spec in specs:
        ran = []

        def record(head_dim, causal, b, hq, hkv, sq, sk, seed=0, block_n=128, **softmax_options):
            ran.append((head_dim, causal, b, hq, hkv, sq, sk, block_n))
            return {"passed": True}

        monkeypatch.setattr(attention_numerics, "check_attention", record)
        assert attention.numerics(spec, arch)["passed"]
        assert len(ran) == len(attention.NUMERICS_CASES)
        for head_dim, causal, b, hq, hkv, sq, sk, block_n in ran:
            # the model runs at the kernel's head dim, masking and KV tile
            assert (head_dim, causal, block_n) == (spec.config["head_dim"], spec.config["causal"],
                                                   spec.config["block_n"])
            q = np.zeros((b, hq, sq, head_dim), ml_dtypes.bfloat16)
            kv = np.zeros((b, hkv, sk, head_dim), ml_dtypes.bfloat16)
            assert attention.validate_inputs(q, kv, kv) == (b, hq, hkv, sq, sk, head_dim)
            plan = attention.launch_plan(spec, arch, b, hq, hkv, sq, sk)
            assert plan["tiles"] == b * hq * -(-sq // spec.config["block_m"])
