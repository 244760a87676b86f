"""The megakernel instruction set: the contract between porter's scheduler and the CUDA
interpreter (``templates/megakernel.cu.j2``) and the Python VM (``validation/megakernel_vm.py``).

Everything a kernel author needs is in this docstring; the rest of porter only
produces data in this format.

Launch model
============
One persistent kernel, one CTA per SM (``gridDim.x == sm_count``). CTA ``b`` walks row
``b`` of the instruction tensor::

    int32 instructions[sm_count][max_queue_len][WORDS]     # WORDS = 32

from slot 0 upwards and stops at the first instruction whose opcode is ``STOP``
(opcode 0, so zero padding is a STOP). Besides the instruction tensor the kernel gets

* ``int32 counters[n_counters]``, all ZERO at launch (the host memsets them before each
  decode step; they only ever grow within one step);
* ``const TensorDesc tensors[n_tensors]``: one 32-byte record per tensor id of the
  tensor table (``TensorSpec``: name, dtype, shape, row-major, contiguous), because
  the instruction words name tensors by id only and the kernel also needs each
  tensor's dtype (a MATVEC STORE converts to T2's dtype) and column count (a MATVEC's
  K is T0's column count, cache rows are ``cols`` apart)::

      struct TensorDesc {          // little-endian, 16-byte aligned, 32 bytes
          uint64 ptr;              // byte 0:  device address of element 0
          int32  dtype;            // byte 8:  DType
          int32  rows;             // byte 12: product of all dimensions but the last
          int32  cols;             // byte 16: last dimension
          int32  pad[3];           // byte 20: zero
      };

  ``TENSOR_DESC`` below is this record as a numpy dtype (``tensor_desc_records``
  fills it); the CUDA struct static_asserts the same offsets. ``encode`` also gives
  one byte offset per tensor in a single arena (``TensorSpec.offset``, 256-byte
  aligned) for hosts that prefer one allocation; every ``ptr`` must be 16-byte
  aligned (weight rows are moved by 16-byte bulk copies, vectors by 16-byte loads).

Every CTA waits on counters that other CTAs signal, so all ``sm_count`` CTAs must be
resident at once: launch with ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE`` (the driver then
refuses a grid that cannot be co-resident instead of letting it hang) on a device
with at least ``sm_count`` SMs. Correctness needs only that co-residency; the
schedule's balance assumes one CTA per SM, which the kernel's shared memory
(more than half an SM's) ensures.

Executing one instruction
=========================
1. Wait: for ``i`` in ``0 .. NWAIT-1`` (NWAIT <= MAX_WAITS, else the program is
   malformed and the kernel traps): spin until
   ``ld.acquire.gpu(counters[WAIT_COUNTER(i)]) >= WAIT_TARGET(i)``; then a CTA
   barrier, so every thread's later loads are ordered after the acquire. (The
   acquire also invalidates the SM's L1, so plain loads after the barrier do not
   hit lines cached before another SM rewrote them.)
2. Do the opcode's work (below). All threads of the CTA may take part.
3. Signal: if ``SIGNAL >= 0``: a CTA barrier over all writing threads, then one
   thread does ``red.release.gpu.add(&counters[SIGNAL], 1)``: the release orders every
   global write of the instruction that the barrier put before it (no separate fence;
   kernels_src/megakernel/counters.cuh says why). Exactly one increment per
   instruction, never more.

Weight prefetch: tensors of kind ``weight`` and ``table`` never change during a
step, so their reads may be issued before step 1's waits are met (e.g. a loader warp
streaming the weight rows of the next instructions into a shared-memory page ring).
Everything else (activations, KV cache, partials) must be read after the waits.
MATVEC's T0 (and T4 under SILU_MUL) must therefore be ``weight`` tensors: the CUDA
loader streams them ahead of the waits.

Every counter's target (``counter_targets[c]``) equals the number of instructions
whose SIGNAL is ``c``, and every wait on ``c`` uses that full target: a wait means
"all producers of this counter are done". porter's checker proves, for each schedule,
that no circular wait exists across the queues (queue order + waits are acyclic),
and that two instructions that touch the same bytes (one writing) are ordered by
waits, so the kernel needs no other synchronisation.

Word layout (int32, fixed width 32)
===================================
====  ============  ===========================================================
word  name          meaning
====  ============  ===========================================================
0     OP            ``Opcode``
1     LAYER         transformer layer, -1 for none (informational)
2     SIGNAL        counter to increment by 1 when done, -1 for none
3     NWAIT         number of used wait pairs (0..4)
4,5   WAIT0         (counter id, target)
6,7   WAIT1         (counter id, target)
8,9   WAIT2         (counter id, target)
10,11 WAIT3         (counter id, target)
12    FLAGS         bits 0-3: epilogue kind (``Epilogue``), other bits ``Flag``
13-19 T0..T6        tensor ids (-1 = unused); meaning per opcode below
20    R0            range begin (rows / positions / elements / slots, per opcode)
21    R1            range end (exclusive)
22-27 I0..I5        integer operands, per opcode
28    F0            float32 operand, stored as its bit pattern (``__int_as_float``)
29    F1            float32 operand, bit pattern
30    ID            global instruction id (for tracing; not needed to execute)
31    COST_KIB      bytes this instruction moves / 1024, rounded up (informational)
====  ============  ===========================================================

Dtypes: weights and the KV cache are bf16; every activation buffer is fp32; argmax
indices and the output token are int32. Arithmetic is fp32 throughout. Storing an
fp32 value to a bf16 tensor rounds to nearest even. Shapes: see the tensor table;
``x[i]`` below means the flat row-major element ``i``.

Opcodes
=======
Names used below: ``hd`` = head dim (I2 where present), ``pos`` = I4.

STOP (0)
    End of this SM's queue. No waits, no signal.

EMBED (1)
    ``T2[c] = float(T0[I0, c])`` for ``c`` in ``[R0, R1)``. T0 = embedding table bf16
    [vocab, hidden], I0 = token id, T2 = fp32 [hidden] (the residual stream).

RMSNORM (2)
    ``r = 1 / sqrt(mean(T0[0:I0]^2) + F0)`` over the WHOLE vector of length I0, then
    ``T2[i] = T0[i] * r * float(T3[i])`` for ``i`` in ``[R0, R1)``. T0 fp32, T3 bf16
    weight [I0], T2 fp32. F0 = eps.

MATVEC (3)
    For each weight row ``r`` in ``[R0, R1)``, ``j = r - R0``:

    * input ``x = T1`` (fp32 [K], K = T0's column count). If ``FLAGS & PRE_NORM``:
      ``x = T1 * rsqrt(mean(T1^2) + F0) * float(T3)`` (RMSNorm of the whole vector
      with weight T3 bf16 [K], recomputed by each instruction; no other instruction
      normalises).
    * ``y[j] = dot(float(T0[r, :]), x)`` (T0 bf16 [rows, K]).
    * epilogue (``FLAGS & 0xF``):

      - ``STORE``: ``T2[I0 + j] = y[j]`` (converted to T2's dtype).
      - ``RESIDUAL_ADD``: ``T2[I0 + j] += y[j]`` (T2 fp32; only this instruction
        touches these elements while it runs).
      - ``ROPE``: R0 and R1 are multiples of ``hd`` (whole heads). Per head, with
        ``half = hd / 2``, ``c = T5[pos, i]``, ``s = T6[pos, i]`` (fp32 tables
        [max_seq, half]), for ``i < half``:
        ``out[i] = y[i]*c - y[i+half]*s``, ``out[i+half] = y[i+half]*c + y[i]*s``
        (rotate-half RoPE, as HF Llama); then ``T2[I0 + j] = out[j]``.
        Used for K: T2 = bf16 K cache of the layer [max_seq, n_kv_heads*hd],
        ``I0 = pos*n_kv_heads*hd + R0`` (fused RoPE + KV append).
      - ``SILU_MUL``: ``u[j] = dot(float(T4[r, :]), x)`` (T4 = up weight, same shape
        as T0 = gate weight), ``T2[I0 + j] = silu(y[j]) * u[j]``,
        ``silu(a) = a / (1 + exp(-a))``.

    * if ``FLAGS & ARGMAX``: after the epilogue, with ``out[j]`` the fp32 value the
      epilogue stored for row ``R0 + j``: ``T5[I3] = max_j out[j]`` (fp32) and
      ``T6[I3] = R0 + argmax_j out[j]`` (int32; lowest index on ties). porter uses it
      with the STORE epilogue on the LM head (T5/T6 = argmax partial buffers).

    Operand summary: T0 weight, T1 input, T2 output, T3 norm weight (PRE_NORM),
    T4 up weight (SILU_MUL), T5/T6 cos/sin (ROPE) or max/argmax (ARGMAX);
    I0 output offset, I2 head dim, I3 argmax slot, I4 pos; F0 eps.

ROPE (4)
    In place on T0 (fp32) rows ``[R0, R1)`` (whole heads of size ``hd``): the rotation
    of MATVEC's ROPE epilogue with tables T5/T6 at row ``pos``.

KV_APPEND (5)
    ``T2[pos, c] = T0[c]`` and ``T3[pos, c] = T1[c]`` for ``c`` in ``[R0, R1)``:
    T0/T1 = fp32 K/V of this step [n_kv_heads*hd], T2/T3 = bf16 K/V cache
    [max_seq, n_kv_heads*hd].

ATTN_PARTIAL (6)
    KV head ``g = I1``, its query heads ``h = g*I3 .. g*I3 + I3 - 1`` (I3 = query heads
    per KV head), cache positions ``t`` in ``[R0, R1)``, split index ``p = I0``,
    ``S = I5`` = split stride of the partial tensors. For each such ``h``:

    * ``q = T0[h*hd : (h+1)*hd]`` (fp32); if ``FLAGS & ROPE_Q`` rotate ``q`` first
      (RoPE at ``pos`` with T5/T6, as above; the producer stored it unrotated).
    * ``k_t = float(T1[t, g*hd:(g+1)*hd])``, ``v_t`` likewise from T2 (bf16 caches).
    * ``z_t = F0 * dot(q, k_t)`` (F0 = 1/sqrt(hd)), ``m = max_t z_t``,
      ``e_t = exp(z_t - m)``, ``l = sum_t e_t``, ``o = sum_t e_t * v_t``.
    * ``T3[h, p, :] = o`` (fp32 [n_heads, S, hd], not normalised),
      ``T4[h, p, 0] = m``, ``T4[h, p, 1] = l`` (fp32 [n_heads, S, 2]).

    An empty range (R0 == R1) writes ``m = -inf``, ``l = 0``, ``o = 0``.

ATTN_REDUCE (7)
    For each query head ``h`` in ``[R0, R1)`` merge splits ``p < I0`` (I5 = split
    stride): ``M = max_p T4[h,p,0]``, ``w_p = exp(T4[h,p,0] - M)`` (0 if m is -inf),
    ``L = sum_p w_p*T4[h,p,1]``, ``T2[h*hd + d] = sum_p w_p*T3[h,p,d] / L``.

RESIDUAL_ADD (8)
    ``T2[i] += T0[i]`` for ``i`` in ``[R0, R1)`` (both fp32).

ARGMAX_PARTIAL (9)
    Over ``i`` in ``[R0, R1)`` of T0 (fp32 logits): ``T5[I3] = max``,
    ``T6[I3] = argmax`` (lowest index on ties).

ARGMAX_REDUCE (10)
    Over slots ``s`` in ``[R0, R1)``: the slot with the largest ``T5[s]`` (ties: the
    smaller ``T6[s]``) gives ``T2[I0] = T6[s]`` (T2 int32 [1] = next token).

Counter layout
==============
``counters`` is a flat int32 array; ``encode`` names each counter (e.g.
``"L3.qkv.g5"``) in ``counter_names`` and gives its target in ``counter_targets``.
The kernel never needs the names.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from porter.errors import PorterError

WORDS = 32
MAX_WAITS = 4
N_TENSOR_SLOTS = 7
N_INT_OPERANDS = 6


class Opcode(enum.IntEnum):
    STOP = 0
    EMBED = 1
    RMSNORM = 2
    MATVEC = 3
    ROPE = 4
    KV_APPEND = 5
    ATTN_PARTIAL = 6
    ATTN_REDUCE = 7
    RESIDUAL_ADD = 8
    ARGMAX_PARTIAL = 9
    ARGMAX_REDUCE = 10


class Epilogue(enum.IntEnum):
    """MATVEC epilogue kind, in FLAGS bits 0-3."""

    STORE = 0
    RESIDUAL_ADD = 1
    ROPE = 2
    SILU_MUL = 3


class Flag(enum.IntFlag):
    """FLAGS bits above the epilogue nibble."""

    NONE = 0
    PRE_NORM = 1 << 4   # MATVEC: RMSNorm the input vector first (weight T3, eps F0)
    ARGMAX = 1 << 5     # MATVEC: also write block max/argmax to T5[I3]/T6[I3]
    ROPE_Q = 1 << 6     # ATTN_PARTIAL: rotate q at pos before the dot products


EPILOGUE_MASK = 0xF


class W(enum.IntEnum):
    """Word indices of one instruction record."""

    OP = 0
    LAYER = 1
    SIGNAL = 2
    NWAIT = 3
    WAIT0 = 4       # counter, target at WAIT0 + 2*i, WAIT0 + 2*i + 1
    FLAGS = 12
    T0 = 13         # tensor slots T0..T6 at 13..19
    R0 = 20
    R1 = 21
    I0 = 22         # integer operands I0..I5 at 22..27
    F0 = 28
    F1 = 29
    ID = 30
    COST_KIB = 31


class DType(enum.IntEnum):
    BF16 = 0
    FP32 = 1
    INT32 = 2


DTYPE_BYTES = {DType.BF16: 2, DType.FP32: 4, DType.INT32: 4}
TENSOR_ALIGN = 256

# The kernel's ``tensors`` argument: one record per tensor id (see "Launch model").
TENSOR_DESC = np.dtype([("ptr", "<u8"), ("dtype", "<i4"), ("rows", "<i4"), ("cols", "<i4"),
                        ("pad", "<i4", (3,))])
TENSOR_DESC_BYTES = 32
assert TENSOR_DESC.itemsize == TENSOR_DESC_BYTES


@dataclass(frozen=True)
class TensorSpec:
    """One entry of the tensor table: what pointer ``tensors[id]`` must point at."""

    id: int
    name: str            # HF-style weight name, or a buffer name like "buf.h"
    dtype: DType
    shape: tuple[int, ...]
    kind: str            # "weight" | "activation" | "cache" | "table" | "output"
    offset: int = 0      # byte offset in a single arena (TENSOR_ALIGN aligned)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]


def f32_bits(value: float) -> int:
    """The int32 word holding ``value`` as a float32 bit pattern."""
    return int(np.array(value, dtype=np.float32).view(np.int32))


def bits_f32(word: int) -> float:
    """Inverse of ``f32_bits``."""
    return float(np.array(word, dtype=np.int32).view(np.float32))


@dataclass
class Instruction:
    """One decoded/encodable instruction; ``to_words``/``from_words`` are the format."""

    op: Opcode
    layer: int = -1
    signal: int = -1
    waits: list[tuple[int, int]] = field(default_factory=list)
    epilogue: Epilogue = Epilogue.STORE
    flags: Flag = Flag.NONE
    tensors: list[int] = field(default_factory=list)   # up to 7, -1 = unused
    r0: int = 0
    r1: int = 0
    ints: list[int] = field(default_factory=list)      # up to 6
    f0: float = 0.0
    f1: float = 0.0
    id: int = -1
    cost_kib: int = 0

    def to_words(self) -> np.ndarray:
        if len(self.waits) > MAX_WAITS:
            raise ValueError(f"instruction {self.id}: {len(self.waits)} waits > {MAX_WAITS}")
        if len(self.tensors) > N_TENSOR_SLOTS or len(self.ints) > N_INT_OPERANDS:
            raise ValueError(f"instruction {self.id}: too many operands")
        w = np.zeros(WORDS, dtype=np.int32)
        w[W.OP] = int(self.op)
        w[W.LAYER] = self.layer
        w[W.SIGNAL] = self.signal
        w[W.NWAIT] = len(self.waits)
        for i, (c, t) in enumerate(self.waits):
            w[W.WAIT0 + 2 * i] = c
            w[W.WAIT0 + 2 * i + 1] = t
        w[W.FLAGS] = int(self.epilogue) | int(self.flags)
        tens = list(self.tensors) + [-1] * (N_TENSOR_SLOTS - len(self.tensors))
        w[W.T0:W.T0 + N_TENSOR_SLOTS] = tens
        w[W.R0] = self.r0
        w[W.R1] = self.r1
        ints = list(self.ints) + [0] * (N_INT_OPERANDS - len(self.ints))
        w[W.I0:W.I0 + N_INT_OPERANDS] = ints
        w[W.F0] = f32_bits(self.f0)
        w[W.F1] = f32_bits(self.f1)
        w[W.ID] = self.id
        w[W.COST_KIB] = self.cost_kib
        return w

    @classmethod
    def from_words(cls, w: np.ndarray) -> "Instruction":
        nwait = int(w[W.NWAIT])
        return cls(
            op=Opcode(int(w[W.OP])),
            layer=int(w[W.LAYER]),
            signal=int(w[W.SIGNAL]),
            waits=[(int(w[W.WAIT0 + 2 * i]), int(w[W.WAIT0 + 2 * i + 1])) for i in range(nwait)],
            epilogue=Epilogue(int(w[W.FLAGS]) & EPILOGUE_MASK),
            flags=Flag(int(w[W.FLAGS]) & ~EPILOGUE_MASK),
            tensors=[int(x) for x in w[W.T0:W.T0 + N_TENSOR_SLOTS]],
            r0=int(w[W.R0]),
            r1=int(w[W.R1]),
            ints=[int(x) for x in w[W.I0:W.I0 + N_INT_OPERANDS]],
            f0=bits_f32(int(w[W.F0])),
            f1=bits_f32(int(w[W.F1])),
            id=int(w[W.ID]),
            cost_kib=int(w[W.COST_KIB]),
        )


def describe() -> dict:
    """The format as plain data (for templates and reports)."""
    return {
        "words": WORDS,
        "max_waits": MAX_WAITS,
        "word_index": {m.name: int(m) for m in W},
        "opcodes": {m.name: int(m) for m in Opcode},
        "epilogues": {m.name: int(m) for m in Epilogue},
        "flags": {m.name: int(m) for m in Flag if m.name and m is not Flag.NONE},
        "dtypes": {m.name: int(m) for m in DType},
        "tensor_align": TENSOR_ALIGN,
        "tensor_desc_bytes": TENSOR_DESC_BYTES,
        "tensor_desc_offsets": {name: TENSOR_DESC.fields[name][1] for name in TENSOR_DESC.names},
    }


def tensor_desc_records(tensors: list[TensorSpec], pointers=None) -> np.ndarray:
    """The ``tensors`` argument: one TensorDesc per entry of the tensor table.

    ``pointers[id]`` are device addresses; without them each ``ptr`` holds the
    tensor's arena offset (add the arena base on the host).
    """
    recs = np.zeros(len(tensors), dtype=TENSOR_DESC)
    for t in tensors:
        cols = int(t.shape[-1])
        ptr = int(pointers[t.id]) if pointers is not None else t.offset
        if ptr % 16:
            raise PorterError(f"megakernel tensor {t.name}: address {ptr:#x} is not 16-byte aligned "
                              f"(the kernel moves rows with 16-byte copies); align each tensor to 16 bytes")
        recs[t.id] = (ptr, int(t.dtype), t.numel // cols, cols, (0, 0, 0))
    return recs
