"""``mov.b128`` between a 128-bit register and its halves or quarters (PTX ISA 9.0, 9.7.9
"mov": ``mov.b128 d, {a, b}`` packs two .b64 (a in the low half), ``mov.b128 {a, b}, q``
unpacks, the same with four .b32; and a plain copy). Kernels that move 16-byte shared-memory
vectors as ``.b128`` (ThunderKittens, CUTLASS, DeepGEMM) split them this way; the plain
``mov`` builder stopped on the 128-bit type with a Python traceback.
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx

_V16 = np.dtype("V16")


def build_mov_b128(ins, d):
    dst, src = ins.operands
    if isinstance(dst, ptx.Vec) and isinstance(src, ptx.Vec):
        raise d.unsupported("(mov.b128 of two vectors)")
    if isinstance(dst, ptx.Vec):                                   # unpack
        n = len(dst.items)
        if n not in (2, 4):
            raise d.unsupported("(mov.b128 {a, b} or {a, b, c, d})")
        t = "b64" if n == 2 else "b32"
        rq = d.src(src, "b128")
        writers = [d.dst(x, t) if x is not ptx.SINK else None for x in dst.items]
        lane_dt = np.uint64 if n == 2 else np.uint32

        def unpack(w, m):
            q = np.ascontiguousarray(np.broadcast_to(np.asarray(rq(w)), (32,)))
            parts = q.view(lane_dt).reshape(32, n)
            for k, wr in enumerate(writers):
                if wr is not None:
                    wr(w, np.ascontiguousarray(parts[:, k]), m)
        return unpack
    if isinstance(src, ptx.Vec):                                   # pack
        n = len(src.items)
        if n not in (2, 4):
            raise d.unsupported("(mov.b128 d, {a, b} or {a, b, c, d})")
        t = "b64" if n == 2 else "b32"
        lane_dt = np.uint64 if n == 2 else np.uint32
        readers = [d.src(x, t) for x in src.items]
        wd = d.dst(dst, "b128")

        def pack(w, m):
            cols = np.stack([np.broadcast_to(np.asarray(r(w)), (32,)).astype(lane_dt) for r in readers], axis=1)
            wd(w, np.ascontiguousarray(cols).view(_V16).reshape(32), m)
        return pack
    rq, wd = d.src(src, "b128"), d.dst(dst, "b128")

    def copy(w, m):
        wd(w, np.ascontiguousarray(np.broadcast_to(np.asarray(rq(w)), (32,))), m)
    return copy


BUILDERS: dict = {}
FORMS = [("mov", lambda ins: ins.parts[-1] == "b128", build_mov_b128)]
