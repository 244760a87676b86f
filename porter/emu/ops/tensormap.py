"""Tensor maps rewritten on the device: ``tensormap.replace`` and ``tensormap.cp_fenceproxy``
(PTX ISA 9.0: 9.7.9.28 "tensormap.replace", 9.7.13.15 "tensormap.cp_fenceproxy"; grouped and
MoE GEMMs (CUTLASS's grouped kernels, DeepGEMM) copy a map into shared memory, replace its
global address, dims and strides per group, and publish it to global memory for their TMA).

``tensormap.replace.tile.field{.ss}.b1024.type [addr], {ord,} new_val`` edits one field of
the 128-byte map at ``addr`` (shared::cta, global or generic): ``.global_address`` and
``.rank`` (new_val = rank - 1), ``.box_dim`` / ``.global_dim`` / ``.global_stride`` /
``.element_stride`` at ordinal ``ord`` (``global_stride`` ord i is the stride of dimension
i + 1, the driver API's ``globalStrides[i]``), and ``.elemtype`` / ``.swizzle_mode`` /
``.fill_mode`` / ``.interleave_layout`` / ``.swizzle_atomicity`` from the immediate codes of
the ISA's Table 33 (whose .elemtype codes are not the driver enum's). The maps are porter's
emulated layout (``porter.emu.units.tma``); a field is written as it is and the map is
checked only where a TMA uses it (a kernel may pass through an invalid map while it
replaces several fields). ``tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic
.release.{cta,cluster,gpu,sys}.sync.aligned [dst], [src], 128`` copies the map to global
memory; ``fence.proxy.tensormap::generic`` orders nothing more in this sequentially
consistent machine (``ops.sync`` takes it as a fence).
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from porter.emu import ptx
from porter.emu.errors import CheckFailed, EmuError
from porter.emu.units import tma as tma_unit

# Table 33: the .field3 immediates -> porter's names (the tensor map's data types, swizzles, fills)
_ELEMTYPE = ("UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32", "FLOAT32_FTZ",
             "FLOAT64", "BFLOAT16", "TFLOAT32", "TFLOAT32_FTZ")
_SWIZZLE = ("NONE", "32B", "64B", "128B")
_FILL = ("NONE", "NAN_REQUEST_ZERO_FMA")
_FIELDS1 = ("global_address", "rank")
_FIELDS2 = ("box_dim", "global_dim", "global_stride", "element_stride")
_FIELDS3 = ("elemtype", "interleave_layout", "swizzle_mode", "swizzle_atomicity", "fill_mode")
_HEAD = len(tma_unit.MAGIC)


def _unpack(raw: bytes, where: str) -> list:
    if not any(raw):
        # 128 zero bytes: a map built on the device from nothing (Triton's device-side tensor
        # descriptors zero a 128-byte shared buffer, then tensormap.replace every field). Every
        # field reads as its zero code (PTX ISA 9.7.9.28, Table 33: elemtype 0 = .u8, swizzle 0 =
        # none, fill 0 = none, interleave 0 = none); fields never replaced stay zero and a TMA
        # that uses such a map is checked as any other map is.
        return [0] * len(tma_unit._BODY.unpack(bytes(tma_unit._BODY.size)))
    if raw[:_HEAD] != tma_unit.MAGIC:
        raise EmuError(f"{where}: the 128 bytes tensormap.replace edits are not a map from porter's emulated host "
                       "(a real driver CUtensorMap, or the wrong address)")
    (crc,) = struct.unpack_from("<I", raw, tma_unit.MAP_BYTES - 4)
    if zlib.crc32(raw[:tma_unit.MAP_BYTES - 4]) != crc:
        raise EmuError(f"{where}: tensor map bytes are corrupted (checksum mismatch): the map was overwritten")
    return list(tma_unit._BODY.unpack_from(raw, _HEAD))


def _pack(fields: list) -> bytes:
    head = tma_unit.MAGIC + tma_unit._BODY.pack(*fields)
    return head + struct.pack("<I", zlib.crc32(head))


def _replace(fields: list, field: str, ord_: int | None, value: int, where: str) -> list:
    """The map's fields (the _BODY layout: address, type, rank, swizzle, fill, l2, dims[5],
    strides[4], box[5], element strides[5]) with ``field`` replaced."""
    f = list(fields)
    dims, strides, box, estr = 6, 11, 15, 20
    if field == "global_address":
        f[0] = value & (2 ** 64 - 1)
    elif field == "rank":
        if not 0 <= value < tma_unit.MAX_RANK:
            raise CheckFailed(f"{where}: tensormap.replace .rank {value} (rank - 1) is outside 0..4")
        f[2] = value + 1
    elif field in _FIELDS2:
        limit = 4 if field == "global_stride" else 5
        if not 0 <= ord_ < limit:
            raise CheckFailed(f"{where}: tensormap.replace .{field} ordinal {ord_} is outside the tensor's rank")
        base = {"box_dim": box, "global_dim": dims, "global_stride": strides, "element_stride": estr}[field]
        f[base + ord_] = value
    elif field == "elemtype":
        if value >= len(_ELEMTYPE):
            raise EmuError(f"{where}: tensormap.replace .elemtype {value}: the sub-byte types (13-15) are outside "
                           "the simulator's tensor maps")
        f[1] = list(tma_unit.DATA_TYPES).index(_ELEMTYPE[value])
    elif field == "swizzle_mode":
        if value >= len(_SWIZZLE):
            raise EmuError(f"{where}: tensormap.replace .swizzle_mode {value} (96B, sm_103a) is outside the "
                           "simulator's tensor maps")
        new = _SWIZZLE[value]
        if tma_unit.SWIZZLES[f[3]] == "128B_ATOM_32B":     # the atomicity field is kept
            if new != "128B":
                raise EmuError(f"{where}: tensormap.replace .swizzle_mode {new} on a map with 32-byte swizzle "
                               "atomicity: only the 128B swizzle with 32-byte atomicity is in the simulator's tensor maps")
            new = "128B_ATOM_32B"
        f[3] = tma_unit.SWIZZLES.index(new)
    elif field == "fill_mode":
        if value >= len(_FILL):
            raise CheckFailed(f"{where}: tensormap.replace .fill_mode {value} is not a Table 33 code")
        f[4] = tma_unit.OOB_FILLS.index(_FILL[value])
    elif field == "swizzle_atomicity":       # Table 33: 0 16B, 1 32B, 2 32B with 8B flip, 3 64B
        cur = tma_unit.SWIZZLES[f[3]]
        if value == 0:
            f[3] = tma_unit.SWIZZLES.index("128B" if cur == "128B_ATOM_32B" else cur)
        elif value == 1 and cur in ("128B", "128B_ATOM_32B"):
            f[3] = tma_unit.SWIZZLES.index("128B_ATOM_32B")
        else:
            raise EmuError(f"{where}: tensormap.replace .swizzle_atomicity {value} with the {cur} swizzle: only "
                           "16-byte atomicity, and 32-byte atomicity with the 128B swizzle, are in the simulator's tensor maps")
    elif field == "interleave_layout":
        if value != 0:
            raise EmuError(f"{where}: tensormap.replace .{field} {value}: only the default (0) is in the "
                           "simulator's tensor maps")
    return f


def build_tensormap(ins, d):
    parts = ins.parts
    kind = parts[1]
    if kind == "replace":
        return _build_replace(ins, d)
    if kind == "cp_fenceproxy":
        return _build_cp_fenceproxy(ins, d)
    raise d.unsupported()


build_tensormap.n_dst = 0


def _space(parts):
    if "shared::cta" in parts or "shared" in parts:
        return "shared"
    if "global" in parts:
        return "global"
    return "generic"


def _build_replace(ins, d):
    from porter.emu.ops.memory import _resolve

    parts = ins.parts
    if len(parts) < 3 or parts[2] != "tile" or "b1024" not in parts:
        raise d.unsupported("(tensormap.replace.tile.field{.ss}.b1024.type)")
    field = next((p for p in parts if p in _FIELDS1 + _FIELDS2 + _FIELDS3), None)
    if field is None:
        raise d.unsupported("(an unknown tensor-map field)")
    t = parts[-1]
    want = "b64" if field in ("global_address", "global_stride") else "b32"
    where = d.where(ins)
    if t != want:
        raise d.unsupported(f"(.{field} takes a .{want} value: the ISA's rule for tensormap.replace)")
    ops = ins.operands
    space = _space(parts)
    addr_fn, sym_space = d.addr(ops[0], space)
    if sym_space is not None and space == "generic":
        space = sym_space
    ord_ = None
    if field in _FIELDS2:
        if len(ops) != 3 or not isinstance(ops[1], ptx.Imm):
            raise d.unsupported(f"(.{field} [addr], ord, new_val with an immediate ordinal)")
        ord_ = int(ops[1].value)
    elif len(ops) != 2:
        raise d.unsupported("([addr], new_val)")
    if field in _FIELDS3 and not isinstance(ops[-1], ptx.Imm):
        raise d.unsupported(f"(.{field}: new_val must be an immediate, as the ISA requires)")
    rval = d.src(ops[-1], "u64" if want == "b64" else "u32")
    what = f"tensormap.replace ({ins.opcode})"

    def replace(w, m):
        sel = w.live if m is None else m
        addrs = np.asarray(addr_fn(w))[sel]
        vals = np.broadcast_to(np.asarray(rval(w)), (32,))[sel]
        for a, v in zip(addrs, vals):
            if int(a) % 64:
                raise CheckFailed(f"{where}: misaligned tensor map: address 0x{int(a):x} is not 64-byte aligned "
                                  "(a tensor-map object is 128 bytes, 64-byte aligned)")
            buf, offs = _resolve(w, space, np.array([int(a)], np.int64), tma_unit.MAP_BYTES, what, write=True)
            off = int(offs[0])
            raw = bytes(buf[off:off + tma_unit.MAP_BYTES])
            new = _pack(_replace(_unpack(raw, where), field, ord_, int(v), where))
            buf[off:off + tma_unit.MAP_BYTES] = np.frombuffer(new, np.uint8)
    return replace


def _build_cp_fenceproxy(ins, d):
    from porter.emu.ops.memory import _resolve

    parts = ins.parts
    if "global" not in parts or "shared::cta" not in parts or parts.index("global") > parts.index("shared::cta"):
        raise d.unsupported("(tensormap.cp_fenceproxy.global.shared::cta...)")
    ops = ins.operands
    if len(ops) != 3:
        raise d.unsupported("([dst], [src], size)")
    dst_fn, _ = d.addr(ops[0], "global")
    src_fn, _ = d.addr(ops[1], "shared")
    rsize = d.src(ops[2], "u32")
    where = d.where(ins)
    what = f"tensormap.cp_fenceproxy ({ins.opcode})"

    def cp(w, m):
        sel = w.live if m is None else m
        dsts, srcs = np.asarray(dst_fn(w))[sel], np.asarray(src_fn(w))[sel]
        sizes = np.broadcast_to(np.asarray(rsize(w)), (32,))[sel]
        pairs = set()
        for dst, src, size in zip(dsts, srcs, sizes):
            if int(size) != tma_unit.MAP_BYTES:
                raise CheckFailed(f"{where}: tensormap.cp_fenceproxy size {int(size)}: the tensor map is 128 bytes "
                                  "(the ISA allows only 128)")
            pairs.add((int(dst), int(src)))
        if len(pairs) > 1:
            raise CheckFailed(f"{where}: tensormap.cp_fenceproxy operands differ across the warp's lanes "
                              "(.sync.aligned: every thread executes it with the same operands)")
        for dst, src in pairs:
            sbuf, soffs = _resolve(w, "shared", np.array([src], np.int64), tma_unit.MAP_BYTES, what)
            data = sbuf[int(soffs[0]):int(soffs[0]) + tma_unit.MAP_BYTES].copy()
            gbuf, goffs = _resolve(w, "global", np.array([dst], np.int64), tma_unit.MAP_BYTES, what, write=True)
            gbuf[int(goffs[0]):int(goffs[0]) + tma_unit.MAP_BYTES] = data
        return None
    return cp


BUILDERS = {"tensormap": build_tensormap}
FORMS: list = []
