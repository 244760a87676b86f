"""A by-value struct kernel parameter (``.param .align A .b8 p[N]``) built from fields, as
hand-written libraries pass them: ThunderKittens' ``globals`` and ``gl`` layouts, CUTLASS's
``Params``, DeepGEMM's argument blocks hold device pointers, tensor maps and scalars at fixed
offsets. The pointers and the maps' global addresses are known only once the arrays are on
the simulated device, so the bytes are packed at launch (``porter.emu.launch``).

``StructArg(size, {offset: field})``: a field is a numpy array (its device address, 8 bytes),
a ``TensorMapArg`` (the 128-byte map, 64-byte aligned), a numpy scalar (its own bytes) or raw
bytes. After the run each array field's contents come back in ``outputs[i][offset]``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from porter.emu.errors import EmuError


@dataclass
class StructArg:
    size: int
    fields: dict = field(default_factory=dict)      # byte offset -> array | TensorMapArg | np scalar | bytes

    def arrays(self):
        """(offset, numpy array) of each field whose contents are an output (arrays, map sources)."""
        from porter.emu.launch import TensorMapArg

        for off, v in sorted(self.fields.items()):
            src = v.source if isinstance(v, TensorMapArg) else v
            if isinstance(src, np.ndarray):
                yield off, src


def pack(arg: StructArg, where: str, device_copy, encode_map) -> bytes:
    """The struct's bytes: ``device_copy(array, offset)`` gives a Buffer (named by the field's
    offset), ``encode_map(map, buffer)`` the 128-byte map; overlapping or out-of-range fields are
    one EmuError naming them."""
    from porter.emu.launch import TensorMapArg

    out = bytearray(int(arg.size))
    taken: list[tuple[int, int]] = []
    for off, v in sorted(arg.fields.items()):
        off = int(off)
        if isinstance(v, TensorMapArg):
            if off % 64:
                raise EmuError(f"{where}: the tensor map at struct offset {off} must be 64-byte aligned")
            raw = encode_map(v, device_copy(v.source, off))
        elif isinstance(v, np.ndarray):
            if off % 8:
                raise EmuError(f"{where}: the pointer at struct offset {off} must be 8-byte aligned")
            raw = struct.pack("<Q", device_copy(v, off).ptr)
        elif isinstance(v, np.generic):
            raw = v.tobytes()
        elif isinstance(v, (bytes, bytearray)):
            raw = bytes(v)
        else:
            raise EmuError(f"{where}: struct field at offset {off} is a {type(v).__name__}; give a numpy array, "
                           "a tensor map, a numpy scalar (np.int32(7)) or bytes")
        end = off + len(raw)
        if off < 0 or end > len(out):
            raise EmuError(f"{where}: struct field at offset {off} ({len(raw)} B) runs past the {len(out)}-byte struct")
        for lo, hi in taken:
            if off < hi and lo < end:
                raise EmuError(f"{where}: struct fields at offsets {lo} and {off} overlap")
        taken.append((off, end))
        out[off:end] = raw
    return bytes(out)
