"""The race detector's row check (one shadow row per lane of an aligned access) decides and
records exactly what its per-byte check does: the same race with the same message, and
the same shadow state afterwards, over random access histories."""

from __future__ import annotations

import numpy as np
import pytest

from race_fakes import FakeCTA, detector, maybe_sync, outcome, same_shadow


@pytest.mark.parametrize("seed", range(6))
def test_rows_match_bytes(seed):
    rng = np.random.default_rng(seed)
    size = 4096
    by_bytes, wb = detector(4)
    by_rows, wr = detector(4)
    cta_b, cta_r = FakeCTA(size), FakeCTA(size)
    races = 0
    for step in range(300):
        k = int(rng.integers(4))
        width = int(rng.choice([1, 2, 4, 8, 16]))
        lanes = int(rng.integers(1, 33))
        offs = rng.integers(0, size // width, lanes).astype(np.int64) * width
        write = bool(rng.integers(2))
        line = step + 1
        span = (offs[:, None] + np.arange(width)).reshape(-1)
        a = outcome(lambda: by_bytes.access(wb[k], cta_b, span, write, line, "a store" if write else ""))
        b = outcome(lambda: by_rows.access_rows(wr[k], cta_r, offs, width, write, line, "a store" if write else ""))
        assert a == b
        races += a is not None
        same_shadow(by_bytes, by_rows, cta_b, cta_r)
        maybe_sync(rng, ((by_bytes, wb), (by_rows, wr)))
    assert races > 0          # the histories do reach races, so the messages were compared
