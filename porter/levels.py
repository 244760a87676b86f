"""Validation levels, lowest to highest. A kernel reports the highest it reached."""

from __future__ import annotations

from enum import IntEnum


class Level(IntEnum):
    FAILED = 0          # did not even render or compile
    RENDERED = 1        # template rendered to CUDA source
    COMPILED = 2        # NVRTC + ptxas produced a cubin for the target
    SASS_CHECKED = 3    # tensor-core opcodes present, no spills, within limits
    # A CPU model of the variant's arithmetic (quantization, MMA K, accumulation order)
    # matched the fp64 reference at shapes the kernel takes: no kernel ran, hence "model".
    NUMERICS_MODEL = 4
    DEVICE_VALIDATED = 5  # ran on a GPU of the target arch and matched the reference
    BENCHMARKED = 6     # measured on a GPU against the vendor baseline

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


# Labels reports written before the rename used, mapped to today's (a base arch's old
# report.json read beside a new one).
LEGACY_LABELS = {"numerics": Level.NUMERICS_MODEL.label}
