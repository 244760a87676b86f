"""Local memory (PTX ISA 5.1.5 "Local State Space"): ``.local`` variables inside a kernel (the
``__local_depot`` stack frame NVCC emits for local arrays, ``printf`` arguments and spills),
``ld.local`` / ``st.local``, and ``cvta.local`` / ``cvta.to.local``.

Each thread has its own copy of the kernel's ``.local`` variables. The simulator lays them out
in one frame per thread (each variable at its alignment, in declaration order) and gives every
thread of a CTA its own frame in one buffer of the CTA: a thread's local address is
``thread * frame + offset`` (thread = warp * 32 + lane), so the lanes of a warp hold distinct
local addresses and one gather serves them all; the ISA leaves local addresses to the
implementation. A thread's access outside its own frame is an error (the variables of other
threads are not in its local space). The generic window for local memory starts at
``LOCAL_GENERIC`` (``cvta.local`` adds it; ``cvta.to.local`` checks and removes it), and a
generic load or store whose address lies there reaches the frames (``local_lanes``, from
ops/memory.py's generic resolution, which does not know the lanes: it checks each address
inside one frame of the executing warp). Local memory is private to its thread, so no race
checking applies.
"""

from __future__ import annotations

import numpy as np

from porter.emu.decode import NP, bits, type_of
from porter.emu.errors import CheckFailed

LOCAL_GENERIC = 0x4000_0000_0000
_LANES = np.arange(32, dtype=np.int64)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def frame_layout(kernel) -> tuple[dict, int]:
    """(variable -> offset in the frame, frame bytes, a multiple of 16) of a kernel, once."""
    got = getattr(kernel, "_local_frame", None)
    if got is None:
        offs, off = {}, 0
        for v in kernel.local:
            off = -(-off // max(v.align, 1)) * max(v.align, 1)
            offs[v.name] = off
            off += max(v.size, 1)
        got = kernel._local_frame = (offs, -(-off // 16) * 16)
    return got


def symbol_reader(kernel, name: str, t: str):
    """fn(warp) -> each lane's local address of variable ``name`` (as type ``t``), or None."""
    offs, frame = frame_layout(kernel)
    if name not in offs:
        return None
    off, dt = offs[name], NP[t]

    def read(w):
        return ((w.index * 32 + _LANES) * frame + off).astype(dt)
    return read


def _buffer(w, frame: int) -> np.ndarray:
    buf = w.cta.units.get("local")
    if buf is None:
        nthreads = -(-w.cta.nthreads // 32) * 32
        buf = w.cta.units["local"] = np.zeros(nthreads * frame + 16, dtype=np.uint8)
    return buf


_LO, _HI = np.uint64(LOCAL_GENERIC), np.uint64(LOCAL_GENERIC + (1 << 32))


def generic_local(a: np.ndarray) -> bool:
    """Every generic address of ``a`` (uint64) lies in the local window."""
    return not np.count_nonzero((a < _LO) | (a >= _HI))


def local_lanes(w, a: np.ndarray, nbytes: int, what: str):
    """(buffer, byte offsets) of generic local addresses, each inside one frame of the warp."""
    _, frame = frame_layout(w.prog.kernel)
    off = (a - _LO).astype(np.int64)
    lo = w.index * 32 * frame
    bad = (off < lo) | (off + nbytes > lo + 32 * frame) | (off // max(frame, 1) != (off + nbytes - 1) // max(frame, 1))
    if np.count_nonzero(bad):
        k = int(np.argmax(bad))
        raise CheckFailed(f"generic {what} of {nbytes} B at local address 0x{int(off[k]):x} is not inside that "
                          f"thread's own local frame (the frames of {w.name}: 0x{lo:x}..0x{lo + 32 * frame:x})")
    return _buffer(w, frame), off


def _offsets(w, addrs, sel, nbytes: int, frame: int, what: str) -> np.ndarray:
    """The selected lanes' local addresses, checked inside each lane's own frame and aligned."""
    a = np.broadcast_to(np.asarray(addrs), (32,)).astype(np.int64)[sel]
    lanes = _LANES[sel]
    lo = (w.index * 32 + lanes) * frame
    bad = (a < lo) | (a + nbytes > lo + frame) | ((a & (nbytes - 1)) != 0 if nbytes & (nbytes - 1) == 0 else False)
    if np.count_nonzero(bad):
        k = int(np.argmax(bad))
        raise CheckFailed(f"{what} of {nbytes} B at local address 0x{int(a[k]):x} (lane {int(lanes[k])}) is not "
                          f"inside that thread's own local frame 0x{int(lo[k]):x}..0x{int(lo[k]) + frame:x} or not "
                          "aligned to its size")
    return a


def _access(ins, d, addr_op, regs_op):
    from porter.emu import ptx
    t = type_of(ins.parts)
    nvec = next((int(p[1]) for p in ins.parts if p in ("v2", "v4", "v8")), 1)
    regs = regs_op.items if isinstance(regs_op, ptx.Vec) else (regs_op,)
    if len(regs) != nvec:
        raise d.unsupported("(vector width and register count differ)")
    addr_fn, _ = d.addr(addr_op, "local")
    _, frame = frame_layout(d.kernel)
    return t, nvec, max(bits(t) // 8, 1), addr_fn, regs, frame


def build_ld_local(ins, d):
    t, nvec, nbytes, addr_fn, regs, frame = _access(ins, d, ins.operands[1], ins.operands[0])
    writers = [d.dst(x, t) for x in regs]
    u, dt, total = _UINT[nbytes], NP[t], nbytes * nvec
    what = f"load ({ins.opcode})"
    where = d.where(ins)

    def ld_local(w, m):
        sel = w.live if m is None else m
        a = _offsets(w, addr_fn(w), sel, total, frame, f"{where}: {what}")
        buf = _buffer(w, frame)
        idx = a[:, None] + np.arange(total)
        raw = np.ascontiguousarray(buf[idx]).view(u)                      # (lanes, nvec)
        for k, wr in enumerate(writers):
            col = np.zeros(32, dtype=u)
            col[sel] = raw[:, k]
            wr(w, col.view(dt), m)
    return ld_local


def build_st_local(ins, d):
    t, nvec, nbytes, addr_fn, regs, frame = _access(ins, d, ins.operands[0], ins.operands[1])
    readers = [d.src(x, t) for x in regs]
    u, dt, total = _UINT[nbytes], NP[t], nbytes * nvec
    what = f"store ({ins.opcode})"
    where = d.where(ins)

    def st_local(w, m):
        sel = w.live if m is None else m
        a = _offsets(w, addr_fn(w), sel, total, frame, f"{where}: {what}")
        buf = _buffer(w, frame)
        vals = np.stack([np.broadcast_to(np.asarray(r(w), dtype=dt), (32,)).view(u) for r in readers], axis=1)[sel]
        idx = a[:, None] + np.arange(total)
        buf[idx] = np.ascontiguousarray(vals).view(np.uint8).reshape(len(a), total)
    return st_local


build_st_local.n_dst = 0


def build_cvta_local(ins, d):
    parts = ins.parts
    t = type_of(parts)
    to = parts[1] == "to"
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, t)
    base = np.uint64(LOCAL_GENERIC) if t.endswith("64") else np.uint64(LOCAL_GENERIC & 0xFFFFFFFF)
    where = d.where(ins)

    def cvta(w, m):
        v = np.broadcast_to(np.asarray(ra(w)), (32,)).astype(np.uint64)
        if to:
            sel = w.live if m is None else m
            if np.count_nonzero(sel & ((v < base) | (v >= base + np.uint64(1 << 32)))):
                raise CheckFailed(f"{where}: {ins.opcode} of an address outside the generic local window")
            r = v - base
        else:
            r = v + base
        wd(w, r.astype(NP[t]), m)
    return cvta


def _local(ins) -> bool:
    return "local" in ins.parts[1:3]


FORMS = [("ld", _local, build_ld_local), ("st", _local, build_st_local), ("cvta", _local, build_cvta_local)]
