"""What a decoded instruction returns to the warp's stepper besides None (fall through)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class _Signal:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


HANDLED = _Signal("HANDLED")     # the instruction set the lanes' pcs itself (divergent branch, exit)
DEFER = _Signal("DEFER")         # a warp-collective met a diverged warp: run the other lanes first


@dataclass
class Park:
    """Stop the warp until ``ready()``; ``advance``: the instruction is done (an arrive
    that now waits) rather than one to run again on wake (a try_wait)."""
    ready: Callable[[], bool]
    describe: Callable[[], str]
    advance: bool = False
    wake_ns: int | None = None   # a timed park (nanosleep): ready once virtual time reaches it
