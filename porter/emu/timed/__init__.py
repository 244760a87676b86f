"""The timed mode of porter's PTX simulator: the functional machine runs unchanged while
a model (``porter.emu.timed.model``) costs every issued instruction on one SM per CTA.

    with timed(params, expansion) as runs:
        emu.launch(...)            # or any launch path of porter.emu
    runs[0]["cycles"]

``params``: plain numbers (porter.timing.l1 takes them from the descriptor's perf:);
``expansion``: SASS instructions per PTX instruction family (porter.emu.timed.expansion).
Results are cycles of porter's timing model, not measurements.
"""

from __future__ import annotations

import contextlib

from porter.emu import machine

from .model import REQUIRED, TimedModel

__all__ = ["timed", "TimedModel", "REQUIRED"]


@contextlib.contextmanager
def timed(params: dict, expansion: dict | None = None, marks: tuple = ()):
    """Time every launch made inside the block; yields the list their results go to.
    ``marks``: PTX opcodes whose issue times each result lists (``result()["marks"]``)."""
    runs: list = []
    models: list = []
    previous = machine.TIMING_FACTORY

    def factory(sched):
        model = TimedModel(sched, params, expansion, marks)
        models.append(model)
        return model
    machine.TIMING_FACTORY = factory
    try:
        yield _Runs(runs, models)
    finally:
        machine.TIMING_FACTORY = previous


class _Runs(list):
    """The launches' results, each computed from its model when first read."""

    def __init__(self, runs, models):
        super().__init__()
        self._models = models

    def _fill(self):
        while list.__len__(self) < len(self._models):
            super().append(self._models[list.__len__(self)].result())

    def __getitem__(self, i):
        self._fill()
        return super().__getitem__(i)

    def __len__(self):
        return len(self._models)

    def __iter__(self):
        self._fill()
        return super().__iter__()
