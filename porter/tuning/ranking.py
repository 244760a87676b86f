"""The middle stage of the search: order the compiled candidates of one bucket before the
few best are emulated. A ranker is pluggable (``RANKERS``); the only one today is L0,
porter's analytical timing model. L1 (the simulator's timed mode, issue 16 item 3) is not
in porter yet, so until it lands the middle stage ranks by L0 alone and says so: the
candidates it keeps are the ones L0 puts first, not ones a timed simulation confirmed.
"""

from __future__ import annotations

import json


def knob_order(knobs: dict) -> str:
    """A stable tie-break between equal predictions (same order on every machine)."""
    return json.dumps(knobs, sort_keys=True, default=str)


class L0Ranker:
    name = "L0"
    note = ("ranked by L0 only (porter's analytical timing model); L1, the timed simulation, "
            "is not in porter yet and will replace this stage when it lands")

    def rank(self, bucket: str, candidates: list[dict], default: dict | None = None) -> list[dict]:
        """``candidates`` with a prediction for ``bucket``, fastest first; on a tie the
        default first (a change the model cannot tell apart buys nothing), then by knobs."""
        have = [c for c in candidates if bucket in c.get("predictions", {})]
        return sorted(have, key=lambda c: (c["predictions"][bucket]["time_us"], c["knobs"] != default,
                                           knob_order(c["knobs"])))


RANKERS = {"L0": L0Ranker}


def make_ranker(name: str = "L0"):
    from porter.errors import PorterError

    if name not in RANKERS:
        raise PorterError(f"--rank {name!r}: known rankers: {', '.join(RANKERS)} (L1 is not in porter yet)")
    return RANKERS[name]()
