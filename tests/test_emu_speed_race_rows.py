"""The race detector's row check (one shadow row per lane of an aligned access) decides and
records exactly what its per-byte check does: the same race with the same message, and
the same shadow state afterwards, over random access histories."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.errors import CheckFailed
from porter.emu.race import RaceDetector


class _Prog:
    file = "k.ptx"


class _Warp:
    def __init__(self, aid: int):
        self.aid = aid
        self.name = f"CTA 0 warp {aid}"
        self.prog = _Prog()


class _Smem:
    def __init__(self, size: int):
        self.data = np.zeros(size, np.uint8)


class _CTA:
    name = "CTA 0"

    def __init__(self, size: int):
        self.smem = _Smem(size)


def _detector(n_warps: int):
    det = RaceDetector(sched=None)
    warps = [_Warp(i) for i in range(n_warps)]
    for w in warps:
        det.add_warp(w)
    det.start()
    return det, warps


def _outcome(fn):
    try:
        fn()
        return None
    except CheckFailed as exc:
        return str(exc)


@pytest.mark.parametrize("seed", range(6))
def test_rows_match_bytes(seed):
    rng = np.random.default_rng(seed)
    size = 4096
    by_bytes, wb = _detector(4)
    by_rows, wr = _detector(4)
    cta_b, cta_r = _CTA(size), _CTA(size)
    races = 0
    for step in range(300):
        k = int(rng.integers(4))
        width = int(rng.choice([1, 2, 4, 8, 16]))
        lanes = int(rng.integers(1, 33))
        offs = rng.integers(0, size // width, lanes).astype(np.int64) * width
        write = bool(rng.integers(2))
        line = step + 1
        span = (offs[:, None] + np.arange(width)).reshape(-1)
        a = _outcome(lambda: by_bytes.access(wb[k], cta_b, span, write, line, "a store" if write else ""))
        b = _outcome(lambda: by_rows.access_rows(wr[k], cta_r, offs, width, write, line, "a store" if write else ""))
        assert a == b
        races += a is not None
        sb, sr = by_bytes.shadow(cta_b), by_rows.shadow(cta_r)
        for name in ("w_epoch", "w_line", "r_epoch", "r_line"):
            assert np.array_equal(getattr(sb, name), getattr(sr, name)), name
        if rng.integers(5) == 0:                     # a barrier between two warps orders their past
            x, y = (int(v) for v in rng.choice(4, 2, replace=False))
            for det, ws in ((by_bytes, wb), (by_rows, wr)):
                holder = type("Phase", (), {})()
                det.release(ws[x], holder)
                det.publish(holder, 0)
                det.acquire(ws[y], holder, 0)
    assert races > 0          # the histories do reach races, so the messages were compared
