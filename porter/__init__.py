"""porter: retarget GPU kernels to a new GPU generation.

Arch descriptors (arch/*.yaml) are loaded into typed ``Arch`` objects, kernel
templates (templates/*.cu.j2) are rendered from descriptor features, compiled with
NVRTC, disassembled with nvdisasm and checked against SASS signatures, limits and
numerics references.
"""

__version__ = "0.1.0"


def _validation_from_the_checkout() -> None:
    """``porter.validation`` is the repository's top-level ``validation/`` folder, which
    pyproject's package-dir maps into the package for an install, editable or not. When this
    package is imported from a checkout with no mapping that covers it (``python -m porter``
    or a benchmark script run in the repository root beside a regular ``pip install .``: the
    checkout comes first on sys.path), load the subpackage from the checkout's folder."""
    import importlib.util
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    folder = here.parent / "validation"
    if (here / "validation").is_dir() or not (folder / "__init__.py").is_file():
        return                                   # an installed wheel, or no checkout around
    if importlib.util.find_spec(__name__ + ".validation") is not None:
        return                                   # an editable install's mapping finds it
    spec = importlib.util.spec_from_file_location(__name__ + ".validation", folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    globals()["validation"] = module             # as an import of the subpackage would bind it


_validation_from_the_checkout()


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
