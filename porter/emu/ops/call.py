"""``call``: of a ``.func`` defined in the module (linked by ``porter.emu.link``; run by
``porter.emu.ops.func_call``), and of the CUDA device runtime: ``vprintf`` (what ``printf``
compiles to) and ``__assertfail`` (what a failing device ``assert`` calls), both executed
natively. ``vprintf``: each executing lane's format string
(a generic address, read from global memory) is recorded in ``sched.printf`` (with the CTA
and warp) and the call returns 0. ``__assertfail(message, file, line, function, char size)``:
the run stops with the assertion's text, file and line (the device runtime prints them and
traps, PTX ISA 9.7.19.4 "trap"); a kernel compiled with asserts that never fail runs as
before. Any other callee is ``Unsupported``."""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.errors import CheckFailed


def _c_string(gmem, addr: int, limit: int = 4096) -> str:
    text = b""
    while len(text) < limit:
        c = bytes(gmem.read(addr + len(text), 1))
        if c == b"\0":
            break
        text += c
    return text.decode(errors="replace")


def _build_assertfail(ins, d):
    rets, fn, args = ins.operands
    if len(args.items) != 5:
        raise d.unsupported("(__assertfail takes (message, file, line, function, char size))")
    rmsg, rfile, rline = d.src(args.items[0], "u64"), d.src(args.items[1], "u64"), d.src(args.items[2], "u32")
    rfunc = d.src(args.items[3], "u64")
    where = d.where(ins)

    def assertfail(w, m):
        sel = w.live if m is None else m
        lane = int(np.argmax(sel))
        gmem = w.cta.launch.gmem

        def at(r):
            return int(np.broadcast_to(np.asarray(r(w)), (32,))[lane])
        raise CheckFailed(f"{where}: {w.name} lane {lane}: device assertion failed: `{_c_string(gmem, at(rmsg))}` "
                          f"at {_c_string(gmem, at(rfile))}:{at(rline)} in {_c_string(gmem, at(rfunc))} (the "
                          "device runtime aborts the kernel)")
    return assertfail


def build_call(ins, d):
    rets, fn, args = ins.operands[:3]
    linked = getattr(d.kernel, "link", None)
    if linked is not None and isinstance(fn, ptx.Sym) and fn.name in linked.funcs:
        from porter.emu.ops.func_call import build_func_call
        return build_func_call(ins, d)
    if isinstance(fn, ptx.Reg) and linked is not None:
        from porter.emu.ops.func_call import build_indirect_call
        return build_indirect_call(ins, d)
    if isinstance(fn, ptx.Reg):
        raise d.unsupported(f"(an indirect call through {fn.name} in a module whose kernel takes the address of no "
                            ".func)")
    if isinstance(fn, ptx.Sym) and fn.name == "__assertfail":
        return _build_assertfail(ins, d)
    if not isinstance(fn, ptx.Sym) or fn.name != "vprintf":
        raise d.unsupported(f"(call of {getattr(fn, 'name', fn)!r}: only vprintf and __assertfail are simulated)")
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
            log.append(f"{where}: {w.name} lane {int(lane)}: {_c_string(gmem, int(fmts[lane]))}")
        if wret is not None:
            wret(w, np.zeros(32, dtype=np.uint32), m)
    return call


build_call.n_dst = 0

def _in_func(ins) -> bool:
    return getattr(ins, "func", None) is not None


def _build_func_ret(ins, d):
    from porter.emu.ops.func_call import build_func_ret
    return build_func_ret(ins, d)


def _build_end(ins, d):
    from porter.emu.ops.func_call import build_end
    return build_end(ins, d)


_build_func_ret.n_dst = 0
_build_end.n_dst = 0

BUILDERS = {"call": build_call, "end#": _build_end}
# ``ret`` inside a linked .func returns to its caller (not an exit of the lanes)
def _param_bytes(ins) -> bool:
    return getattr(ins, "param_bytes", False)


def _build_ld_param_bytes(ins, d):
    from porter.emu.ops.func_call import build_ld_param_bytes
    return build_ld_param_bytes(ins, d)


def _build_st_param_bytes(ins, d):
    from porter.emu.ops.func_call import build_st_param_bytes
    return build_st_param_bytes(ins, d)


_build_st_param_bytes.n_dst = 0

FORMS = [("ret", _in_func, _build_func_ret),
         # ld.param / st.param on a by-value aggregate slot (its bytes are b8 registers: ptx.py)
         ("ld", _param_bytes, _build_ld_param_bytes), ("st", _param_bytes, _build_st_param_bytes)]
