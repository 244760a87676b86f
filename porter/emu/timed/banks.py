"""Shared-memory bank conflicts from the lane addresses the simulator computes.

The shared memory is ``banks`` banks of 4 bytes; one wavefront serves at most one 4-byte
word per bank (any number of lanes reading the same word share it). A warp's access of
``width`` bytes per lane is served in phases of 128 bytes' worth of lanes (32 lanes of 4
bytes, 16 of 8, 8 of 16); each phase takes as many wavefronts as its most-used bank has
distinct words. ldmatrix / stmatrix rows are 16-byte accesses of the lanes that give them.
"""

from __future__ import annotations

import numpy as np


def wavefronts(addrs: np.ndarray, width: int, banks: int = 32) -> int:
    """Wavefronts for one warp access: ``addrs`` the active lanes' byte addresses."""
    if addrs.size == 0:
        return 0
    width = max(4, int(width))
    words_per_lane = width // 4
    lanes_per_phase = max(1, (banks * 4) // width)
    a = (addrs.astype(np.int64) // 4)[:, None] + np.arange(words_per_lane, dtype=np.int64)[None, :]
    total = 0
    for p in range(0, a.shape[0], lanes_per_phase):
        words = np.unique(a[p:p + lanes_per_phase].reshape(-1))
        counts = np.bincount(words % banks, minlength=banks)
        total += int(counts.max())
    return total
