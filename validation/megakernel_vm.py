"""A Python VM for the megakernel instruction tensor (porter/megakernel/isa.py).

It executes exactly the int32 tensor the GPU would get, with its counters: SMs are
stepped in rounds (each SM runs at most its head instruction per round, if that
instruction's waits are met), so the global order is one a GPU could produce. A
round with no progress while instructions remain is a deadlock and raises.

Numerics match the kernel contract: bf16 weights and KV cache, fp32 activations and
arithmetic, round-to-nearest-even on bf16 stores.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.errors import PorterError
from porter.megakernel.encode import EncodedProgram, host_tables
from porter.megakernel.isa import EPILOGUE_MASK, DType, Epilogue, Flag, Opcode, W, bits_f32

BF16 = ml_dtypes.bfloat16
_NP = {DType.BF16: BF16, DType.FP32: np.float32, DType.INT32: np.int32}
F32 = np.float32


class VMError(PorterError):
    pass


class MegakernelVM:
    """Holds the tensors of one program; ``run()`` executes one decode step."""

    def __init__(self, program: EncodedProgram, cfg, weights: dict[str, np.ndarray],
                 caches: dict[str, np.ndarray] | None = None):
        self.program = program
        self.cfg = cfg
        tables = host_tables(program, cfg)
        self.arrays: list[np.ndarray] = []
        self._f32: dict[int, np.ndarray] = {}
        for t in program.tensors:
            if t.kind == "weight":
                if t.name not in weights:
                    raise VMError(f"megakernel VM: weight {t.name} missing")
                arr = np.asarray(weights[t.name])
                if arr.shape != t.shape:
                    raise VMError(f"megakernel VM: weight {t.name} shape {arr.shape}, expected {t.shape}")
                arr = arr.astype(BF16, copy=False)
            elif t.kind == "table":
                arr = tables[t.name]
            elif t.kind == "cache" and caches is not None and t.name in caches:
                arr = np.array(caches[t.name], dtype=BF16).reshape(t.shape)
            else:
                arr = np.zeros(t.shape, dtype=_NP[t.dtype])
            self.arrays.append(arr)
        self.counters = np.zeros(len(program.counter_targets), dtype=np.int64)
        self.trace: list[tuple[int, int, int]] = []

    # -- tensor access ------------------------------------------------------------

    def by_name(self, name: str) -> np.ndarray:
        return self.arrays[self.program.tensor(name).id]

    def f32(self, tid: int) -> np.ndarray:
        """fp32 view of a bf16 weight (cached: weights never change during a step)."""
        if self.program.tensors[tid].kind == "weight":
            if tid not in self._f32:
                self._f32[tid] = self.arrays[tid].astype(F32)
            return self._f32[tid]
        return self.arrays[tid].astype(F32)

    def flat(self, tid: int) -> np.ndarray:
        return self.arrays[tid].reshape(-1)

    def store(self, tid: int, lo: int, values: np.ndarray) -> None:
        dst = self.flat(tid)
        if lo < 0 or lo + len(values) > dst.size:
            raise VMError(f"megakernel VM: store [{lo}, {lo + len(values)}) outside tensor "
                          f"{self.program.tensors[tid].name} of {dst.size} elements")
        dst[lo:lo + len(values)] = values.astype(dst.dtype)

    # -- run ------------------------------------------------------------------------

    def run(self, order: str = "round_robin", seed: int = 0) -> list[tuple[int, int, int]]:
        """Execute all queues; returns the trace [(sm, slot, instruction id)] in run order."""
        ins = self.program.instructions
        n_sm = ins.shape[0]
        pc = [0] * n_sm
        live = [sm for sm in range(n_sm) if ins[sm, 0, W.OP] != Opcode.STOP]
        rng = np.random.default_rng(seed)
        while live:
            if order == "round_robin":
                sms = list(live)
            elif order == "reverse":
                sms = list(reversed(live))
            elif order == "random":
                sms = list(rng.permutation(live))
            else:
                raise VMError(f"megakernel VM: unknown order {order!r}")
            progressed = False
            for sm in sms:
                w = ins[sm, pc[sm]]
                if not self._ready(w):
                    continue
                self.execute(w)
                self.trace.append((sm, pc[sm], int(w[W.ID])))
                progressed = True
                pc[sm] += 1
                if pc[sm] >= ins.shape[1] or ins[sm, pc[sm], W.OP] == Opcode.STOP:
                    live.remove(sm)
            if not progressed:
                heads = [f"SM{sm}#{pc[sm]}(id {int(ins[sm, pc[sm], W.ID])})" for sm in live[:6]]
                raise VMError(f"megakernel VM: deadlock, {len(live)} SM(s) blocked, e.g. {', '.join(heads)}")
        bad = np.nonzero(self.counters != self.program.counter_targets)[0]
        if len(bad):
            c = int(bad[0])
            raise VMError(f"megakernel VM: counter {self.program.counter_names[c]} ended at "
                          f"{int(self.counters[c])}, target {int(self.program.counter_targets[c])}")
        return self.trace

    def _ready(self, w: np.ndarray) -> bool:
        for i in range(int(w[W.NWAIT])):
            if self.counters[w[W.WAIT0 + 2 * i]] < w[W.WAIT0 + 2 * i + 1]:
                return False
        return True

    # -- opcodes ----------------------------------------------------------------------

    def _rope(self, vec: np.ndarray, pos: int, hd: int, cos_id: int, sin_id: int) -> np.ndarray:
        c = self.arrays[cos_id][pos].astype(F32)
        s = self.arrays[sin_id][pos].astype(F32)
        half = hd // 2
        v = vec.reshape(-1, hd)
        a, b = v[:, :half], v[:, half:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=1).reshape(-1)

    def execute(self, w: np.ndarray) -> None:
        op = Opcode(int(w[W.OP]))
        T = [int(x) for x in w[W.T0:W.T0 + 7]]
        r0, r1 = int(w[W.R0]), int(w[W.R1])
        I = [int(x) for x in w[W.I0:W.I0 + 6]]
        f0 = F32(bits_f32(int(w[W.F0])))
        flags = int(w[W.FLAGS])
        epi = Epilogue(flags & EPILOGUE_MASK)
        getattr(self, f"_op_{op.name.lower()}")(T, r0, r1, I, f0, epi, Flag(flags & ~EPILOGUE_MASK))
        sig = int(w[W.SIGNAL])
        if sig >= 0:
            self.counters[sig] += 1

    def _op_embed(self, T, r0, r1, I, f0, epi, flags):
        self.store(T[2], r0, self.f32(T[0])[I[0], r0:r1])

    def _normed(self, x: np.ndarray, n: int, weight_id: int, eps: F32) -> np.ndarray:
        x = x[:n].astype(F32)
        r = F32(1.0) / np.sqrt(np.mean(x * x, dtype=F32) + eps, dtype=F32)
        return (x * r * self.f32(weight_id).reshape(-1)).astype(F32)

    def _op_rmsnorm(self, T, r0, r1, I, f0, epi, flags):
        xn = self._normed(self.flat(T[0]), I[0], T[3], f0)
        self.store(T[2], r0, xn[r0:r1])

    def _op_matvec(self, T, r0, r1, I, f0, epi, flags):
        w = self.f32(T[0])
        k = w.shape[1]
        x = self.flat(T[1])[:k].astype(F32)
        if flags & Flag.PRE_NORM:
            x = self._normed(x, k, T[3], f0)
        y = (w[r0:r1] @ x).astype(F32)
        if epi == Epilogue.STORE:
            pass
        elif epi == Epilogue.RESIDUAL_ADD:
            y = self.flat(T[2])[I[0]:I[0] + len(y)].astype(F32) + y
        elif epi == Epilogue.ROPE:
            hd = I[2]
            if r0 % hd or r1 % hd:
                raise VMError(f"megakernel VM: ROPE epilogue on rows [{r0},{r1}) not whole heads of {hd}")
            y = self._rope(y, I[4], hd, T[5], T[6])
        elif epi == Epilogue.SILU_MUL:
            u = (self.f32(T[4])[r0:r1] @ x).astype(F32)
            y = (y / (F32(1) + np.exp(-y)) * u).astype(F32)
        self.store(T[2], I[0], y)
        if flags & Flag.ARGMAX:
            j = int(np.argmax(y))
            self.flat(T[5])[I[3]] = y[j]
            self.flat(T[6])[I[3]] = r0 + j

    def _op_rope(self, T, r0, r1, I, f0, epi, flags):
        buf = self.flat(T[0])
        buf[r0:r1] = self._rope(buf[r0:r1].astype(F32), I[4], I[2], T[5], T[6])

    def _op_kv_append(self, T, r0, r1, I, f0, epi, flags):
        pos = I[4]
        self.arrays[T[2]][pos, r0:r1] = self.flat(T[0])[r0:r1].astype(BF16)
        self.arrays[T[3]][pos, r0:r1] = self.flat(T[1])[r0:r1].astype(BF16)

    def _op_attn_partial(self, T, r0, r1, I, f0, epi, flags):
        p, g, hd, gs, pos, S = I
        q = self.flat(T[0])
        kc, vc = self.arrays[T[1]], self.arrays[T[2]]
        o_part = self.arrays[T[3]].reshape(-1, S, hd)
        ml = self.arrays[T[4]].reshape(-1, S, 2)
        k = kc[r0:r1, g * hd:(g + 1) * hd].astype(F32)
        v = vc[r0:r1, g * hd:(g + 1) * hd].astype(F32)
        for h in range(g * gs, (g + 1) * gs):
            qh = q[h * hd:(h + 1) * hd].astype(F32)
            if flags & Flag.ROPE_Q:
                qh = self._rope(qh, pos, hd, T[5], T[6])
            if r1 <= r0:
                o_part[h, p], ml[h, p] = 0.0, (-np.inf, 0.0)
                continue
            z = (k @ qh * f0).astype(F32)
            m = z.max()
            e = np.exp(z - m).astype(F32)
            o_part[h, p] = e @ v
            ml[h, p] = (m, e.sum(dtype=F32))

    def _op_attn_reduce(self, T, r0, r1, I, f0, epi, flags):
        n, _, hd, _, _, S = I
        o_part = self.arrays[T[0]].reshape(-1, S, hd)
        ml = self.arrays[T[1]].reshape(-1, S, 2)
        for h in range(r0, r1):
            m = ml[h, :n, 0]
            M = m.max()
            wts = np.where(np.isneginf(m), F32(0), np.exp(m - M)).astype(F32)
            L = (wts * ml[h, :n, 1]).sum(dtype=F32)
            self.store(T[2], h * hd, (wts @ o_part[h, :n] / L).astype(F32))

    def _op_residual_add(self, T, r0, r1, I, f0, epi, flags):
        dst = self.flat(T[2])
        dst[r0:r1] = dst[r0:r1] + self.flat(T[0])[r0:r1]

    def _op_argmax_partial(self, T, r0, r1, I, f0, epi, flags):
        x = self.flat(T[0])[r0:r1]
        j = int(np.argmax(x))
        self.flat(T[5])[I[3]] = x[j]
        self.flat(T[6])[I[3]] = r0 + j

    def _op_argmax_reduce(self, T, r0, r1, I, f0, epi, flags):
        vals, idx = self.flat(T[5])[r0:r1], self.flat(T[6])[r0:r1]
        best = max(range(len(vals)), key=lambda s: (vals[s], -idx[s]))
        self.flat(T[2])[I[0]] = idx[best]


def caches_from_reference(cfg, ref_cache, upto: int) -> dict[str, np.ndarray]:
    """bf16 VM caches holding the reference fp64 cache's positions [0, upto)."""
    out = {}
    for l in range(cfg.num_layers):
        for nm, src in (("k", ref_cache.k[l]), ("v", ref_cache.v[l])):
            arr = np.zeros((cfg.max_seq_len, cfg.kv_dim), dtype=BF16)
            arr[:upto] = src[:upto].reshape(upto, cfg.kv_dim).astype(BF16)
            out[f"cache.{nm}.{l}"] = arr
    return out


def run_step(program: EncodedProgram, cfg, weights, caches=None, order: str = "round_robin",
             seed: int = 0) -> tuple[np.ndarray, int, MegakernelVM]:
    """Run one step; returns (logits fp32 [vocab], next token, the VM with its caches)."""
    vm = MegakernelVM(program, cfg, weights, caches)
    vm.run(order=order, seed=seed)
    return vm.by_name("buf.logits").copy(), int(vm.by_name("out.token")[0]), vm


# Logits tolerance of the VM against the fp64 reference: max|vm - ref| <= LOGITS_RTOL *
# max|ref|. Why: the VM keeps the KV cache in bf16 (relative rounding 2^-9 ~ 2e-3 per
# element, also the cache filled from the reference) and does fp32 arithmetic, while the
# reference is fp64 throughout with the same bf16 weights. Measured on the tiny configs:
# ~8e-4; 1e-2 leaves a >10x margin yet catches any wrong row, head, position or
# missing residual (those give errors of order 1).
LOGITS_RTOL = 1e-2


def logits_error(vm_logits: np.ndarray, ref_logits: np.ndarray) -> float:
    ref = np.asarray(ref_logits, dtype=np.float64)
    return float(np.abs(np.asarray(vm_logits, dtype=np.float64) - ref).max() / np.abs(ref).max())
