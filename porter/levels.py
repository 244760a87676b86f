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
    # The kernel's PTX executed in porter's own simulator (porter.emu) and its outputs met
    # the reference: the code ran, but not on a GPU (no timing, sequentially consistent memory).
    EMULATED = 5
    DEVICE_VALIDATED = 6  # ran on a GPU of the target arch and matched the reference
    BENCHMARKED = 7     # measured on a GPU against the vendor baseline

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


# What a level is, where a label alone would let a reader assume more.
QUALIFIERS = {Level.NUMERICS_MODEL: "CPU model of the arithmetic, no kernel ran",
              Level.EMULATED: "executed in porter's PTX simulator, not on a GPU"}

# Labels reports written before the rename used, mapped to today's (a base arch's old
# report.json read beside a new one).
LEGACY_LABELS = {"numerics": Level.NUMERICS_MODEL.label}
