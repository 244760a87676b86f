"""The TMEM checkers on tmem_hb.Cells judge from the rectangles' records while those tell
(no arrays), else from the arrays: over random histories of accesses, the fence hand-off
checker (ops.tcgen05._check_handoff) and the happens-before checker (tmem_hb._check) give the
same findings, message for message, and leave the same cells, as with arrays from the start
(``Cells.LAZY_KEEP = 0``: every region scanned, the straightforward way)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from porter.emu import tmem_hb
from porter.emu.errors import CheckFailed
from porter.emu.ops import tcgen05 as ops
from porter.emu.race import RaceDetector


def _region(rng, lanes: int, cols: int):
    """A lane quarter (or all lanes) by a run of columns, now and then a ragged one."""
    if rng.random() < 0.2:
        l0 = int(rng.integers(0, lanes))
        l1 = int(rng.integers(l0 + 1, lanes + 1))
    elif rng.random() < 0.3:
        l0, l1 = 0, lanes
    else:
        q = int(rng.integers(0, lanes // 32))
        l0, l1 = 32 * q, 32 * q + 32
    c0 = int(rng.integers(0, cols - 1))
    c1 = min(cols, c0 + int(rng.choice([1, 8, 16, 32, 64])))
    return l0, l1, c0, c1


def _handoff_history(seed: int, steps: int):
    """Messages (or None) of _check_handoff over random accesses by 6 warps of 2 CTAs."""
    rng = np.random.default_rng(seed)
    cluster = SimpleNamespace()
    launch = SimpleNamespace(relaxed_error=lambda rule, message, site: False)     # no rule relaxed
    ctas = [SimpleNamespace(name=f"CTA {r}", rank=r, cluster=cluster, launch=launch) for r in range(2)]
    cluster.ctas = ctas
    st = ops.CtaTc(ctas[0])
    warps = [SimpleNamespace(name=f"{ctas[i // 3].name} warp {i % 3}", index=i % 3, cta=ctas[i // 3], units={})
             for i in range(6)]
    out = []
    for step in range(steps):
        w = warps[int(rng.integers(0, 6))]
        r = _region(rng, 128, 96)
        writes = bool(rng.random() < 0.5)
        if rng.random() < 0.1:                      # an mbarrier wait not yet fenced
            w.units["mbarrier_waited"] = (np.ones(32, bool), f"line {step}")
        elif rng.random() < 0.3:
            w.units.pop("mbarrier_waited", None)
        if rng.random() < 0.3:                      # a fence::before_thread_sync
            ep = ops._epochs(cluster)
            ep[ops._agent(w)] = ep.get(ops._agent(w), 0) + 1
        try:
            ops._check_handoff(w, np.ones(32, bool), st, r, writes, "tcgen05.x", f"k.ptx:{step}")
            out.append(None)
        except CheckFailed as exc:
            out.append(str(exc))
        if rng.random() < 0.3:                      # an asynchronous MMA / cp (no warp: its commit fences)
            ops._note_access(st, r, ops._agent(w), writes)
        else:
            ops._note_access(st, r, ops._agent(w), writes, w, f"k.ptx:{step}")
    return out, [a.copy() for c in (st.writer, st.reader) for a in c.arrays()]


def _five_agents():
    """A race detector with five warps of one CTA as its agents, started; the CTA (a stand-in)."""
    race = RaceDetector(None)
    prog = SimpleNamespace(file="k.ptx")
    agents = [SimpleNamespace(name=f"CTA 0 warp {i}", prog=prog) for i in range(5)]
    for a in agents:
        race.add_warp(a)
    race.start()
    return race, agents, SimpleNamespace(name="CTA 0", units={})


def _hb_history(seed: int, steps: int, sync: float = 0.0):
    """Messages (or None) of tmem_hb._check over random accesses of 5 agents whose clocks
    now and then acquire each other (``sync``: how often all at a barrier)."""
    rng = np.random.default_rng(seed)
    race, agents, cta = _five_agents()
    out = []
    for step in range(steps):
        a = agents[int(rng.integers(0, 5))]
        if rng.random() < sync:                     # a barrier: every agent acquires every other
            every = np.maximum.reduce([b.vc for b in agents])
            for b in agents:
                b.vc = every.copy()
        elif rng.random() < 0.3:                    # a release / acquire pair
            b = agents[int(rng.integers(0, 5))]
            a.vc = np.maximum(a.vc, b.vc)
        if rng.random() < 0.4:
            a.vc = a.vc.copy()
            a.vc[a.aid] += 1
        r = _region(rng, 128, 96)
        write = bool(rng.random() < 0.5)
        kind = str(rng.choice(["tcgen05.ld", "tcgen05.st", "tcgen05.mma"]))
        try:
            tmem_hb._check(race, cta, r, a.aid, a.vc, write, 100 + step, kind, a.name)
            out.append(None)
        except CheckFailed as exc:
            out.append(str(exc))
            # (a real run stops here; go on with the access recorded, to keep the history long)
            s = tmem_hb._shadow(cta)
            rec = (((a.aid + 1) << tmem_hb.AGENT_SHIFT) | int(a.vc[a.aid]), 100 + step, tmem_hb._KINDS.index(kind))
            (s.w if write else s.r).fill(*r, rec)
            if write:
                s.r.fill(*r, tmem_hb._CLEAR)
    s = tmem_hb._shadow(cta)
    w_ep, _, _ = s.w.arrays()
    r_ep, _, _ = s.r.arrays()
    return out, [w_ep.copy(), r_ep.copy()]


def _both(monkeypatch, history, seed, steps, lazy_keep, **kw):
    with monkeypatch.context() as m:
        if lazy_keep is not None:           # (the rectangles alone, however many: no arrays until the end)
            m.setattr(tmem_hb.Cells, "LAZY_KEEP", lazy_keep)
        fast = history(seed, steps, **kw)
    with monkeypatch.context() as m:
        m.setattr(tmem_hb.Cells, "LAZY_KEEP", 0)
        plain = history(seed, steps, **kw)
    return fast, plain


@pytest.mark.parametrize("history", [_handoff_history, _hb_history], ids=["handoff", "happens-before"])
@pytest.mark.parametrize("lazy_keep", [None, 10**6])
@pytest.mark.parametrize("seed", range(6))
def test_findings_match_the_array_scan(monkeypatch, history, seed, lazy_keep):
    """The hand-off checker's and the happens-before checker's findings over a random history,
    and the cells they leave, are the same with the rectangles as with arrays from the start."""
    (fast, fast_cells), (plain, plain_cells) = _both(monkeypatch, history, seed, 300, lazy_keep)
    assert fast == plain
    assert sum(m is not None for m in fast) > 10 and sum(m is None for m in fast) > 10
    for a, b in zip(fast_cells, plain_cells):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_the_first_happens_before_finding_matches_the_array_scan(monkeypatch, seed):
    """Short histories, mostly synchronised: the rectangles judge every access up to the
    first race (whose message needs the arrays)."""
    firsts = 0
    for sub in range(12):
        (fast, _), (plain, _) = _both(monkeypatch, _hb_history, 1000 * seed + sub, 60, 10**6, sync=0.6)
        assert fast == plain
        firsts += any(fast)
    assert 2 <= firsts


def test_the_usual_kernel_makes_no_arrays():
    """An MMA's accumulator written four times, then read by four lane quarters in two
    halves, in both checkers: all judged from the rectangles."""
    race, agents, cta = _five_agents()
    for _ in range(4):
        tmem_hb._check(race, cta, (0, 128, 0, 64), 4, agents[4].vc, True, 10, "tcgen05.mma", "mma")
    for a in agents[:4]:
        a.vc = np.maximum(a.vc, agents[4].vc)
        for half in range(2):
            tmem_hb._check(race, cta, (32 * a.aid, 32 * a.aid + 32, 32 * half, 32 * half + 32), a.aid, a.vc,
                           False, 20, "tcgen05.ld", a.name)
    s = tmem_hb._shadow(cta)
    assert s.w.arrs is None and s.r.arrs is None


def test_a_race_of_an_issued_mma_names_its_pipeline():
    """The accessor's name of an MMA's pipeline is built only for the message: the same text."""
    race = RaceDetector(None)
    prog = SimpleNamespace(file="k.ptx")
    cta = SimpleNamespace(name="CTA 0", units={})
    warps = [SimpleNamespace(name=f"CTA 0 warp {i}", prog=prog, units={}, sched=SimpleNamespace(race=race))
             for i in range(2)]
    for w in warps:
        race.add_warp(w)
    race.start()
    tmem_hb.access(warps[1], cta, (0, 32, 0, 16), True, 5, "tcgen05.st")
    with pytest.raises(CheckFailed) as e:
        tmem_hb.issue(warps[0], cta, (0, 128, 0, 64), True, 7, "tcgen05.mma")
    assert str(e.value).startswith(
        "TMEM hand-off race in CTA 0 at lane 0, column 0: write by the tcgen05.mma issued by CTA 0 warp 0 at k.ptx:7 "
        "and an earlier write by CTA 0 warp 1's tcgen05.st at k.ptx:5, with no mbarrier phase")
