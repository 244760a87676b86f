"""Calls into the CUDA device runtime: ``call`` of ``vprintf`` (what ``printf`` compiles
to). The simulator runs no PTX functions; ``vprintf`` is executed natively: each
executing lane's format string (a generic address, read from global memory) is recorded
in ``sched.printf`` (with the CTA and warp) and the call returns 0. Any other callee is
``Unsupported``."""

from __future__ import annotations

import numpy as np

from porter.emu import ptx


def build_call(ins, d):
    rets, fn, args = ins.operands
    if not isinstance(fn, ptx.Sym) or fn.name != "vprintf":
        raise d.unsupported(f"(call of {getattr(fn, 'name', fn)!r}: only vprintf is simulated)")
    if len(args.items) != 2 or len(rets.items) > 1:
        raise d.unsupported("(vprintf takes (format, arguments) and returns one value)")
    rfmt = d.src(args.items[0], "u64")
    wret = d.dst(rets.items[0], "b32") if rets.items else None
    where = d.where(ins)

    def call(w, m):
        sel = w.live if m is None else m
        fmts = np.broadcast_to(np.asarray(rfmt(w)), (32,))
        log = w.sched.__dict__.setdefault("printf", [])
        gmem = w.cta.launch.gmem
        for lane in np.nonzero(sel)[0]:
            addr, text = int(fmts[lane]), b""
            while len(text) < 4096:
                c = bytes(gmem.read(addr + len(text), 1))
                if c == b"\0":
                    break
                text += c
            log.append(f"{where}: {w.name} lane {int(lane)}: {text.decode(errors='replace')}")
        if wret is not None:
            wret(w, np.zeros(32, dtype=np.uint32), m)
    return call


build_call.n_dst = 0

BUILDERS = {"call": build_call}
