"""Scheduled DAG -> the int32 instruction tensor, counter targets and tensor table (isa.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from porter.errors import PorterError

from .isa import DTYPE_BYTES, TENSOR_ALIGN, WORDS, DType, Instruction, TensorSpec

_INT32_TENSORS = ("buf.amax_idx", "out.token")


@dataclass
class EncodedProgram:
    """Everything the kernel (or the Python VM) needs to run one decode step."""

    instructions: np.ndarray          # int32 [sm_count, max_queue_len, WORDS]
    counter_targets: np.ndarray       # int32 [n_counters]
    counter_names: list[str]
    tensors: list[TensorSpec]
    arena_bytes: int
    pos: int
    token: int
    model: dict = field(default_factory=dict)

    def tensor(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def queue_lengths(self) -> np.ndarray:
        from .isa import W
        return (self.instructions[:, :, W.OP] != 0).sum(axis=1)


def _shape_and_dtype(name: str, view: tuple[int, int], cfg, g: nx.DiGraph) -> tuple[tuple[int, ...], DType, str]:
    shapes = cfg.weight_shapes()
    if name in shapes:
        return shapes[name], DType.BF16, "weight"
    rows, cols = view
    if name.startswith("cache."):
        return (rows, cols), DType.BF16, "cache"
    if name.startswith("rope."):
        return (rows, cols), DType.FP32, "table"
    if name == "buf.o_part":
        return (cfg.num_attention_heads, g.graph["n_splits"], cfg.head_dim), DType.FP32, "activation"
    if name == "buf.ml_part":
        return (cfg.num_attention_heads, g.graph["n_splits"], 2), DType.FP32, "activation"
    dtype = DType.INT32 if name in _INT32_TENSORS else DType.FP32
    kind = "output" if name.startswith("out.") else "activation"
    return (rows * cols,) if rows == 1 else (rows, cols), dtype, kind


def tensor_table(g: nx.DiGraph) -> tuple[list[TensorSpec], dict[str, int], int]:
    cfg = g.graph["cfg"]
    used = {t for _, d in g.nodes(data=True) for t in d["tensors"] if t is not None}
    kinds_order = {"weight": 0, "table": 1, "cache": 2, "activation": 3, "output": 4}
    weight_order = {n: i for i, n in enumerate(cfg.weight_shapes())}
    entries = []
    for name in used:
        shape, dtype, kind = _shape_and_dtype(name, g.graph["tensor_views"][name], cfg, g)
        entries.append((kinds_order[kind], weight_order.get(name, 0), name, shape, dtype, kind))
    entries.sort()
    table, ids, offset = [], {}, 0
    for i, (_, _, name, shape, dtype, kind) in enumerate(entries):
        spec = TensorSpec(i, name, dtype, tuple(shape), kind, offset)
        table.append(spec)
        ids[name] = i
        offset += math.ceil(spec.nbytes / TENSOR_ALIGN) * TENSOR_ALIGN
    return table, ids, offset


def encode(g: nx.DiGraph, queues: list[list[int]]) -> EncodedProgram:
    """Encode a checked schedule. Counter ids follow first use in program order."""
    table, tids, arena = tensor_table(g)
    counters: dict[str, int] = {}
    targets: list[int] = []
    for n in sorted(g.nodes):
        key = g.nodes[n]["signal"]
        if key is not None:
            if key not in counters:
                counters[key] = len(counters)
                targets.append(0)
            targets[counters[key]] += 1
    max_len = max((len(q) for q in queues), default=0) + 1     # always one STOP per row
    out = np.zeros((len(queues), max_len, WORDS), dtype=np.int32)
    for sm, q in enumerate(queues):
        for slot, n in enumerate(q):
            d = g.nodes[n]
            try:
                waits = [(counters[k], targets[counters[k]]) for k in d["waits"]]
            except KeyError as exc:
                raise PorterError(f"megakernel encode: {d['label']} waits on unknown counter {exc}") from None
            ins = Instruction(
                op=d["op"], layer=d["layer"],
                signal=counters[d["signal"]] if d["signal"] is not None else -1,
                waits=waits, epilogue=d["epilogue"], flags=d["flags"],
                tensors=[tids[t] if t is not None else -1 for t in d["tensors"]],
                r0=d["r0"], r1=d["r1"], ints=d["ints"], f0=d["f0"], f1=d["f1"], id=n,
                cost_kib=math.ceil(d["bytes"] / 1024))
            out[sm, slot] = ins.to_words()
    cfg = g.graph["cfg"]
    model = {
        "name": cfg.name, "num_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size,
        "vocab_size": cfg.vocab_size, "max_seq_len": cfg.max_seq_len,
        "n_splits": g.graph["n_splits"], "n_argmax_slots": g.graph["n_argmax_slots"],
        "fused": g.graph["fuse"],
    }
    return EncodedProgram(out, np.array(targets, dtype=np.int32), list(counters), table, arena,
                          g.graph["pos"], g.graph["token"], model)


def host_tables(program: EncodedProgram, cfg) -> dict[str, np.ndarray]:
    """Contents of the "table" tensors (RoPE cos/sin, fp32), computed in fp64 then rounded."""
    cos, sin = cfg.rope_tables(cfg.max_seq_len)
    out = {}
    for t in program.tensors:
        if t.name == "rope.cos":
            out[t.name] = cos.astype(np.float32)
        elif t.name == "rope.sin":
            out[t.name] = sin.astype(np.float32)
    return out


__all__ = ["EncodedProgram", "encode", "host_tables", "tensor_table", "DTYPE_BYTES"]
