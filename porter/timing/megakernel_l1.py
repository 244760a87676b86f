"""L1 for the decode megakernel: each instruction kind's cost measured by running the
megakernel's own PTX in the simulator's timed mode, for the queue model
(porter.megakernel.latency) to use instead of assumed per-instruction constants.

The reduced problem keeps every instruction's work as in the full plan: the kernel's model
(Llama-3.2-1B) cut to one layer, a small vocabulary and a context of the predicted
position, planned on the product's SM count, so each kind of instruction (a matvec of a
given K, epilogue and flags, an attention partial, a reduce, ...) has the rows, K and
cache positions the full plan gives it. One CTA (one SM) walks a queue holding one
instruction of every kind at two sizes (``s`` and ``2s`` rows / positions / elements),
its waits removed (the queue model times the waits, below). Each instruction's cycles are
read between its signal and the previous one (the timed mode's issue times of the
``red.release`` that signals a counter), so a kind costs ``fixed + per_unit x size``:
``per_unit`` = (the 2s run - the s run) / s, ``fixed`` the rest.

What L1 leaves to the queue model: the weight and KV streams' bandwidth. In the timed run
the SM's L2 share is unbounded (pages arrive after the copy latency, through the TMA
window), so ``per_unit`` is the SM's own work per row (loads' latency, the dot products,
shuffles, barriers); the queue model shares HBM among the streaming SMs and takes the
longer of the stream and that work. The counter waits are timed from the kernel's own
spin / back-off constants (``backoff``): the queue model walks the waiter's polls.

Every figure is predicted by porter's timing model, not measured on a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time

from porter.errors import PorterError

# the marker that closes an instruction (counters.cuh: signal_counter)
SIGNAL_OPCODE = "red.release.gpu.global.add.s32"
# the SM's L2 share in the timed run: unbounded (the queue model owns the streams' bandwidth)
UNBOUNDED_L2_BYTES_PER_CLK = 1e9
REDUCED_VOCAB = 1024          # LM-head rows of the reduced model (its blocks are sized like the full plan's)
_BACKOFF = {"spin_polls": r"kSpinPolls\s*=\s*(\d+)", "backoff_min_ns": r"kBackoffMinNs\s*=\s*(\d+)",
            "backoff_max_ns": r"kBackoffMaxNs\s*=\s*(\d+)"}


def backoff(source: str) -> dict | None:
    """The counter wait's spin / back-off constants from the kernel's source (counters.cuh:
    kSpinPolls acquire polls back to back, then polls with __nanosleep from kBackoffMinNs
    doubling to kBackoffMaxNs); None when the source has no back-off (the queue model then
    takes perf.counter_wakeup_ns). A source without kSpinPolls spins 0 times."""
    found = {k: re.search(p, source) for k, p in _BACKOFF.items()}
    if found["backoff_min_ns"] is None or found["backoff_max_ns"] is None:
        return None
    return {k: (int(m.group(1)) if m else 0) for k, m in found.items()}


def reduced_config(cfg, pos: int):
    """The kernel's model cut to one layer, a small vocabulary and ``pos + 1`` positions."""
    return dataclasses.replace(cfg, num_layers=1, vocab_size=min(cfg.vocab_size, REDUCED_VOCAB),
                               max_seq_len=max(pos + 1, 2), name=f"{cfg.name}-L1")


def _sizes(d: dict, cfg) -> tuple[int, int] | None:
    """(s, 2s) for one node, kept legal: whole heads for the fused RoPE, within the tensor."""
    from porter.megakernel.isa import Epilogue, Opcode

    op, n = d["op"], d["r1"] - d["r0"]
    if n <= 0:
        return None
    if op == Opcode.MATVEC:
        rows = cfg.weight_shapes()[d["tensors"][0]][0]
        if d["epilogue"] == Epilogue.ROPE:
            n = max(cfg.head_dim, n // cfg.head_dim * cfg.head_dim)
        s = n if 2 * n <= rows else max(1, rows // 2)
        return s, 2 * s
    if op == Opcode.ATTN_PARTIAL:
        s = max(1, min(n, (cfg.max_seq_len) // 2))      # positions [0, 2s) hold cache rows
        return s, 2 * s
    if op == Opcode.ATTN_REDUCE:
        s = max(1, min(n, cfg.num_attention_heads // 2))
        return s, 2 * s
    if op in (Opcode.RMSNORM, Opcode.RESIDUAL_ADD, Opcode.EMBED, Opcode.ROPE, Opcode.KV_APPEND):
        s = max(1, min(n, cfg.hidden_size // 2))
        return s, 2 * s
    return n, n          # argmax: one size (its range is the slots it merges)


def sample_program(cfg, hw, pos: int):
    """The reduced plan's DAG and one queue: every instruction kind at two sizes, no waits.
    Returns (program, [(kind, size) per queued instruction])."""
    from porter.megakernel.dag import build_dag
    from porter.megakernel.encode import encode
    from porter.megakernel.isa import Opcode
    from porter.megakernel.latency import instruction_kind

    g = build_dag(cfg, hw, pos=pos, token=1, edges=False)
    first: dict = {}
    for n in sorted(g.nodes):
        first.setdefault(instruction_kind(g.nodes[n], cfg), n)
    signal = next(d["signal"] for _, d in g.nodes(data=True) if d["signal"] is not None)
    queue, what = [], []
    new_id = max(g.nodes) + 1
    for kind, n in first.items():
        d = g.nodes[n]
        sizes = _sizes(d, cfg)
        if sizes is None:
            continue
        for size in dict.fromkeys(sizes):
            # from row / position / element 0, so both sizes stay inside the tensors; a
            # matvec's output offset I0 names row R0's place (I0 = base + R0): moved with it
            ints = list(d["ints"])
            if d["op"] == Opcode.MATVEC and ints:
                ints[0] -= d["r0"]
            attrs = dict(d, waits=[], r0=0, r1=size, ints=ints, signal=d["signal"] or signal)
            g.add_node(new_id, **attrs)
            queue.append(new_id)
            what.append((kind, size))
            new_id += 1
    keep = set(queue)
    g.remove_nodes_from([n for n in list(g.nodes) if n not in keep])
    return encode(g, [queue]), what


def _run(spec, arch, params: dict, expansion: dict, pos: int, source: str | None) -> dict:
    from porter.emu.timed import timed
    from porter.megakernel.hw import HwFigures
    from porter.runtime import device_runs
    from porter.runtime.emulated import EmuDevice
    from porter.validation.model_config import load_model_config

    cfg = reduced_config(load_model_config(spec.config["model"]), pos)
    program, what = sample_program(cfg, HwFigures.of(arch), pos)
    weights = device_runs.bench_weights(cfg, seed=0, pool_size=1 << 16)
    caches = device_runs._random_caches(cfg, pos, seed=0)
    dev = EmuDevice(sm_count=1, seed=-1)
    if source is not None:
        dev.sources[spec.name] = source
    t0 = time.process_time()
    function = dev.load(spec, arch)
    run = device_runs.DecodeStepRun(spec, arch, program, cfg, weights, caches, pos, dev)
    p = dict(params, l2_bytes_per_clk_per_sm=UNBOUNDED_L2_BYTES_PER_CLK)
    with timed(p, expansion, marks=(SIGNAL_OPCODE,)) as runs:
        run.launch(function)
    res = runs[0]
    marks = sorted(t for _, _, t, _ in res["marks"])
    if len(marks) != len(what):
        raise PorterError(f"L1: {spec.name}: {len(marks)} signals in the timed run for {len(what)} instructions "
                          "(the interpreter signals once per instruction: counters.cuh)")
    cycles, prev = {}, 0.0
    for (kind, size), t in zip(what, marks):
        cycles.setdefault(kind, {})[size] = t - prev
        prev = t
    kinds = {}
    for kind, by_size in cycles.items():
        sizes = sorted(by_size)
        if len(sizes) == 2:
            per = max(0.0, (by_size[sizes[1]] - by_size[sizes[0]]) / (sizes[1] - sizes[0]))
        else:
            per = 0.0
        fixed = max(0.0, by_size[sizes[0]] - per * sizes[0])
        kinds[kind] = {"fixed_cycles": round(fixed, 1), "per_unit_cycles": round(per, 3),
                       "measured": {str(s): round(c, 1) for s, c in by_size.items()}}
    return {"kinds": kinds, "cpu_seconds": round(time.process_time() - t0, 2), "cycles": res["cycles"],
            "reduced_model": {"name": cfg.name, "layers": cfg.num_layers, "vocab": cfg.vocab_size, "pos": pos}}


_MEASURED: dict = {}


def measure(spec, arch, fig, pos: int, source: str | None = None) -> dict:
    """Per instruction kind {fixed_cycles, per_unit_cycles} from the timed run of ``spec``'s
    PTX (``source``: an edited .cu instead of the rendered template), cached in-process and
    on disk, content-keyed (porter.timing.cache.l1_cached)."""
    from porter.megakernel.hw import HwFigures

    from . import l1
    from .cache import _spec_dict, l1_cached

    params = l1.params(fig)
    expansion = l1.expansion(spec, arch) if source is None else {}
    hw = HwFigures.of(arch)
    key = {"what": "megakernel-l1", "spec": _spec_dict(spec), "arch": arch.digest, "sm_count": hw.sm_count,
           "bandwidth": hw.hbm_bandwidth_bytes_per_s, "pos": pos, "params": params, "expansion": expansion,
           "source": source}
    text = json.dumps(key, sort_keys=True, default=str)
    if text not in _MEASURED:
        _MEASURED[text] = l1_cached(key, lambda: _run(spec, arch, params, expansion, pos, source))
    return _MEASURED[text]
