"""``mapa`` and ``getctarank`` on generic addresses (PTX ISA 9.7.9 "mapa", "getctarank":
without ``.shared::cluster`` both take a register holding a generic address that points to
shared memory; ``mapa`` returns the generic address of the same location in CTA ``b``).

The simulator's generic window for shared memory is ``SHARED_GENERIC + (rank << 24 | offset)``
(porter.emu.memory): the shared::cluster address of a location plus the window's base, so
mapping a generic address replaces the same rank bits the shared::cluster form replaces, and
a generic load or store through the result reaches the peer CTA (cooperative groups'
``cluster.map_shared_rank`` and hand-written ``mapa.u64`` helpers dereference it that way).
A generic address outside the shared window is outside what the ISA defines for these
instructions: an error naming the lane and the section.

``mapa.u32`` / ``getctarank.u32`` without a space take a 32-bit generic address; in a
``.address_size 64`` module no 32-bit value lies in the shared window, so those forms are
refused in one line rather than given a meaning.
"""

from __future__ import annotations

import numpy as np

from porter.emu import memory as mem
from porter.emu.errors import CheckFailed

_LO = np.uint64(mem.SHARED_GENERIC)
_HI = np.uint64(mem.SHARED_GENERIC + mem.WINDOW)


def _is_generic(ins) -> bool:
    return not any(p.startswith("shared") for p in ins.parts[1:])


def _window_offsets(w, m, a, where: str, what: str) -> np.ndarray:
    """The lanes' generic addresses as shared::cluster addresses (checked in the window)."""
    a = np.broadcast_to(np.asarray(a).astype(np.uint64), (32,))
    sel = w.live if m is None else m
    bad = sel & ((a < _LO) | (a >= _HI))
    if bad.any():
        lane = int(np.argmax(bad))
        raise CheckFailed(f"{where}: {what} of generic address 0x{int(a[lane]):x} (lane {lane}), which is not in "
                          "the shared window")
    return (a - _LO).astype(np.int64)


def _refuse_u32(ins, d) -> None:
    if ins.parts[-1] != "u64":
        raise d.unsupported("(a generic address is 64 bits in a .address_size 64 module: use .u64, or "
                            ".shared::cluster with a 32-bit shared address)")


def build_mapa_generic(ins, d):
    _refuse_u32(ins, d)
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, "u64"), d.src(b, "u32"), d.dst(dst, "u64")
    where = d.where(ins)

    def mapa(w, m):
        off = _window_offsets(w, m, ra(w), where, "mapa")
        rank = np.broadcast_to(np.asarray(rb(w)).astype(np.int64), (32,))
        n = len(w.cta.cluster.ctas)
        sel = w.live if m is None else m
        if (rank[sel] >= n).any():
            raise CheckFailed(f"{where}: mapa to CTA rank {int(rank[sel].max())} of a {n}-CTA cluster")
        out = (rank << mem.RANK_SHIFT) | (off & mem.OFFSET_MASK)
        wd(w, out.astype(np.uint64) + _LO, m)
    return mapa


def build_getctarank_generic(ins, d):
    _refuse_u32(ins, d)
    dst, a = ins.operands
    ra, wd = d.src(a, "u64"), d.dst(dst, "u32")
    where = d.where(ins)

    def getctarank(w, m):
        off = _window_offsets(w, m, ra(w), where, "getctarank")
        wd(w, ((off >> mem.RANK_SHIFT) & mem.RANK_MASK).astype(np.uint32), m)
    return getctarank


build_mapa_generic.n_dst = 1
build_getctarank_generic.n_dst = 1

FORMS = [("mapa", _is_generic, build_mapa_generic), ("getctarank", _is_generic, build_getctarank_generic)]
