"""The tcgen05.mma completion's shortcuts give what the straightforward path gives:

* the operands are taken from the MMA's shared-memory snapshot (compared with shared memory
  just before) instead of gathered again (ops.tcgen05._snapshot_operands);
* an MMA whose commit group's previous MMA wrote the same D takes D's values from it instead
  of reading TMEM back (run_mma's ``d_in``);
* D * 2^0 is added in place (units.tcgen05.mma);
* the snapshot is a copy of the span of shared memory holding the bytes read, compared whole
  at completion (ops.tcgen05._SpanSnapshot; a change inside the span decides by the bytes read).

Porter's Blackwell kernels (every GEMM kind, the CTA pair, attention's MMA with A in TMEM)
run with and without the first two: every MMA's result and the kernels' checks are the same;
the arithmetic against the formula over random values with infinities, NaNs and signed zeros."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from porter.emu.ops import tcgen05 as ops
from porter.emu.units import tcgen05 as t5

KERNELS = ["gemm.bf16", "gemm.fp8.pair", "gemm.mxfp8", "gemm.nvfp4.pair", "attention.hd64"]


def _straightforward(monkeypatch):
    """Operands gathered from shared memory, D read from TMEM, snapshots gathered, for every MMA."""
    monkeypatch.setattr(ops, "_snapshot_split", lambda *a: None)
    smem_addrs = ops._smem_addrs
    monkeypatch.setattr(ops, "_smem_addrs", lambda *a: smem_addrs(*a)[:3] + (None,))
    complete = ops.AsyncOp.complete
    monkeypatch.setattr(ops.AsyncOp, "complete", lambda self, chain=None: complete(self, None))


def _emulate(name: str):
    from porter.descriptor.arch import load_arch
    from porter.kernels import FAMILIES, family_module
    from porter.runtime.emulated_runs import emulate

    arch = load_arch("blackwell")
    spec = next(s for f in FAMILIES for s in family_module(f).variants(arch) if getattr(s, "name", None) == name)
    r = emulate(spec, arch, seeds=1, smallest=True)
    runs = [{k: v for k, v in x.items() if k not in ("seconds", "cpu_seconds", "warp_instr_per_s")}
            for x in r["runs"]]
    return r["status"], runs, r.get("warnings"), repr(r.get("checks"))


def _recorded(monkeypatch, name: str, fast: bool):
    calls = []
    run_mma = t5.run_mma

    def recording(*a, **k):
        out = run_mma(*a, **k)
        tm = a[1]
        calls.append((hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest(),
                      tuple(hashlib.sha256(t.cells.tobytes()).hexdigest() for t in tm),
                      k.get("d_in") is not None, k.get("a_raw") is not None or k.get("b_raw") is not None))
        return out
    with monkeypatch.context() as m:
        m.setattr(t5, "run_mma", recording)
        if not fast:
            _straightforward(m)
        result = _emulate(name)
    return calls, result


@pytest.mark.parametrize("name", KERNELS)
def test_porter_kernels_mma_by_mma_as_the_straightforward_path(monkeypatch, name):
    fast, fast_result = _recorded(monkeypatch, name, True)
    plain, plain_result = _recorded(monkeypatch, name, False)
    assert fast_result == plain_result
    assert fast_result[0] == "passed"
    assert [c[:2] for c in fast] == [c[:2] for c in plain]
    assert not any(c[2] or c[3] for c in plain)          # (the straightforward path took no shortcut)
    assert any(c[3] for c in fast)                       # the snapshots served the operands
    if name.startswith("gemm"):
        assert sum(c[2] for c in fast) >= len(fast) // 2  # most MMAs took D from the previous one


@pytest.mark.parametrize("kind, a_fmt, d_fmt, scale_in", [(k, a, d, s) for k, a, d in (
    ("f16", 1, 1), ("f16", 0, 1), ("f16", 0, 0), ("tf32", 2, 1)) for s in (0, 3)] + [("i8", 1, 2, 0), ("i8", 0, 2, 0)])
def test_mma_adds_d_as_the_formula(kind, a_fmt, d_fmt, scale_in):
    rng = np.random.default_rng(5)
    idesc = (d_fmt << 4 | a_fmt << 7 | a_fmt << 10 | (64 >> 3) << 17 | (128 >> 4) << 24)
    instr = t5.decode_idesc(kind, idesc)
    a = rng.integers(-40, 40, (128, instr.k)).astype(np.float64) / 8
    b = rng.integers(-40, 40, (64, instr.k)).astype(np.float64) / 8
    if kind == "i8":
        a, b = np.round(a * 8), np.round(b * 8)
        d = rng.integers(-2**31, 2**31, (128, 64)).astype(np.int32)
        want = ((a.astype(np.int64) @ b.astype(np.int64).T + d.astype(np.int64) + 2**31) % 2**32 - 2**31)
        assert np.array_equal(t5.mma(instr, a, b, d), want.astype(np.int32))
        return
    d = (rng.standard_normal((128, 64)) * 4).astype(np.float32)
    d.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 3e38]
    a[0, 0], b[1, 0] = np.inf, -0.0
    with np.errstate(invalid="ignore", over="ignore"):
        want = a @ b.T + d.astype(np.float64) * 2.0 ** -scale_in
        want = (want.astype(np.float16) if d_fmt == 0 else want).astype(np.float32)
        got = t5.mma(instr, a, b, d, scale_input_d=scale_in)
    assert got.dtype == np.float32
    nan = np.isnan(want)                       # bit-exact (the sign of a zero too), any NaN for a NaN
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


def test_a_group_of_mmas_on_two_accumulators_takes_d_from_the_right_one(monkeypatch):
    """One commit group: D0 = AB, D1 = AB, D1 += AB, D0 += AB; D0 must read 2AB (the D it
    wrote, not the D1 the MMA before it wrote), both ways."""
    import test_emu_tcgen05_ops as t

    four = "\n".join([
        "  add.u32 %r22, %r20, 16;",
        "  setp.eq.u32 %p6, %r1, %r1;",
        "  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p4;",
        "  tcgen05.mma.cta_group::1.kind::f16 [%r22], %rd5, %rd6, %r21, %p4;",
        "  tcgen05.mma.cta_group::1.kind::f16 [%r22], %rd5, %rd6, %r21, %p6;",
        "  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p6;"])
    one = "  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p4;"
    assert one in t.MMA
    monkeypatch.setattr(t, "MMA", t.MMA.replace(one, four))
    _both_ways(monkeypatch, t, 3, lambda ref: 2 * ref)


def test_an_mma_with_disabled_lanes_passes_no_d_on(monkeypatch):
    """D = AB; D += AB with lanes 0..31 disabled; D += AB: lanes 0..31 hold 2AB, the others
    3AB (the last MMA must read D as the masked one left it), both ways."""
    import test_emu_tcgen05_ops as t

    three = "\n".join([
        "  setp.eq.u32 %p6, %r1, %r1;",
        "  mov.u32 %r23, -1;",
        "  mov.u32 %r24, 0;",
        "  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p4;",
        "  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, {%r23, %r24, %r24, %r24}, %p6;",
        "  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p6;"])
    one = "  tcgen05.mma.cta_group::1.kind::f16 [%r20], %rd5, %rd6, %r21, %p4;"
    monkeypatch.setattr(t, "MMA", t.MMA.replace(one, three))
    def want(ref):
        w = 3 * ref
        w[:32] = 2 * ref[:32]
        return w
    _both_ways(monkeypatch, t, 4, want)


def test_span_snapshots_report_a_change_exactly_when_a_byte_read_changed():
    from types import SimpleNamespace

    rng = np.random.default_rng(11)
    changed = unchanged = 0
    for _ in range(400):
        data = rng.integers(0, 256, 4096).astype(np.uint8)
        lo = int(rng.integers(0, 2048))
        addrs = np.unique(rng.integers(lo, lo + int(rng.integers(1, 1500)), int(rng.integers(1, 300))))
        addrs = addrs[rng.permutation(addrs.size)]          # (any order, as the operands' rows give them)
        cta = SimpleNamespace(smem=SimpleNamespace(data=data))
        snap = ops._SpanSnapshot(cta, addrs, addrs - int(addrs.min()), int(addrs.min()), int(addrs.max()))
        before = data[addrs].copy()
        k = int(rng.integers(0, 3))
        if k == 1:                                           # a byte of the span, read or not
            at = int(rng.integers(addrs.min(), addrs.max() + 1))
            data[at] ^= int(rng.integers(1, 256))
        elif k == 2:                                         # a byte outside it
            at = int(rng.choice([rng.integers(0, addrs.min() + 1) - 1, rng.integers(addrs.max() + 1, 4097)]))
            if 0 <= at < 4096 and not (addrs.min() <= at <= addrs.max()):
                data[at] ^= 1
        want = not np.array_equal(data[addrs], before)
        assert snap.changed() == want
        assert np.array_equal(snap.bytes(), before)
        changed += want
        unchanged += not want
    assert changed > 20 and unchanged > 100


def _both_ways(monkeypatch, t, seed: int, want) -> None:
    """test_emu_tcgen05_ops' MMA kernel (as patched) with the completion shortcuts and without
    (``_straightforward``): each output close to ``want(ref)`` and the two bit-identical."""
    outs = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                _straightforward(m)
            res, ref = t._mma(seed)
        np.testing.assert_allclose(res.outputs[1], want(ref), rtol=1e-6, atol=1e-5)
        outs.append(res.outputs[1].view(np.uint32).copy())
    assert np.array_equal(outs[0], outs[1])
