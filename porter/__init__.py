"""porter: retarget GPU kernels to a new GPU generation.

Arch descriptors (arch/*.yaml) are loaded into typed ``Arch`` objects, kernel
templates (templates/*.cu.j2) are rendered from descriptor features, compiled with
NVRTC, disassembled with nvdisasm and checked against SASS signatures, limits and
numerics references.
"""

__version__ = "0.1.0"


# Host entry points, imported on first use so ``import porter`` stays light and GPU-free:
# ``porter.gemm(a, b, ...)`` and ``porter.attention(q, k, v, ...)``.
_LAZY = {
    "gemm": ("porter.runtime.gemm", "gemm"),
    "attention": ("porter.kernels.attention", "attention"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise AttributeError(f"porter.{name} is not available in this install ({exc})") from None
    raise AttributeError(f"module 'porter' has no attribute {name!r}")
