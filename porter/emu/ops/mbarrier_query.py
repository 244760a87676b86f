"""``mbarrier.pending_count.b64 count, state`` (PTX ISA 9.7.13.15.17) and the state token it
reads.

The token ``mbarrier.arrive`` returns is opaque in the ISA. The simulator's: bits 0-31 the
phase the arrive took part in (what ``test_wait`` / ``try_wait`` on a token compare, in
ops/sync.py), bits 32-51 the barrier's pending arrival count before the arrive (what
``pending_count`` returns, as the ISA defines it), bit 63 set when the arrive was
``.noComplete``. The ISA leaves ``pending_count`` of a state from any other arrive undefined,
and a ``.noComplete`` arrive that completes the phase undefined (9.7.13.15.13): both are
errors naming their section.
"""

from __future__ import annotations

import numpy as np

from porter.emu.errors import CheckFailed

PHASE_MASK = 0xFFFF_FFFF
_PENDING_SHIFT = 32
_PENDING_MASK = (1 << 20) - 1
_NO_COMPLETE = 1 << 63


def token(bar, no_complete: bool) -> int:
    """The state an arrive on ``bar`` returns, read before the arrive changes it."""
    return (bar.phase & PHASE_MASK) | (bar.pending << _PENDING_SHIFT) | (_NO_COMPLETE if no_complete else 0)


def tokens(bar, pending_before: np.ndarray) -> np.ndarray:
    """``token`` of arrives on ``bar`` (none .noComplete) in its current phase that saw these
    pending counts before them: uint64, one per arrive."""
    return (pending_before.astype(np.uint64) << np.uint64(_PENDING_SHIFT)) | np.uint64(bar.phase & PHASE_MASK)


def no_complete_completed(where: str, bar) -> None:
    raise CheckFailed(f"{where}: mbarrier.arrive.noComplete completed phase {bar.phase - 1} of the mbarrier at "
                      f"{bar.where} (its last pending arrival)")


def build_pending_count(ins, d):
    dst, state = ins.operands
    rs, wd = d.src(state, "b64"), d.dst(dst, "u32")
    where = d.where(ins)

    def pending_count(w, m):
        s = np.broadcast_to(np.asarray(rs(w)), (32,)).astype(np.uint64)
        sel = w.live if m is None else m
        bad = sel & ((s & np.uint64(_NO_COMPLETE)) == 0)
        if bad.any():
            lane = int(np.argmax(bad))
            raise CheckFailed(f"{where}: mbarrier.pending_count of state 0x{int(s[lane]):x} (lane {lane}), which no "
                              "mbarrier.arrive.noComplete / arrive_drop.noComplete returned")
        wd(w, ((s >> np.uint64(_PENDING_SHIFT)) & np.uint64(_PENDING_MASK)).astype(np.uint32), m)
    return pending_count


def _is_pending_count(ins) -> bool:
    return len(ins.parts) > 1 and ins.parts[1] == "pending_count"


FORMS = [("mbarrier", _is_pending_count, build_pending_count)]
