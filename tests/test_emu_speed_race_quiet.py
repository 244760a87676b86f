"""The race detector's bound test (``RaceDetector._quiet``: every agent's largest stored epoch
within the accessing warp's limit, so no byte can race) skips only work that would find
nothing: over random histories with frequent barriers (the bound holds often) and races,
rows and spans checked with the bound give the same outcome, message and shadow as the
per-byte check, which never uses it."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.race import RaceDetector
from race_fakes import FakeCTA, detector, outcome, same_shadow


def _sync_all(rng, pairs, agents: int) -> None:
    """Every agent releases into one phase and a random few acquire it (the same in every
    detector of ``pairs``)."""
    takers = [int(x) for x in rng.choice(agents, int(rng.integers(1, agents + 1)), replace=False)]
    for det, ws in pairs:
        holder = type("Phase", (), {})()
        for w in ws:
            det.release(w, holder)
        det.publish(holder, 0)
        for t in takers:
            det.acquire(ws[t], holder, 0)


@pytest.mark.parametrize("seed", range(6))
def test_bound_matches_bytes(seed, monkeypatch):
    quiet = {"hits": 0}
    real = RaceDetector._quiet

    def counted(self, s, aid, limit, write):
        ok = real(self, s, aid, limit, write)
        quiet["hits"] += ok
        return ok
    monkeypatch.setattr(RaceDetector, "_quiet", counted)
    rng = np.random.default_rng(100 + seed)
    size, agents = 2048, 4
    by_bytes, wb = detector(agents)
    fast, wf = detector(agents)
    cta_b, cta_f = FakeCTA(size), FakeCTA(size)
    races = 0
    for step in range(400):
        k = int(rng.integers(agents))
        write = bool(rng.integers(2))
        line = step + 1
        if rng.integers(3) == 0:                  # a span (TMA landing, bulk copy)
            lo = int(rng.integers(0, size - 64))
            hi = lo + int(rng.integers(1, 64))
            a = outcome(lambda: by_bytes.access(wb[k], cta_b, np.arange(lo, hi), write, line))
            b = outcome(lambda: fast.check_span(cta_f, lo, hi, k, wf[k].vc, write, line, wf[k].name))
        else:                                     # an aligned access by lanes
            width = int(rng.choice([4, 8, 16]))
            offs = rng.integers(0, size // width, int(rng.integers(1, 33))).astype(np.int64) * width
            span = (offs[:, None] + np.arange(width)).reshape(-1)
            a = outcome(lambda: by_bytes.access(wb[k], cta_b, span, write, line))
            b = outcome(lambda: fast.access_rows(wf[k], cta_f, offs, width, write, line, "", offs // width))
        assert a == b
        races += a is not None
        same_shadow(by_bytes, fast, cta_b, cta_f)
        if rng.integers(3) == 0:
            _sync_all(rng, ((by_bytes, wb), (fast, wf)), agents)
    assert races > 0 and quiet["hits"] > 20      # both outcomes were reached
