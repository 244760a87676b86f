"""The race detector's span and row checks (TMA / bulk-copy landings and sources as slices,
cp.async landings and wgmma operand chunks as rows) decide and record exactly what its
per-byte check does: the same race with the same message and the same shadow state
afterwards, over random histories of several agents; and the one-agent shortcut of a
slice's test agrees with the element-wise test."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.ops.wgmma import chunk_rows
from porter.emu.race import AGENT_SHIFT, _any_beyond
from porter.emu.units import wgmma as wgmma_unit

from race_fakes import FakeCTA, detector, maybe_sync, outcome, same_shadow


@pytest.mark.parametrize("seed", range(6))
def test_spans_and_rows_match_bytes(seed):
    rng = np.random.default_rng(seed)
    size = 4096
    by_bytes, wb = detector(4)
    by_fast, wf = detector(4)
    cta_b, cta_f = FakeCTA(size), FakeCTA(size)
    races = 0
    for step in range(300):
        k = int(rng.integers(4))
        write = bool(rng.integers(2))
        line = step + 1
        kind = int(rng.integers(3))
        if kind == 0:                                  # a span: a landing, a bulk source
            lo = int(rng.integers(0, size - 1))
            hi = int(rng.integers(lo, min(size, lo + 1024) + 1))
            offs = np.arange(lo, hi)
            fast = lambda: by_fast.check_span(cta_f, lo, hi, k, wf[k].vc, write, line, wf[k].name, "a span")  # noqa: E731
        elif kind == 1:                                # aligned rows, in any order, repeats allowed
            width = int(rng.choice([4, 8, 16]))
            starts = rng.integers(0, size // width, int(rng.integers(1, 64))).astype(np.int64) * width
            offs = (starts[:, None] + np.arange(width)).reshape(-1)
            fast = lambda: by_fast.check_rows(cta_f, starts, width, k, wf[k].vc, write, line, wf[k].name,  # noqa: E731
                                              "rows")
        else:                                          # a span through the warp-facing entry
            lo = int(rng.integers(0, size - 64))
            hi = lo + int(rng.integers(1, 64))
            offs = np.arange(lo, hi)
            fast = lambda: by_fast.access_span(wf[k], cta_f, lo, hi, write, line, "a source")  # noqa: E731
        what = {0: "a span", 1: "rows", 2: "a source"}[kind]
        a = outcome(lambda: by_bytes.check(cta_b, offs, k, wb[k].vc, write, line, wb[k].name, what))
        b = outcome(fast)
        assert a == b
        races += a is not None
        same_shadow(by_bytes, by_fast, cta_b, cta_f)
        maybe_sync(rng, ((by_bytes, wb), (by_fast, wf)))
    assert races > 0          # the histories reach races, so the messages were compared


@pytest.mark.parametrize("seed", range(4))
def test_one_agent_shortcut_matches_elementwise(seed):
    rng = np.random.default_rng(seed)
    det, ws = detector(6)
    for _ in range(400):
        aid = int(rng.integers(6))
        vc = rng.integers(1, 50, 6).astype(np.int64)
        limit = det._limit_of(aid, vc)
        n = int(rng.integers(1, 40))
        agents = rng.integers(0, 7, n) if rng.integers(2) else np.full(n, int(rng.integers(0, 7)))
        clocks = rng.integers(0, 60, n)
        e = np.where(agents == 0, 0, (agents << AGENT_SHIFT) | clocks).astype(np.int64)
        if rng.integers(2):
            e = e.reshape(1, -1)[:, ::-1]               # strided, 2-D (a TMEM region)
        want = bool(np.count_nonzero(e > limit[e >> AGENT_SHIFT]))
        assert _any_beyond(e, limit) == want
        known = det._known_of(aid, vc)
        assert np.array_equal(e > limit[e >> AGENT_SHIFT], (e & ((1 << AGENT_SHIFT) - 1)) > known[e >> AGENT_SHIFT])


@pytest.mark.parametrize("swizzle,mn_major", [(0, False), (1, False), (2, False), (3, False), (1, True), (0, True)])
def test_wgmma_operand_chunks_are_its_bytes(swizzle, mn_major):
    """Every canonical wgmma operand layout reads whole 16-byte chunks, so its chunk rows name
    the same set of bytes (what the row checks rely on); bytes that are not whole chunks have none."""
    start, lbo, sbo = 0x1400, 256, 1024
    desc = ((start >> 4) & 0x3FFF) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (swizzle << 62)
    addr, _ = wgmma_unit.operand_layout(desc, 64, 16, 16, mn_major, "", 1 << 16)
    for distinct in (False, True):
        rows = chunk_rows(addr, distinct)
        assert rows is not None
        assert np.array_equal((rows[:, None] * 16 + np.arange(16)).reshape(-1), np.unique(addr))
        assert chunk_rows(np.arange(1, 17), distinct) is None      # not on a chunk: the byte path
        assert chunk_rows(np.arange(0, 8), distinct) is None


@pytest.mark.parametrize("seed", range(3))
def test_chunk_count_matches_unique(seed):
    """chunk_rows by a count per chunk (distinct bytes) gives what the np.unique form gives, on
    random sets of whole and partial chunks in random order; and operand_layout's alias test
    (a count per byte) flags exactly the layouts whose addresses repeat."""
    rng = np.random.default_rng(seed)
    for _ in range(50):
        chunks = rng.choice(512, int(rng.integers(1, 40)), replace=False)
        flat = (chunks[:, None] * 16 + np.arange(16)).reshape(-1)
        if rng.integers(2):
            flat = np.delete(flat, int(rng.integers(flat.size)))          # one byte short
        flat = rng.permutation(flat)
        a, b = chunk_rows(flat, True), chunk_rows(flat, False)
        assert (a is None) == (b is None) and (a is None or np.array_equal(a, b))
    for _ in range(30):
        lbo, sbo = (int(x) * 16 for x in rng.integers(0, 20, 2))
        desc = ((0x400 >> 4) & 0x3FFF) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32)
        addr, notes = wgmma_unit.operand_layout(desc, 64, 16, 16, False, "", 1 << 16)
        repeats = np.unique(addr).size != addr.size
        assert repeats == any(kind == "alias" for kind, _ in notes)


def _operand(rng, size):
    """A random canonical wgmma operand layout inside ``size`` bytes (K- or MN-major)."""
    mn_major = bool(rng.integers(2))
    swizzle = int(rng.integers(4))
    width = {0: 0, 1: 128, 2: 64, 3: 32}[swizzle]
    start = int(rng.integers(0, 4)) * 1024 + int(rng.integers(0, 2)) * 32
    lbo, sbo = (256, 1024) if not width else (width * 8, width * 8)
    desc = ((start >> 4) & 0x3FFF) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (swizzle << 62)
    addr, _ = wgmma_unit.operand_layout(desc, 64, 16, 16, mn_major, "", size)
    return addr


@pytest.mark.parametrize("seed", range(4))
def test_operand_chunks_match_bytes(seed):
    """A wgmma operand read checked as its chunk rows (reported from its own bytes) against the
    per-byte check of those bytes, interleaved with other agents' writes; and the async-proxy
    check of the same chunks against the per-byte one."""
    from porter.emu.ops.memory import check_async_read, check_async_read_rows

    rng = np.random.default_rng(seed)
    size = 16384
    by_bytes, wb = detector(4)
    by_rows, wr = detector(4)
    cta_b, cta_r = FakeCTA(size), FakeCTA(size)
    for cta in (cta_b, cta_r):
        cta.generic_written = np.zeros(size, dtype=bool)
    races = hits = 0
    for step in range(200):
        k = int(rng.integers(4))
        line = step + 1
        if rng.integers(2):
            addr = _operand(rng, size)
            rows = chunk_rows(addr)
            assert rows is not None
            a = outcome(lambda: by_bytes.check(cta_b, addr.reshape(-1), k, wb[k].vc, False, line, wb[k].name, "op"))
            b = outcome(lambda: by_rows.check_rows(cta_r, rows * 16, 16, k, wr[k].vc, False, line, wr[k].name,
                                                    "op", report=addr))
            assert a == b
            races += a is not None
            a = outcome(lambda: check_async_read(cta_b, addr, "the read"))
            b = outcome(lambda: check_async_read_rows(cta_r, addr, rows, "the read"))
            assert a == b
            hits += a is not None
        else:
            starts = rng.integers(0, size // 16, int(rng.integers(1, 33))).astype(np.int64) * 16
            span = (starts[:, None] + np.arange(16)).reshape(-1)
            a = outcome(lambda: by_bytes.check(cta_b, span, k, wb[k].vc, True, line, wb[k].name, "st"))
            b = outcome(lambda: by_rows.check_rows(cta_r, starts, 16, k, wr[k].vc, True, line, wr[k].name, "st"))
            assert a == b
            if rng.integers(3) == 0:
                for cta in (cta_b, cta_r):
                    cta.generic_written[span] = True
            elif rng.integers(3) == 0:
                for cta in (cta_b, cta_r):
                    cta.generic_written[:] = False          # a fence.proxy.async
        same_shadow(by_bytes, by_rows, cta_b, cta_r)
        maybe_sync(rng, ((by_bytes, wb), (by_rows, wr)))
    assert races > 0 and hits > 0
