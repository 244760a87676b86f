"""The instruction DAG of one batch-1 Llama decode step, sized for an arch.

``build_dag(cfg, arch, pos=..., token=...)`` returns a ``networkx.DiGraph`` whose nodes
are ints in program order (every edge goes from a smaller to a larger id) with these
attributes:

* ``op`` (isa.Opcode), ``layer``, ``label``;
* operands for the encoder: ``epilogue``, ``flags``, ``tensors`` (names, slot order,
  None = unused), ``r0``, ``r1``, ``ints`` (I0..I5), ``f0``, ``f1``;
* synchronisation: ``signal`` (counter key this instruction increments) and
  ``waits`` (counter keys it waits on, each "all producers done");
* cost: ``hbm_bytes`` (weights and KV cache it streams), ``act_bytes`` (activation
  vectors, mostly L2 hits), ``bytes`` (their sum), ``flops``, ``prefetch_bytes``
  (the weight bytes among hbm_bytes, which may be loaded before the waits are met);
* ``reads`` / ``writes``: rectangles ``(tensor, row_lo, row_hi, col_lo, col_hi)`` of the
  tensor seen as 2-D (``tensor_views``), for the race checker.

Edges are exactly the counter waits: an instruction depends on every producer of
each counter it waits on. Counters are per KV-head group where the data allows it
(attention on group g waits only for the Q/K/V rows of group g), per operator
elsewhere (a matvec row needs the whole input vector).

Sizing: weight-streaming operators are cut into row blocks of about
``arch.ring_bytes`` (the shared-memory page ring, ~195 KiB on a 227 KiB SM) and into a
whole number of waves of ``sm_count`` blocks, so every SM streams the same share.
``graph.graph`` holds ``cfg``, ``hw``, ``pos``, ``token``, ``fuse``, ``n_splits``,
``n_argmax_slots`` and ``tensor_views``.
"""

from __future__ import annotations

import math

import networkx as nx

from porter.errors import PorterError

from .hw import HwFigures
from .isa import Epilogue, Flag, Opcode

ROW_GRANULE = 4          # weight rows per warp step of the matvec (block sizes are multiples)
ATTN_MIN_CHUNK = 16      # fewest cache positions worth one attention partial


def split_even(n: int, parts: int, granule: int = 1) -> list[tuple[int, int]]:
    """[0, n) cut into at most ``parts`` ranges of near-equal size, multiples of ``granule``."""
    units = -(-n // granule)
    parts = max(1, min(parts, units))
    bounds = [min(n, (i * units // parts) * granule) for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def n_blocks_for(total_bytes: int, hw: HwFigures) -> int:
    """Whole waves of ``sm_count`` blocks, each at most one page ring of weights."""
    waves = max(1, math.ceil(total_bytes / (hw.sm_count * hw.ring_bytes)))
    return waves * hw.sm_count


def _rect(name: str, lo: int, hi: int) -> tuple:
    return (name, 0, 1, lo, hi)


def _rows(name: str, r0: int, r1: int, ncols: int) -> tuple:
    return (name, r0, r1, 0, ncols)


class _Builder:
    def __init__(self, cfg, hw: HwFigures, pos: int, token: int, fuse: bool, with_edges: bool = True):
        self.with_edges = with_edges
        self.cfg, self.hw, self.pos, self.token, self.fuse = cfg, hw, pos, token, fuse
        self.g = nx.DiGraph()
        self.producers: dict[str, list[int]] = {}
        self.closed: set[str] = set()
        self.views: dict[str, tuple[int, int]] = {}
        self.edges: list[tuple[int, int]] = []

    # -- bookkeeping ------------------------------------------------------------

    def view(self, name: str, rows: int, cols: int) -> str:
        self.views.setdefault(name, (rows, cols))
        return name

    def add(self, op: Opcode, label: str, *, layer: int = -1, signal: str | None,
            waits: list[str], tensors: list[str | None], r0: int = 0, r1: int = 0,
            ints: list[int] | None = None, epilogue: Epilogue = Epilogue.STORE,
            flags: Flag = Flag.NONE, f0: float = 0.0, f1: float = 0.0,
            hbm_bytes: int = 0, act_bytes: int = 0, flops: int = 0, prefetch_bytes: int = 0,
            reads: list[tuple] = (), writes: list[tuple] = ()) -> int:
        nid = self.g.number_of_nodes()
        self.g.add_node(
            nid, op=op, label=label, layer=layer, signal=signal, waits=list(waits),
            tensors=list(tensors), r0=r0, r1=r1, ints=list(ints or []), epilogue=epilogue,
            flags=flags, f0=f0, f1=f1, hbm_bytes=int(hbm_bytes), act_bytes=int(act_bytes),
            bytes=int(hbm_bytes + act_bytes), flops=int(flops), prefetch_bytes=int(prefetch_bytes),
            reads=list(reads),
            writes=list(writes))
        for key in waits:
            prods = self.producers.get(key)
            if not prods:
                raise PorterError(f"megakernel dag: {label} waits on counter {key!r} that nothing signals")
            self.closed.add(key)
            if self.with_edges:      # only read by build() when edges are wanted (~4M for Llama-1B)
                self.edges.extend((p, nid) for p in prods)
        if signal is not None:
            if signal in self.closed:
                raise PorterError(f"megakernel dag: {label} signals {signal!r} after someone waited on it")
            self.producers.setdefault(signal, []).append(nid)
        return nid

    # -- operators --------------------------------------------------------------

    def matvec(self, label: str, layer: int, weight: str, n_rows_w: int, k: int, x: str,
               y: str, blocks: list[tuple[int, int]], out_base, *, signal: str,
               waits: list[str], epilogue=Epilogue.STORE, norm: str | None = None,
               up: str | None = None, aux: tuple[str | None, str | None] = (None, None),
               argmax_slot0: int | None = None, out_bf16: bool = False,
               y_view_cols: int | None = None) -> list[int]:
        """One MATVEC per row block; ``out_base(r0)`` gives the flat output offset I0."""
        c = self.cfg
        ids = []
        flags = Flag.NONE
        if norm is not None:
            flags |= Flag.PRE_NORM
        if argmax_slot0 is not None:
            flags |= Flag.ARGMAX
        nw = 2 if up is not None else 1
        if not all(0 <= r0 < r1 <= n_rows_w for r0, r1 in blocks):
            raise AssertionError(f"{label}: row blocks {blocks} outside the weight's {n_rows_w} rows")
        for i, (r0, r1) in enumerate(blocks):
            rows = r1 - r0
            off = out_base(r0)
            ycols = y_view_cols or self.views[y][1]
            yrow, ycol = divmod(off, ycols)
            if ycol + rows > ycols:
                raise AssertionError("output block crosses a row of its tensor view")
            reads = [_rows(weight, r0, r1, k), _rect(x, 0, k)]
            if norm:
                reads.append(_rect(norm, 0, k))
            if up:
                reads.append(_rows(up, r0, r1, k))
            out_rect = (y, yrow, yrow + 1, ycol, ycol + rows)
            writes = [out_rect]
            if epilogue == Epilogue.RESIDUAL_ADD:
                reads.append(out_rect)
            ints = [off, 0, c.head_dim, 0, self.pos, 0]
            if epilogue == Epilogue.ROPE:
                reads += [_rows(aux[0], self.pos, self.pos + 1, c.head_dim // 2),
                          _rows(aux[1], self.pos, self.pos + 1, c.head_dim // 2)]
            if argmax_slot0 is not None:
                ints[3] = argmax_slot0 + i
                writes += [_rect(aux[0], ints[3], ints[3] + 1), _rect(aux[1], ints[3], ints[3] + 1)]
            out_bytes = rows * (2 if out_bf16 else 4) * (2 if epilogue == Epilogue.RESIDUAL_ADD else 1)
            ids.append(self.add(
                Opcode.MATVEC, f"{label}[{r0}:{r1}]", layer=layer, signal=signal, waits=waits,
                tensors=[weight, x, y, norm, up, aux[0], aux[1]], r0=r0, r1=r1, ints=ints,
                epilogue=epilogue, flags=flags, f0=c.rms_norm_eps,
                hbm_bytes=nw * rows * k * 2 + (out_bytes if out_bf16 else 0),
                act_bytes=k * 4 + (k * 2 if norm else 0) + (0 if out_bf16 else out_bytes),
                flops=2 * nw * rows * k, prefetch_bytes=nw * rows * k * 2, reads=reads, writes=writes))
        return ids

    def weight_blocks(self, rows: int, k: int, n_weights: int = 1) -> list[tuple[int, int]]:
        return split_even(rows, n_blocks_for(n_weights * rows * k * 2, self.hw), ROW_GRANULE)

    # -- the step ---------------------------------------------------------------

    def build(self) -> nx.DiGraph:
        c, hw, pos, fuse = self.cfg, self.hw, self.pos, self.fuse
        H, I, hd, nkv, gs = c.hidden_size, c.intermediate_size, c.head_dim, c.num_key_value_heads, c.group_size
        qd, kvd, nh = c.q_dim, c.kv_dim, c.num_attention_heads
        L = pos + 1
        # attention splits: enough partials to cover the SMs, each at least ATTN_MIN_CHUNK
        # positions and at most one page ring of K+V bytes
        kv_row_bytes = 2 * hd * 2
        n_splits = min(max(1, hw.sm_count // nkv), max(1, math.ceil(L / ATTN_MIN_CHUNK)))
        n_splits = min(L, max(n_splits, math.ceil(L * kv_row_bytes / hw.ring_bytes)))
        splits = split_even(L, n_splits)
        S = len(splits)
        self.n_splits = S

        V = self.view
        V("buf.h", 1, H); V("buf.q", 1, qd); V("buf.attn", 1, qd); V("buf.act", 1, I)
        V("buf.o_part", nh, S * hd); V("buf.ml_part", nh, S * 2)
        V("buf.logits", 1, c.vocab_size); V("rope.cos", c.max_seq_len, hd // 2)
        V("rope.sin", c.max_seq_len, hd // 2); V("out.token", 1, 1)
        if not fuse:
            V("buf.xn", 1, H); V("buf.k", 1, kvd); V("buf.v", 1, kvd); V("buf.tmp", 1, H)
        for name, shape in c.weight_shapes().items():
            V(name, *(shape if len(shape) == 2 else (1, shape[0])))

        self.add(Opcode.EMBED, "embed", signal="embed", waits=[],
                 tensors=["model.embed_tokens.weight", None, "buf.h"], r0=0, r1=H,
                 ints=[self.token], hbm_bytes=H * 2, act_bytes=H * 4,
                 reads=[_rows("model.embed_tokens.weight", self.token, self.token + 1, H)],
                 writes=[_rect("buf.h", 0, H)])
        resid = "embed"

        # QKV row blocks: one row budget over Q+K+V, cut per KV-head group
        qkv_blocks = n_blocks_for((qd + 2 * kvd) * H * 2, hw)
        rows_per = max(ROW_GRANULE, math.ceil((qd + 2 * kvd) / qkv_blocks))

        def seg(n):
            return split_even(n, math.ceil(n / rows_per), ROW_GRANULE)

        for l in range(c.num_layers):
            p = f"model.layers.{l}."
            kc, vc = V(f"cache.k.{l}", c.max_seq_len, kvd), V(f"cache.v.{l}", c.max_seq_len, kvd)
            if fuse:
                x_in, norm1 = "buf.h", p + "input_layernorm.weight"
                waits_qkv = [resid]
            else:
                self.add(Opcode.RMSNORM, f"L{l}.norm1", layer=l, signal=f"L{l}.norm1", waits=[resid],
                         tensors=["buf.h", None, "buf.xn", p + "input_layernorm.weight"], r0=0, r1=H,
                         ints=[H], f0=c.rms_norm_eps, act_bytes=H * 4 * 2 + H * 2,
                         flops=4 * H, reads=[_rect("buf.h", 0, H), _rect(p + "input_layernorm.weight", 0, H)],
                         writes=[_rect("buf.xn", 0, H)])
                x_in, norm1 = "buf.xn", None
                waits_qkv = [f"L{l}.norm1"]
            for g in range(nkv):
                sig = f"L{l}.qkv.g{g}"
                q0 = g * gs * hd
                self.matvec(f"L{l}.q.g{g}", l, p + "self_attn.q_proj.weight", qd, H, x_in, "buf.q",
                            [(q0 + a, q0 + b) for a, b in seg(gs * hd)], lambda r: r,
                            signal=sig, waits=waits_qkv, norm=norm1)
                k0 = g * hd
                if fuse:
                    # K: whole head, RoPE'd and appended to the cache at pos in the epilogue
                    self.matvec(f"L{l}.k.g{g}", l, p + "self_attn.k_proj.weight", kvd, H, x_in, kc,
                                [(k0, k0 + hd)], lambda r: pos * kvd + r, signal=sig, waits=waits_qkv,
                                epilogue=Epilogue.ROPE, norm=norm1, aux=("rope.cos", "rope.sin"),
                                out_bf16=True)
                    self.matvec(f"L{l}.v.g{g}", l, p + "self_attn.v_proj.weight", kvd, H, x_in, vc,
                                [(k0 + a, k0 + b) for a, b in seg(hd)], lambda r: pos * kvd + r,
                                signal=sig, waits=waits_qkv, norm=norm1, out_bf16=True)
                else:
                    for nm, buf in (("k", "buf.k"), ("v", "buf.v")):
                        self.matvec(f"L{l}.{nm}.g{g}", l, p + f"self_attn.{nm}_proj.weight", kvd, H, x_in,
                                    buf, [(k0 + a, k0 + b) for a, b in seg(hd)], lambda r: r,
                                    signal=sig, waits=waits_qkv)
                    half = hd // 2
                    for nm, buf, a, b in (("q", "buf.q", q0, q0 + gs * hd), ("k", "buf.k", k0, k0 + hd)):
                        self.add(Opcode.ROPE, f"L{l}.rope_{nm}.g{g}", layer=l, signal=f"L{l}.rope.g{g}",
                                 waits=[sig], tensors=[buf, None, None, None, None, "rope.cos", "rope.sin"],
                                 r0=a, r1=b, ints=[0, 0, hd, 0, pos, 0], act_bytes=(b - a) * 8 + hd * 4,
                                 flops=3 * (b - a),
                                 reads=[_rect(buf, a, b), _rows("rope.cos", pos, pos + 1, half),
                                        _rows("rope.sin", pos, pos + 1, half)],
                                 writes=[_rect(buf, a, b)])
                    self.add(Opcode.KV_APPEND, f"L{l}.kv_append.g{g}", layer=l, signal=f"L{l}.kv.g{g}",
                             waits=[f"L{l}.rope.g{g}"], tensors=["buf.k", "buf.v", kc, vc], r0=k0, r1=k0 + hd,
                             ints=[0, 0, hd, 0, pos, 0], hbm_bytes=2 * hd * 2, act_bytes=2 * hd * 4,
                             reads=[_rect("buf.k", k0, k0 + hd), _rect("buf.v", k0, k0 + hd)],
                             writes=[(kc, pos, pos + 1, k0, k0 + hd), (vc, pos, pos + 1, k0, k0 + hd)])
            # attention partials over cache slices, then one reduction per group
            for g in range(nkv):
                wait = f"L{l}.qkv.g{g}" if fuse else f"L{l}.kv.g{g}"
                h0, h1 = g * gs, (g + 1) * gs
                for si, (t0, t1) in enumerate(splits):
                    n = t1 - t0
                    reads = [_rect("buf.q", h0 * hd, h1 * hd), (kc, t0, t1, g * hd, (g + 1) * hd),
                             (vc, t0, t1, g * hd, (g + 1) * hd)]
                    if fuse:
                        reads += [_rows("rope.cos", pos, pos + 1, hd // 2), _rows("rope.sin", pos, pos + 1, hd // 2)]
                    self.add(Opcode.ATTN_PARTIAL, f"L{l}.attn.g{g}.s{si}[{t0}:{t1}]", layer=l,
                             signal=f"L{l}.attn.g{g}", waits=[wait],
                             tensors=["buf.q", kc, vc, "buf.o_part", "buf.ml_part",
                                      "rope.cos" if fuse else None, "rope.sin" if fuse else None],
                             r0=t0, r1=t1, ints=[si, g, hd, gs, pos, S],
                             flags=Flag.ROPE_Q if fuse else Flag.NONE, f0=1.0 / math.sqrt(hd),
                             hbm_bytes=n * kv_row_bytes, act_bytes=gs * hd * 4 + gs * (hd + 2) * 4,
                             flops=4 * gs * n * hd, reads=reads,
                             writes=[("buf.o_part", h0, h1, si * hd, (si + 1) * hd),
                                     ("buf.ml_part", h0, h1, si * 2, si * 2 + 2)])
                self.add(Opcode.ATTN_REDUCE, f"L{l}.attn_reduce.g{g}", layer=l, signal=f"L{l}.attn_out",
                         waits=[f"L{l}.attn.g{g}"], tensors=["buf.o_part", "buf.ml_part", "buf.attn"],
                         r0=h0, r1=h1, ints=[S, g, hd, gs, pos, S],
                         act_bytes=gs * S * (hd + 2) * 4 + gs * hd * 4, flops=3 * gs * S * hd,
                         reads=[("buf.o_part", h0, h1, 0, S * hd), ("buf.ml_part", h0, h1, 0, S * 2)],
                         writes=[_rect("buf.attn", h0 * hd, h1 * hd)])
            # O projection (+ residual)
            ow = p + "self_attn.o_proj.weight"
            if fuse:
                self.matvec(f"L{l}.o", l, ow, H, qd, "buf.attn", "buf.h", self.weight_blocks(H, qd),
                            lambda r: r, signal=f"L{l}.o", waits=[f"L{l}.attn_out"],
                            epilogue=Epilogue.RESIDUAL_ADD)
                mlp_x, norm2, mlp_wait = "buf.h", p + "post_attention_layernorm.weight", f"L{l}.o"
            else:
                self.matvec(f"L{l}.o", l, ow, H, qd, "buf.attn", "buf.tmp", self.weight_blocks(H, qd),
                            lambda r: r, signal=f"L{l}.o_mm", waits=[f"L{l}.attn_out"])
                self._residual(f"L{l}.res_attn", l, f"L{l}.o", f"L{l}.o_mm")
                self.add(Opcode.RMSNORM, f"L{l}.norm2", layer=l, signal=f"L{l}.norm2", waits=[f"L{l}.o"],
                         tensors=["buf.h", None, "buf.xn", p + "post_attention_layernorm.weight"], r0=0, r1=H,
                         ints=[H], f0=c.rms_norm_eps, act_bytes=H * 4 * 2 + H * 2, flops=4 * H,
                         reads=[_rect("buf.h", 0, H), _rect(p + "post_attention_layernorm.weight", 0, H)],
                         writes=[_rect("buf.xn", 0, H)])
                mlp_x, norm2, mlp_wait = "buf.xn", None, f"L{l}.norm2"
            # gate/up with SiLU * mul
            self.matvec(f"L{l}.gate_up", l, p + "mlp.gate_proj.weight", I, H, mlp_x, "buf.act",
                        self.weight_blocks(I, H, 2), lambda r: r, signal=f"L{l}.act", waits=[mlp_wait],
                        epilogue=Epilogue.SILU_MUL, norm=norm2, up=p + "mlp.up_proj.weight")
            dw = p + "mlp.down_proj.weight"
            if fuse:
                self.matvec(f"L{l}.down", l, dw, H, I, "buf.act", "buf.h", self.weight_blocks(H, I),
                            lambda r: r, signal=f"L{l}.down", waits=[f"L{l}.act"],
                            epilogue=Epilogue.RESIDUAL_ADD)
            else:
                self.matvec(f"L{l}.down", l, dw, H, I, "buf.act", "buf.tmp", self.weight_blocks(H, I),
                            lambda r: r, signal=f"L{l}.down_mm", waits=[f"L{l}.act"])
                self._residual(f"L{l}.res_mlp", l, f"L{l}.down", f"L{l}.down_mm")
            resid = f"L{l}.down"

        # final norm + LM head + argmax
        lm = c.lm_head_name()
        blocks = self.weight_blocks(c.vocab_size, H)
        self.n_argmax_slots = len(blocks)
        V("buf.amax_val", 1, len(blocks)); V("buf.amax_idx", 1, len(blocks))
        if fuse:
            self.matvec("lm_head", -1, lm, c.vocab_size, H, "buf.h", "buf.logits", blocks, lambda r: r,
                        signal="lm_head", waits=[resid], norm="model.norm.weight",
                        aux=("buf.amax_val", "buf.amax_idx"), argmax_slot0=0)
        else:
            self.add(Opcode.RMSNORM, "final_norm", signal="final_norm", waits=[resid],
                     tensors=["buf.h", None, "buf.xn", "model.norm.weight"], r0=0, r1=H, ints=[H],
                     f0=c.rms_norm_eps, act_bytes=H * 10, flops=4 * H,
                     reads=[_rect("buf.h", 0, H), _rect("model.norm.weight", 0, H)],
                     writes=[_rect("buf.xn", 0, H)])
            for i, (r0, r1) in enumerate(blocks):
                self.matvec(f"lm_head.{i}", -1, lm, c.vocab_size, H, "buf.xn", "buf.logits", [(r0, r1)],
                            lambda r: r, signal=f"lm_head.{i}", waits=["final_norm"])
                self.add(Opcode.ARGMAX_PARTIAL, f"argmax.{i}[{r0}:{r1}]", signal="lm_head",
                         waits=[f"lm_head.{i}"],
                         tensors=["buf.logits", None, None, None, None, "buf.amax_val", "buf.amax_idx"],
                         r0=r0, r1=r1, ints=[0, 0, 0, i, 0, 0], act_bytes=(r1 - r0) * 4 + 8,
                         flops=r1 - r0, reads=[_rect("buf.logits", r0, r1)],
                         writes=[_rect("buf.amax_val", i, i + 1), _rect("buf.amax_idx", i, i + 1)])
        n = len(blocks)
        self.add(Opcode.ARGMAX_REDUCE, "argmax_reduce", signal="token", waits=["lm_head"],
                 tensors=[None, None, "out.token", None, None, "buf.amax_val", "buf.amax_idx"],
                 r0=0, r1=n, ints=[0], act_bytes=n * 8 + 4, flops=n,
                 reads=[_rect("buf.amax_val", 0, n), _rect("buf.amax_idx", 0, n)],
                 writes=[_rect("out.token", 0, 1)])
        if self.with_edges:
            self.g.add_edges_from(self.edges)
        self.g.graph.update(cfg=c, hw=hw, pos=pos, token=self.token, fuse=fuse, n_splits=S,
                            n_argmax_slots=self.n_argmax_slots, tensor_views=dict(self.views),
                            producers={k: list(v) for k, v in self.producers.items()})
        return self.g

    def _residual(self, label: str, layer: int, signal: str, wait: str) -> None:
        H = self.cfg.hidden_size
        for a, b in split_even(H, 4, ROW_GRANULE):
            self.add(Opcode.RESIDUAL_ADD, f"{label}[{a}:{b}]", layer=layer, signal=signal, waits=[wait],
                     tensors=["buf.tmp", None, "buf.h"], r0=a, r1=b, act_bytes=(b - a) * 12,
                     flops=b - a, reads=[_rect("buf.tmp", a, b), _rect("buf.h", a, b)],
                     writes=[_rect("buf.h", a, b)])


def build_dag(cfg, arch, *, pos: int, token: int = 0, fuse: bool = True, edges: bool = True) -> nx.DiGraph:
    """The decode-step DAG at position ``pos`` (0-based: the cache holds ``pos`` entries).

    ``edges=False`` leaves the (dense: every matvec block needs every block of the
    previous operator) edges out of the networkx graph; the dependencies stay in the
    node attributes and ``graph["producers"]`` (see ``dep_groups``), which is all the
    scheduler, checker and latency model read. ``materialize_edges`` adds them later.
    For Llama-3.2-1B that is ~3.8M edges and most of the planning time.
    """
    hw = HwFigures.of(arch)
    if not 0 <= pos < cfg.max_seq_len:
        raise PorterError(f"model {cfg.name}: pos {pos} outside the KV cache [0, {cfg.max_seq_len}); "
                          f"raise max_seq_len in its YAML or pick a smaller pos")
    if not 0 <= token < cfg.vocab_size:
        raise PorterError(f"model {cfg.name}: token {token} outside the vocabulary [0, {cfg.vocab_size})")
    return _Builder(cfg, hw, pos, token, fuse, edges).build()


def materialize_edges(g: nx.DiGraph) -> nx.DiGraph:
    """Add the explicit dependency edges of a ``build_dag(..., edges=False)`` graph (in place)."""
    producers = g.graph["producers"]
    g.add_edges_from((p, n) for n, d in g.nodes(data=True) for k in d["waits"] for p in producers[k])
    return g


def dep_groups(g: nx.DiGraph) -> tuple[dict, dict]:
    """(producers, waits): group key -> producer node ids, node -> group keys it waits on.

    For a DAG from ``build_dag`` the groups are its counters: equivalent to the edges
    (p -> n for p in producers[k], k in waits[n]) but linear in size, so big models are
    scheduled and checked through it. Any other DiGraph gets one group per node.
    """
    prods = g.graph.get("producers")
    if prods is not None and all("waits" in d for d in g.nodes.values()):
        return prods, {n: d["waits"] for n, d in g.nodes(data=True)}
    producers = {("node", n): [n] for n in g.nodes}
    return producers, {n: [("node", p) for p in g.predecessors(n)] for n in g.nodes}


def dag_totals(g: nx.DiGraph) -> dict:
    nodes = g.nodes.values()
    return {
        "instructions": g.number_of_nodes(),
        "edges": g.number_of_edges(),
        "hbm_bytes": sum(d["hbm_bytes"] for d in nodes),
        "bytes": sum(d["bytes"] for d in nodes),
        "flops": sum(d["flops"] for d in nodes),
    }
