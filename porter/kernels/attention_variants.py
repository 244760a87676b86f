"""What the attention family and its mainloop modules share: the kernel signature, the
naming and the base configuration.

``porter.kernels.attention`` (the family) and the mainloops (``attention_wgmma``,
``attention_tcgen05``, ``attention_mma_sync``) import this module; it imports neither,
so the family's data flows one way.
"""

from __future__ import annotations

from typing import Any

FAMILY = "attention"

# The persistent tile walk (knob ``tile_order``, decode_tile in templates/attention.cu.j2;
# porter.timing.attention_model.tile_walk mirrors it). ``heads_inner`` (the default): Q tile
# outer from the last down, (batch, head) inner: a wave holds ~2 Q tiles of every head, so a
# shape whose heads' K/V exceed the L2 re-reads them from HBM every wave. ``q_inner``:
# (batch, head) outer, its Q tiles inner (rotated by the head's index, last-down in even
# heads and first-up in odd ones, for causal balance): a wave holds ~units / q_tiles heads,
# whose K/V stay in the L2.
TILE_ORDER = "heads_inner"
TILE_ORDERS = ("heads_inner", "q_inner")
TILE_ORDER_WHY = "heads_inner: Q tile outer, heads inner; q_inner: heads outer, each head's Q tiles inner"
TEMPLATE = "attention.cu.j2"
HEAD_DIMS = (64, 128)

# The kernel signature shared by every mainloop (order matters: the host launches
# with these positional arguments). TMA maps view q/k/v as 2-D (B*H*S, D) bf16.
# ``TmaDescriptor`` is a CUtensorMap (128 B) the template passes by value as
# ``const __grid_constant__`` (the convention of the GEMM family and porter.runtime).
PARAMS: tuple[tuple[str, str], ...] = (
    ("tma_q", "TmaDescriptor"),
    ("tma_k", "TmaDescriptor"),
    ("tma_v", "TmaDescriptor"),
    ("o", "__nv_bfloat16*"),
    ("lse", "float*"),
    ("batch", "int"),
    ("heads_q", "int"),
    ("heads_kv", "int"),
    ("seq_q", "int"),
    ("seq_k", "int"),
    ("softmax_scale_log2", "float"),
)

# With o_store=tma (a mainloop's knob) the kernel also takes the output's tensor map, after
# tma_v: O viewed as 3-D (D, Sq, B*Hq) bf16, so a box's rows stop at seq_q within a head.
O_MAP_PARAM = ("tma_o", "TmaDescriptor")


def params_with_o_map() -> list[list[str]]:
    """The kernel signature of a mainloop that stores O by TMA: PARAMS plus ``tma_o``."""
    out = [list(p) for p in PARAMS]
    at = next(i for i, (name, _) in enumerate(PARAMS) if name == "tma_v") + 1
    out.insert(at, list(O_MAP_PARAM))
    return out


def fit_o_slots(total, stages: int, want: int, budget: int, min_stages: int = 2) -> tuple[int, int | None]:
    """The o_store=tma staging boxes that fit beside ``stages`` K/V stages (``total(stages,
    slots)``: a mainloop's shared-memory bytes): up to ``want``, 0 when not even one does (the
    knob is then refused: the ring never costs the K/V ring a stage, which the timing model's
    L1 predicts loses ~48% at hd128); with 0, also the most stages one box fits beside (None
    if not even ``min_stages``), for the refusal's hint."""
    slots = want
    while slots and total(stages, slots) > budget:
        slots -= 1
    fewer = None if slots else next((n for n in range(stages - 1, min_stages - 1, -1) if total(n, 1) <= budget), None)
    return slots, fewer


def o_store_config(box_cols: int, box_rows: int, slots: int, box_bytes: int, barrier: int, staging_bytes: int,
                   in_q: bool = False) -> dict:
    """The config keys of an o_store=tma form: the signature with ``tma_o``, O's map box (64
    columns, 128B swizzle) and its staging ring (what the templates render from). ``in_q``:
    the boxes are staged in the Q buffer (``o_staging.in`` = ``q``, no bytes of their own;
    see o_staging_in_q), else in a ring of their own after the barriers (no ``in`` key)."""
    staging = {"slots": slots, "box_bytes": box_bytes, "box_cols": box_cols, "barrier": barrier,
               "bytes": 0 if in_q else staging_bytes}
    if in_q:
        staging["in"] = "q"     # (absent: the ring; the ring forms' configs are unchanged)
    return {"o_store": "tma", "params": params_with_o_map(),
            "o_map": {"box": [box_cols, box_rows], "swizzle": "128B"}, "o_staging": staging}


def o_staging_in_q(q_box_rows: int, box_rows: int, q_box_bytes: int, box_bytes: int) -> bool:
    """Whether a Q tile's buffer can hold its O boxes in place: each storing group's O box c
    is its own rows of Q box c (both 64 bf16 columns = one 128-byte row per query row in the
    128B swizzle, 1024-aligned, so the staging layout is the Q box's), which needs whole
    8-row swizzle atoms per group and groups that tile the Q box's rows. The layout o_store=tma
    takes where its ring does not fit beside the K/V stages: Q is dead once the tile's last
    S = Q K^T has completed, and the next Q tile's load then waits for the O stores' reads
    (attention/o_store_tma.cuh, kInQ)."""
    return (box_rows % 8 == 0 and q_box_rows % box_rows == 0 and box_bytes == box_rows * 128
            and q_box_bytes == q_box_rows * 128)


def o_store_entry_suffix(o_store: str) -> str:
    """``_o_tma`` for an o_store=tma form: its signature has tma_o, so it gets its own symbol
    (a module, a prepared manifest or a rehearsal driver that finds a kernel by its entry name
    never takes it for the default form, whose arguments differ)."""
    return "_o_tma" if o_store == "tma" else ""


def spec_name(head_dim: int, causal: bool, suffix: str = "") -> str:
    """``attention.hd64``, ``attention.hd128.causal``, plus e.g. ``.pair``."""
    return f"{FAMILY}.hd{head_dim}" + (".causal" if causal else "") + suffix


def variant_name(head_dim: int, causal: bool) -> str:
    """The user-facing variant: ``attention.bf16.hd64`` / ``attention.bf16.hd64.causal``."""
    return f"{FAMILY}.bf16.hd{head_dim}" + (".causal" if causal else "")


def entry_name(head_dim: int, causal: bool, mainloop: str, suffix: str = "") -> str:
    """The extern "C" __global__ name: unique per spec so SASS and resources are per kernel."""
    tag = suffix.strip(".").replace(".", "_")
    return f"attention_fwd_{mainloop}_hd{head_dim}" + ("_causal" if causal else "") + (f"_{tag}" if tag else "")


def base_config(arch, head_dim: int, causal: bool, mainloop: str) -> dict[str, Any]:
    """The config keys every mainloop shares; each mainloop adds its tiles and roles."""
    return {
        "mainloop": mainloop,          # selects templates/attention/<mainloop>.cu.j2
        "head_dim": head_dim,
        "causal": causal,
        "dtype": "bf16",
        "params": [list(p) for p in PARAMS],
        # Persistent grid over tiles = batch * heads_q * ceil(seq_q / block_m): the host
        # launches min(tiles, sm_count) CTAs, CTA c serving tiles c, c + grid, ...; a
        # CTA-pair spec (cluster of 2, config grid_ctas) launches 2 * min(tiles,
        # sm_count // 2) CTAs, pair c = blockIdx.x / 2 serving tiles c, c + grid / 2, ...
        "grid": "persistent",
        "sm_count": arch.sm_count,
    }
