"""Kernel families: each module provides variants(arch), render(spec, arch), numerics(spec, arch)."""

from __future__ import annotations

import importlib

from porter.errors import PorterError

# family name -> module under porter.kernels
FAMILIES = {
    "attention": "attention",
    "gemm": "gemm",
    "megakernel": "megakernel",
}


def family_module(name: str):
    if name not in FAMILIES:
        raise PorterError(f"unknown kernel family {name!r}; known: {', '.join(sorted(FAMILIES))}")
    return importlib.import_module(f"porter.kernels.{FAMILIES[name]}")
