"""The kernels' latent launch and teardown hazards and the host's alignment checks
(issue #11, items 13-16), checked without a GPU: on the generated source, the compiled
PTX, and the host-side launch plan."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter.errors import PorterError
from porter.runtime import plan_gemm

BF16 = ml_dtypes.bfloat16


def bf16(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, cols)).astype(BF16)


def misaligned_bf16(rows: int, cols: int, offset: int = 2) -> np.ndarray:
    raw = np.zeros(rows * cols * 2 + 64, np.uint8)
    start = (-raw.ctypes.data) % 16 + offset
    return raw[start:start + rows * cols * 2].view(BF16).reshape(rows, cols)


# -- item 16: alignment of every buffer the kernels touch ------------------------------------


@pytest.mark.parametrize("arch", ["hopper", "blackwell"])
def test_misaligned_output_buffer_is_one_line_naming_out(arch):
    out = misaligned_bf16(256, 256)
    assert out.ctypes.data % 16 == 2 and out.flags.c_contiguous
    with pytest.raises(PorterError) as info:
        plan_gemm(bf16(256, 128), bf16(256, 128), arch=arch, out=out)
    msg = str(info.value)
    assert "\n" not in msg and "out starts at" in msg and "16-byte aligned" in msg and "epilogue" in msg


def test_aligned_output_buffer_plans():
    out = np.zeros((256, 256), BF16)
    plan = plan_gemm(bf16(256, 128), bf16(256, 128), arch="hopper", out=out)
    assert plan.out is not None and plan.out.ptr % 16 == 0


@pytest.mark.parametrize("which", ["a", "b"])
def test_misaligned_operands_name_the_argument(which):
    args = {"a": bf16(256, 128), "b": bf16(256, 128)}
    args[which] = misaligned_bf16(256, 128, offset=8)
    with pytest.raises(PorterError, match=f"{which.upper()} starts at 0x[0-9a-f]+, not 16-byte aligned"):
        plan_gemm(args["a"], args["b"], arch="hopper")
