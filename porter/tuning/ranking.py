"""The middle stage of the search: order one bucket's compiled candidates before the few
best are emulated. A ranker is pluggable (``RANKERS``):

- ``L1`` (the default): the candidates L0 puts first in each bucket (and the default) are
  timed in porter's timed simulator (``porter.timing.l1``: the kernel's own PTX run on a
  reduced problem, its per-tile period measured, the schedule extrapolated); they rank by
  that. A candidate the timed simulation could not time (it failed its functional checks
  there) is not ranked. A family with no tiles to time (the megakernel's queue model is
  direct) has no L1: L0 ranks it, and the entry says so.
- ``L0``: porter's analytical model alone (a faster, coarser search).

A candidate is a dict with ``predictions`` (bucket -> L0) and, once timed, ``l1`` (bucket
-> L1) for one product.
"""

from __future__ import annotations

import json


def knob_order(knobs: dict) -> str:
    """A stable tie-break between equal predictions (same order on every machine)."""
    return json.dumps(knobs, sort_keys=True, default=str)


class L0Ranker:
    name = "L0"
    level = "L0"
    note = "ranked by L0 (porter's analytical timing model) only"

    def time(self, c: dict, bucket: str) -> float | None:
        p = c.get("predictions", {}).get(bucket)
        return p["time_us"] if p else None

    def rank(self, bucket: str, candidates: list[dict], default: dict | None = None) -> list[dict]:
        """``candidates`` this ranker can time at ``bucket``, fastest first; on a tie the
        default first (a change the model cannot tell apart buys nothing), then by knobs."""
        have = [c for c in candidates if self.time(c, bucket) is not None]
        return sorted(have, key=lambda c: (self.time(c, bucket), c["knobs"] != default, knob_order(c["knobs"])))


class L1Ranker(L0Ranker):
    name = "L1"
    level = "L1"
    note = ("screened by L0 (porter's analytical timing model), the top of each bucket ranked by L1 "
            "(each candidate's per-tile period measured in porter's timed simulator)")
    timed = True      # the sweep runs the l1 stage for this ranker

    def time(self, c: dict, bucket: str) -> float | None:
        p = (c.get("l1") or {}).get(bucket)
        return p["time_us"] if p else None


RANKERS = {"L1": L1Ranker, "L0": L0Ranker}


def make_ranker(name: str = "L1"):
    from porter.errors import PorterError

    if name not in RANKERS:
        raise PorterError(f"--rank {name!r}: known rankers: {', '.join(RANKERS)}")
    return RANKERS[name]()
