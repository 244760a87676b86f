"""Python mirrors of the megakernel CUDA's trickiest index and merge formulas, run
against the VM (validation/megakernel_vm.py) and the fp64 reference.

No GPU here, and the VM models isa.py rather than the CUDA, so each mirror below
restates one piece of kernels_src/megakernel/*.cuh line by line (the CUDA function
is named in each docstring); when the CUDA changes, change its mirror with it.
"""
from __future__ import annotations

import collections
import math
import types

import ml_dtypes
import numpy as np
import pytest

from porter.descriptor.arch import load_arch
from porter.kernels import megakernel
from porter.megakernel.isa import EPILOGUE_MASK, Epilogue, Flag, Opcode, W
from porter.megakernel.plan import build_plan
from porter.validation.megakernel_vm import MegakernelVM
from porter.validation.model_config import load_model_config
from porter.validation.reference_llama import ReferenceLlama

F32 = np.float32
LOG2E, LN2 = F32(1.4426950408889634), F32(0.6931471805599453)


@pytest.fixture(scope="module")
def hopper():
    arch = load_arch("hopper")
    return arch, megakernel.variants(arch)[0].config


# ---- page schedule (matvec.cuh load_matvec_pages / op_matvec, page_ring.cuh) --------------

def rows_per_page(k: int, page_bytes: int, y_rows: int) -> int:
    """matvec.cuh rows_per_page."""
    r = min(page_bytes // (2 * k), y_rows)
    return 0 if r < 1 else 1 << (r.bit_length() - 1)


def _matvec_fields(program, w):
    cols = program.tensors[int(w[W.T0])].shape[-1]
    streams = 2 if (int(w[W.FLAGS]) & EPILOGUE_MASK) == Epilogue.SILU_MUL else 1
    return cols, streams, int(w[W.R0]), int(w[W.R1])


def loader_pages(program, queue, cfg) -> list[tuple]:
    """interpreter.cuh run_loader + matvec.cuh load_matvec_pages: (tensor, byte offset, bytes)."""
    out = []
    for w in queue:
        if w[W.OP] == Opcode.STOP:
            break
        if w[W.OP] != Opcode.MATVEC:
            continue
        k, streams, r0, r1 = _matvec_fields(program, w)
        rpp = rows_per_page(k, cfg["page_bytes"], cfg["y_rows"])
        for g0 in range(r0, r1, rpp):
            rows = min(rpp, r1 - g0)
            for s in range(streams):
                tid = int(w[W.T0 + (4 if s else 0)])
                out.append((tid, g0 * 2 * k, rows * 2 * k))
    return out


def compute_pages(program, queue, cfg) -> list[tuple]:
    """matvec.cuh op_matvec's page walk: (tensor, byte offset, bytes, row group index in
    its window, window, (stream, first y/u row, rows))."""
    out, window = [], 0
    y_rows = cfg["y_rows"]
    for w in queue:
        if w[W.OP] == Opcode.STOP:
            break
        if w[W.OP] != Opcode.MATVEC:
            continue
        k, streams, r0, r1 = _matvec_fields(program, w)
        rpp = rows_per_page(k, cfg["page_bytes"], y_rows)
        for ws in range(r0, r1, y_rows):
            we = min(ws + y_rows, r1)
            for gi, g0 in enumerate(range(ws, we, rpp)):
                rows = min(rpp, we - g0)
                for s in range(streams):
                    tid = int(w[W.T0 + (4 if s else 0)])
                    out.append((tid, g0 * 2 * k, rows * 2 * k, gi, window, (s, g0 - ws, rows)))
            window += 1
    return out


def slot_owner(seq: int, pages: list[tuple], n_slots: int, warps: int) -> int:
    """page_ring.cuh PageRing::owner: the warp that owns the page's ring slot."""
    return (seq % n_slots) % warps


def group_owner(seq: int, pages: list[tuple], n_slots: int, warps: int) -> int:
    """The ownership the kernel had before this review: row group gi -> warp gi % warps."""
    return pages[seq][3] % warps


def simulate_ring(pages: list[tuple], n_slots: int, warps: int, seed: int, owner=slot_owner,
                  slip: int = 0) -> None:
    """page_ring.cuh's full/empty mbarrier protocol under a random interleaving of the
    loader, the copy engine (bulk copies land in any order) and the compute warps,
    which meet at a barrier after every window. try_wait.parity(P) is true while the
    barrier's completed-phase count has the other parity (PTX ISA "mbarrier").
    Fails on a deadlock or on a page read before its copy landed or after reuse.
    ``slip=1`` plants a bug: consumers wait for the other parity (one phase off)."""
    rng = np.random.default_rng(seed)
    # each actor runs at its own speed (skewed: some warps lag far behind others)
    speed = {a: float(rng.lognormal(0.0, 1.5)) for a in ["load", "drain", "land", *range(warps)]}
    full, empty = [0] * n_slots, [0] * n_slots         # completed phases
    slot_data = [None] * n_slots
    in_flight: list[tuple[int, int]] = []               # (slot, seq)

    def parity(seq):
        return (seq // n_slots) & 1

    def try_wait(bar, p):
        return (bar & 1) != p

    next_load, drained = 0, 0
    mine = [[i for i in range(len(pages)) if owner(i, pages, n_slots, warps) == w] for w in range(warps)]
    pos = [0] * warps                                   # next index into mine[w]
    while True:
        windows_open = [pages[mine[w][pos[w]]][4] for w in range(warps) if pos[w] < len(mine[w])]
        barrier = min(windows_open) if windows_open else None
        moves = []
        if next_load < len(pages) and try_wait(empty[next_load % n_slots], parity(next_load) ^ 1):
            moves.append("load")
        if next_load == len(pages) and drained < n_slots:
            s = next_load + drained
            if try_wait(empty[s % n_slots], parity(s) ^ 1):
                moves.append("drain")
        if in_flight:
            moves.append("land")
        for w in range(warps):
            if pos[w] < len(mine[w]):
                seq = mine[w][pos[w]]
                # group_sync after each window: a warp starts window v+1 only when all are past v
                if pages[seq][4] == barrier and try_wait(full[seq % n_slots], parity(seq) ^ slip):
                    moves.append(w)
        if not moves:
            done = all(pos[w] == len(mine[w]) for w in range(warps)) and drained == n_slots
            assert done, f"ring deadlock: loader at {next_load}/{len(pages)}, warps at {pos}"
            return
        weights = np.array([speed[a] for a in moves])
        m = moves[rng.choice(len(moves), p=weights / weights.sum())]
        if m == "load":
            in_flight.append((next_load % n_slots, next_load))
            next_load += 1
        elif m == "drain":
            drained += 1
        elif m == "land":
            slot, seq = in_flight.pop(rng.integers(len(in_flight)))
            slot_data[slot] = seq
            full[slot] += 1
        else:
            seq = mine[m][pos[m]]
            assert slot_data[seq % n_slots] == seq, f"page {seq} read holding {slot_data[seq % n_slots]}"
            empty[seq % n_slots] += 1
            pos[m] += 1


def _queues(program):
    return [program.instructions[sm] for sm in range(program.instructions.shape[0])]


@pytest.fixture(scope="module")
def model_plan(hopper):
    return build_plan(hopper[0], "llama-3.2-1b", pos=511)


@pytest.mark.parametrize("model", ["tiny", "tiny-gqa4", "llama-3.2-1b"])
def test_loader_and_compute_walk_the_same_pages(hopper, model_plan, model):
    arch, cfg = hopper
    program = model_plan["program"] if model == "llama-3.2-1b" else build_plan(arch, model, pos=33)["program"]
    n_pages = 0
    for queue in _queues(program)[::7]:
        loads, uses = loader_pages(program, queue, cfg), compute_pages(program, queue, cfg)
        assert loads == [u[:3] for u in uses]
        n_pages += len(loads)
        for tid, off, nbytes, *_ in uses:
            t = program.tensors[tid]
            assert t.kind == "weight"
            assert nbytes % 16 == 0 and 0 < nbytes <= cfg["page_bytes"]      # cp.async.bulk size rule
            assert (t.offset + off) % 16 == 0 and off + nbytes <= t.nbytes     # 16-byte aligned source
        for *_, (s, y0, rows) in uses:
            assert 0 <= y0 and y0 + rows <= cfg["y_rows"]                      # results fit y / u
    assert n_pages > 0


def _gate_up_queue(program):
    """The first queue holding a SILU_MUL matvec (two pages per row group)."""
    return next(q for q in _queues(program)
                if any(w[W.OP] == Opcode.MATVEC and (int(w[W.FLAGS]) & EPILOGUE_MASK) == Epilogue.SILU_MUL
                       for w in q))


@pytest.mark.parametrize("n_slots", [2, 3, 8, 11, 12])
def test_page_ring_protocol_under_random_interleavings(hopper, model_plan, n_slots):
    arch, cfg = hopper
    tiny = build_plan(arch, "tiny-gqa4", pos=33)["program"]
    big = model_plan["program"]
    queues = [(tiny, q) for q in _queues(tiny)[:3]] + [(big, _queues(big)[0]), (big, _gate_up_queue(big))]
    for seed, (program, queue) in enumerate(queues):
        simulate_ring(compute_pages(program, queue, cfg), n_slots, cfg["compute_warps"], seed)


def test_the_kernels_ring_shape_is_simulated(hopper):
    cfg = hopper[1]
    # 11: the 227 KiB budget less the 1 KiB system reserve and the 1 KiB margin (megakernel.py)
    assert cfg["pages"] == 11 and cfg["compute_warps"] == 8       # in the parametrisation above


def _one_matvec_queue(rows: int, k: int, epilogue: Epilogue):
    """A program of one MATVEC over ``rows`` rows of a [8192, k] weight (and its up twin)."""
    from porter.megakernel.isa import DType, Instruction, TensorSpec

    tensors = [TensorSpec(0, "gate", DType.BF16, (8192, k), "weight"),
               TensorSpec(1, "up", DType.BF16, (8192, k), "weight", offset=8192 * k * 2),
               TensorSpec(2, "x", DType.FP32, (k,), "activation"),
               TensorSpec(3, "y", DType.FP32, (8192,), "activation")]
    ins = Instruction(Opcode.MATVEC, epilogue=epilogue, tensors=[0, 2, 3, -1, 1], r0=0, r1=rows)
    return types.SimpleNamespace(tensors=tensors), np.stack([ins.to_words(), np.zeros(32, np.int32)])


def _fails(pages, n_slots, warps, owner, seeds) -> int:
    n = 0
    for seed in seeds:
        try:
            simulate_ring(pages, n_slots, warps, seed, owner=owner)
        except AssertionError as exc:
            assert "read holding" in str(exc)
            n += 1
    return n


def test_group_ownership_breaks_the_ring(hopper, model_plan):
    # The bug this review fixed. With row groups owned by warps (gi % 8) a warp's
    # next page can be more than the 12-page ring ahead of the slot's previous page,
    # which another warp owns; if that page's bulk copy has not landed yet (copies
    # complete in any order), the full barrier's parity already reads "done", so the
    # warp reads stale rows and frees the slot early. The planned 1B step has such
    # windows: each fused K-projection (RoPE + KV-cache append) is 64 rows = 16 pages.
    cfg, warps = hopper[1], hopper[1]["compute_warps"]
    program = model_plan["program"]
    queue = next(q for q in _queues(program)
                 if max(collections.Counter(p[4] for p in compute_pages(program, q, cfg)).values(), default=0) > 12)
    pages = compute_pages(program, queue, cfg)
    assert _fails(pages, 12, warps, group_owner, range(6)) > 0
    assert _fails(pages, 12, warps, slot_owner, range(6)) == 0
    # SILU_MUL: a warp's pages are 2 * 8 apart; a bigger block than the plan's fails at once
    program, queue = _one_matvec_queue(128, 2048, Epilogue.SILU_MUL)
    pages = compute_pages(program, queue, cfg)
    assert len(pages) == 64
    assert _fails(pages, 12, warps, group_owner, range(6)) > 0
    assert _fails(pages, 12, warps, slot_owner, range(4)) == 0
    assert _fails(pages, 8, warps, slot_owner, range(4)) == 0
    # single-stream windows of > 12 pages: slot ownership holds too
    program, queue = _one_matvec_queue(300, 8192, Epilogue.STORE)
    assert _fails(compute_pages(program, queue, cfg), 12, warps, slot_owner, range(3)) == 0


def test_ring_model_catches_a_parity_slip(hopper):
    # the model is not vacuous: consumers one phase off read pages before they land
    arch, cfg = hopper
    program = build_plan(arch, "tiny-gqa4", pos=33)["program"]
    pages = max((compute_pages(program, q, cfg) for q in _queues(program)), key=len)
    assert len(pages) > 4
    simulate_ring(pages, 2, cfg["compute_warps"], 0)
    with pytest.raises(AssertionError, match="read holding|deadlock"):
        simulate_ring(pages, 2, cfg["compute_warps"], 0, slip=1)


def test_kernel_guards_hold_for_the_compiled_model(hopper, model_plan):
    from test_megakernel_cuda_contract import kernel_guard_violations

    assert kernel_guard_violations(model_plan["program"], hopper[1]) == []


# ---- RoPE (context.cuh rope_rotate; matvec.cuh matvec_epilogue; vector_ops.cuh op_rope) ----

def cuda_rope_window(y: np.ndarray, hd: int, cos_row: np.ndarray, sin_row: np.ndarray) -> np.ndarray:
    """matvec_epilogue's ROPE loop over one window of n rows (whole heads)."""
    half, n = hd // 2, len(y)
    out = np.empty_like(y)
    for p in range(n // 2):
        lo, i = (p // half) * hd + p % half, p % half
        a, b = y[lo], y[lo + half]
        out[lo] = a * cos_row[i] - b * sin_row[i]                # rope_rotate(a, b, i, ...)
        out[lo + half] = b * cos_row[i] + a * sin_row[i]         # rope_rotate(b, a, i + half, ...)
    return out


def cuda_rope_matvec(y: np.ndarray, r0: int, hd: int, y_rows: int, cos_row, sin_row) -> np.ndarray:
    """op_matvec's windows [ws, ws + y_rows) from R0, each through the ROPE epilogue."""
    out = np.empty_like(y)
    for ws in range(0, len(y), y_rows):
        we = min(ws + y_rows, len(y))
        out[ws:we] = cuda_rope_window(y[ws:we], hd, cos_row, sin_row)
    return out


def cuda_rope_q(q: np.ndarray, hd: int, cos_row, sin_row) -> np.ndarray:
    """attention.cuh op_attn_partial's ROPE_Q, one element d at a time."""
    half = hd // 2
    out = np.empty_like(q)
    for d in range(hd):
        partner = q[d + half] if d < half else q[d - half]
        i = d if d < half else d - half
        out[d] = q[d] * cos_row[i] - partner * sin_row[i] if d < half else q[d] * cos_row[i] + partner * sin_row[i]
    return out


@pytest.mark.parametrize("model", ["tiny-gqa4", "llama-3.2-1b"])
def test_rope_pairing_matches_the_reference(model):
    cfg = load_model_config(model)
    hd, pos = cfg.head_dim, 37
    cos, sin = (t.astype(F32) for t in cfg.rope_tables(pos + 1))
    rng = np.random.default_rng(0)
    heads = max(1, 256 // hd) + 1                      # more rows than one 128-row window
    y = rng.standard_normal(heads * hd).astype(F32)
    ref = ReferenceLlama(cfg, {})._rope(y.reshape(heads, hd).astype(np.float64), pos).reshape(-1)
    got = cuda_rope_matvec(y, 0, hd, 128, cos[pos], sin[pos])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    vm = types.SimpleNamespace(arrays=[cos, sin])
    np.testing.assert_allclose(got, MegakernelVM._rope(vm, y, pos, hd, 0, 1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cuda_rope_q(y[:hd], hd, cos[pos], sin[pos]), got[:hd], rtol=1e-6, atol=1e-6)
    # an interleaved-pair RoPE (GPT-J style) would differ: the check can fail
    inter = y[:hd].copy()
    inter[0::2], inter[1::2] = (y[0:hd:2] * cos[pos] - y[1:hd:2] * sin[pos],
                                y[1:hd:2] * cos[pos] + y[0:hd:2] * sin[pos])
    assert np.abs(inter - ref[:hd]).max() > 1e-3


# ---- attention (attention.cuh op_attn_partial / op_attn_reduce) ---------------------------

def exp2(x):
    return np.exp2(np.asarray(x, dtype=F32)).astype(F32)


def cuda_attn_partial(q, k, v, f0: float, warps: int):
    """op_attn_partial for one head: base-2 online softmax per warp over positions
    w, w + warps, ..., warps merged with weights 2^(m_w - M); returns (o, m, l), m in
    natural-log units."""
    qs = (q * F32(F32(f0) * LOG2E)).astype(F32)
    states = []
    for w in range(warps):
        m, l, o = F32(-np.inf), F32(0), np.zeros_like(q)
        for t in range(w, len(k), warps):
            z = F32(np.dot(qs, k[t]))
            mn = max(m, z)
            rescale, p = exp2(m - mn), exp2(z - mn)
            l = F32(l * rescale + p)
            o = (p * v[t] + o * rescale).astype(F32)
            m = mn
        states.append((m, l, o))
    mx = max(s[0] for s in states)
    if mx == -np.inf:
        return np.zeros_like(q), F32(-np.inf), F32(0)
    e = [exp2(s[0] - mx) for s in states]
    acc = sum((ei * s[2] for ei, s in zip(e, states)), np.zeros_like(q))
    return acc.astype(F32), F32(mx * LN2), F32(sum(ei * s[1] for ei, s in zip(e, states)))


def cuda_attn_reduce(o_parts, ms, ls):
    """op_attn_reduce for one head over its splits."""
    mx = max(ms)
    e = [F32(0) if m == -np.inf else exp2((m - mx) * LOG2E) for m in ms]
    acc = sum((ei * o for ei, o in zip(e, o_parts)), np.zeros_like(o_parts[0]))
    return (acc / F32(sum(ei * l for ei, l in zip(e, ls)))).astype(F32)


def _vm_attention(q, kc, vc, splits, g, gs, hd, f0):
    """The VM's ATTN_PARTIAL per split then ATTN_REDUCE, on one KV group."""
    nh, S = q.size // hd, len(splits)
    arrays = [q.reshape(-1), kc, vc, np.zeros((nh, S, hd), F32), np.zeros((nh, S, 2), F32),
              None, None, np.zeros(nh * hd, F32)]
    vm = types.SimpleNamespace(arrays=arrays, flat=lambda tid: arrays[tid].reshape(-1))
    for si, (t0, t1) in enumerate(splits):
        MegakernelVM._op_attn_partial(vm, [0, 1, 2, 3, 4, 5, 6], t0, t1, [si, g, hd, gs, 0, S], F32(f0),
                                      Epilogue.STORE, Flag.NONE)
    vm.store = lambda tid, lo, vals: arrays[tid].__setitem__(slice(lo, lo + len(vals)), vals)
    MegakernelVM._op_attn_reduce(vm, [3, 4, 7], g * gs, (g + 1) * gs, [S, g, hd, gs, 0, S], F32(f0),
                                 Epilogue.STORE, Flag.NONE)
    return arrays[3], arrays[4], arrays[7]


@pytest.mark.parametrize("n_pos, splits, warps", [(45, [(0, 16), (16, 30), (30, 45)], 8),
                                                   (5, [(0, 3), (3, 3), (3, 5)], 8),     # empty split, idle warps
                                                   (70, [(0, 70)], 4)])
def test_attention_merge_formulas_match_the_vm(n_pos, splits, warps):
    hd, gs, nkv, g = 16, 4, 2, 1
    rng = np.random.default_rng(n_pos)
    q = (3 * rng.standard_normal(nkv * gs * hd)).astype(F32)
    kc = rng.standard_normal((n_pos, nkv * hd)).astype(ml_dtypes.bfloat16)
    vc = rng.standard_normal((n_pos, nkv * hd)).astype(ml_dtypes.bfloat16)
    f0 = 1.0 / math.sqrt(hd)
    o_vm, ml_vm, out_vm = _vm_attention(q, kc, vc, splits, g, gs, hd, f0)
    k32, v32 = kc.astype(F32), vc.astype(F32)
    for h in range(g * gs, (g + 1) * gs):
        qh = q[h * hd:(h + 1) * hd]
        parts = []
        for si, (t0, t1) in enumerate(splits):
            o, m, l = cuda_attn_partial(qh, k32[t0:t1, g * hd:(g + 1) * hd], v32[t0:t1, g * hd:(g + 1) * hd], f0, warps)
            np.testing.assert_allclose(o, o_vm[h, si], rtol=2e-5, atol=1e-5)
            np.testing.assert_allclose([m, l], ml_vm[h, si], rtol=2e-5, atol=1e-6)
            parts.append((o, m, l))
        got = cuda_attn_reduce([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts])
        np.testing.assert_allclose(got, out_vm[h * hd:(h + 1) * hd], rtol=2e-5, atol=1e-5)
        # and both against softmax attention in fp64
        s = k32[:, g * hd:(g + 1) * hd].astype(np.float64) @ qh.astype(np.float64) * f0
        p = np.exp(s - s.max())
        want = (p / p.sum()) @ v32[:, g * hd:(g + 1) * hd].astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# ---- argmax (context.cuh better / warp_argmax / group_argmax, vector_ops.cuh) --------------

def better(v, i, bv, bi) -> bool:
    return v > bv or (v == bv and i < bi)


def cuda_group_argmax(x: np.ndarray, r0: int, r1: int, warps: int) -> tuple[float, int]:
    """op_argmax_partial: thread-strided scan, xor-butterfly per warp, then warp 0..n-1."""
    threads = 32 * warps
    vals = [-np.inf] * threads
    idx = [0x7FFFFFFF] * threads
    for ct in range(threads):
        for i in range(r0 + ct, r1, threads):
            if better(x[i], i, vals[ct], idx[ct]):
                vals[ct], idx[ct] = x[i], i
    for wb in range(0, threads, 32):
        for o in (16, 8, 4, 2, 1):
            snap = list(zip(vals[wb:wb + 32], idx[wb:wb + 32]))
            for lane in range(32):
                ov, oi = snap[lane ^ o]
                if better(ov, oi, vals[wb + lane], idx[wb + lane]):
                    vals[wb + lane], idx[wb + lane] = ov, oi
        assert len(set(zip(vals[wb:wb + 32], idx[wb:wb + 32]))) == 1     # every lane agrees
    v, i = vals[0], idx[0]
    for w in range(1, warps):
        if better(vals[32 * w], idx[32 * w], v, i):
            v, i = vals[32 * w], idx[32 * w]
    return v, i


@pytest.mark.parametrize("seed", range(4))
def test_argmax_ties_go_to_the_lowest_index(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 6, 3000).astype(F32)         # many ties of the maximum
    x[rng.integers(0, 3000, 3)] = -np.inf
    r0, r1 = int(rng.integers(0, 100)), int(rng.integers(2000, 3000))
    v, i = cuda_group_argmax(x, r0, r1, 8)
    assert i == r0 + int(np.argmax(x[r0:r1])) and v == x[r0:r1].max()
    # ARGMAX_REDUCE over slots: the VM's key (value, then smaller index)
    vals = rng.integers(0, 3, 40).astype(F32)
    idx = rng.permutation(40 * 7)[:40]
    bv, bi = -np.inf, 0x7FFFFFFF
    for s in range(40):
        if better(vals[s], idx[s], bv, bi):
            bv, bi = vals[s], idx[s]
    best = max(range(40), key=lambda s: (vals[s], -idx[s]))
    assert bi == idx[best]
