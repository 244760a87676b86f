"""Stand-ins for the warps and CTAs the race detector is handed (it reads only a warp's
agent id, name and program file, and a CTA's name and shared bytes), and helpers for
comparing two detectors fed the same history. Shared by the race detector's tests."""

from __future__ import annotations

import numpy as np

from porter.emu.errors import CheckFailed
from porter.emu.race import RaceDetector


class _Prog:
    file = "k.ptx"


class FakeWarp:
    def __init__(self, aid: int):
        self.aid = aid
        self.name = f"CTA 0 warp {aid}"
        self.prog = _Prog()


class _Smem:
    def __init__(self, size: int):
        self.data = np.zeros(size, np.uint8)


class FakeCTA:
    name = "CTA 0"

    def __init__(self, size: int):
        self.smem = _Smem(size)


def detector(n_warps: int):
    """A started detector and its ``n_warps`` agents."""
    det = RaceDetector(sched=None)
    warps = [FakeWarp(i) for i in range(n_warps)]
    for w in warps:
        det.add_warp(w)
    det.start()
    return det, warps


def outcome(fn):
    """The race message ``fn`` raised, or None."""
    try:
        fn()
        return None
    except CheckFailed as exc:
        return str(exc)


def same_shadow(a, b, cta_a, cta_b) -> None:
    sa, sb = a.shadow(cta_a), b.shadow(cta_b)
    for name in ("w_epoch", "w_line", "r_epoch", "r_line"):
        assert np.array_equal(getattr(sa, name), getattr(sb, name)), name


def maybe_sync(rng, pairs, agents: int = 4) -> None:
    """One time in four a barrier between two agents orders their past (the same in every
    detector of ``pairs``: (detector, warps))."""
    if rng.integers(4) == 0:
        x, y = (int(v) for v in rng.choice(agents, 2, replace=False))
        for det, ws in pairs:
            holder = type("Phase", (), {})()
            det.release(ws[x], holder)
            det.publish(holder, 0)
            det.acquire(ws[y], holder, 0)
