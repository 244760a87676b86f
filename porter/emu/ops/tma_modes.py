"""TMA load modes beside ``.tile``: ``.tile::gather4`` (PTX ISA 9.7.9.27.1.2
"cp.async.bulk.tensor", load mode "tile::gather4", sm_100a+):

``cp.async.bulk.tensor.2d.shared::{cta,cluster}.global.tile::gather4.mbarrier::complete_tx::bytes
[dst], [tensorMap, {col, row0, row1, row2, row3}], [mbar]{, ctaMask}`` loads four rows of a 2-D
tensor, each ``boxDim[0]`` elements from column ``col``, from the four row coordinates given
(the ISA's coordinate order {x, y0, y1, y2, y3}), and lands them in shared memory as a box of
four rows, swizzled by the destination's address bits as a tile box is, out-of-bounds elements
filled as the map says. It completes 4 x boxDim[0] x element-size bytes on the mbarrier. The
gathered rows are read at issue and land later through the same engine as a tile load
(ops/tma.py), multicast to ctaMask's CTAs when given.

``.im2col`` loads need a map encoded for im2col (its pixel-box corners and channels per pixel),
which porter's emulated host (``emu.tensor_map``) does not encode: they stay refused in one line.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.errors import CheckFailed, Unsupported
from porter.emu.units import tma as tma_unit


def _gather4_box(tmap, col: int, rows, dst: int, gmem, where: str, read_spans) -> np.ndarray:
    if tmap.rank != 2:
        raise CheckFailed(f"{where}: .tile::gather4 with a rank-{tmap.rank} tensor map (the mode is 2-D only)")
    width = tma_unit.SWIZZLE_WIDTH[tmap.swizzle]
    row_bytes = tmap.box[0] * tmap.element_bytes
    if width and row_bytes != width:
        raise Unsupported(f"{where}: {tmap.swizzle} swizzle with a {row_bytes} B gathered row: only rows of exactly "
                          "the swizzle width are simulated")
    one = dataclasses.replace(tmap, box=(tmap.box[0], 1), element_strides=(1, 1), swizzle="NONE")
    data = np.concatenate([tma_unit.load_tile(one, (col, int(r)), gmem.read, dst & ~0x7F, where, read_spans)
                           for r in rows])
    if not width:
        return data
    landed = tma_unit._landed(dst, data.size, width, tma_unit.SWIZZLE_GRAIN.get(tmap.swizzle, 16))
    out = np.empty_like(data)
    out[landed] = data
    return out


def build_gather4(ins, d):
    from porter.emu.ops.tma import _destinations, _land, _span_reader, check_inflight

    parts = ins.parts
    ops = ins.operands
    where = d.where(ins)
    if "2d" not in parts or "global" not in parts or not any(p.startswith("shared") for p in parts):
        raise d.unsupported("(.tile::gather4 loads a 2-D tensor from global into shared memory)")
    multicast = "multicast::cluster" in parts
    tm = ops[1] if len(ops) > 1 else None
    if not isinstance(tm, ptx.TmaAddr) or len(tm.coords) != 5:
        raise d.unsupported("(.tile::gather4 expects [tensormap, {col, row0, row1, row2, row3}])")
    dst_fn, _ = d.addr(ops[0], "shared")
    map_fn, _ = d.addr(ptx.Addr(tm.map, 0), "generic")
    coord_fns = [d.src(c, "s32") for c in tm.coords]
    bar_fn, _ = d.addr(ops[2], "shared")
    mask_fn = d.src(ops[3], "u16") if multicast else None

    def gather4(w, m):
        from porter.emu.ops.tma import _read_map

        sel = w.live if m is None else m
        dsts, maps, bars = dst_fn(w), map_fn(w), bar_fn(w)
        coords = [np.broadcast_to(np.asarray(f(w)), (32,)) for f in coord_fns]
        masks = np.broadcast_to(np.asarray(mask_fn(w)), (32,)) if mask_fn is not None else None
        gmem = w.cta.launch.gmem
        for lane in np.nonzero(sel)[0]:
            tmap = _read_map(w, int(maps[lane]), where)
            dst = int(dsts[lane])
            c = [int(x[lane]) for x in coords]
            targets = _destinations(w, dst, int(bars[lane]), int(masks[lane]) if masks is not None else None, where)
            off = dst & mem.OFFSET_MASK
            if off % tma_unit.SMEM_ALIGN:
                raise CheckFailed(f"{where}: cp.async.bulk.tensor destination {off:#x} is not "
                                  f"{tma_unit.SMEM_ALIGN}-byte aligned")
            data = _gather4_box(tmap, c[0], c[1:], off, gmem, where, _span_reader(gmem))
            for cta, toff, _, _ in targets:
                cta.smem.check_span(toff, data.size, "TMA destination")
                check_inflight(cta, toff, int(data.size), f"{where}: TMA gather4 load")
            w.sched.counters["tma"] += 1
            w.sched.engine.submit(w.sched.round, _land(w, targets, data, f"{where}: TMA gather4 load"),
                                  f"TMA gather4 load {tuple(c)} -> 0x{dst:x}")
    return gather4


build_gather4.n_dst = 0


def _is_gather4(ins) -> bool:
    return "tensor" in ins.parts and "tile::gather4" in ins.parts


FORMS = [("cp", _is_gather4, build_gather4)]
