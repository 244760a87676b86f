"""The megakernel plan's counter-wait model on a machine without porter's generator.

The device check's GPU machine runs prepared cubins and has no jinja2; its decode plan
still times the counter waits by the kernel's spin / back-off constants, read from the
counters header (the constants are not templated), the same values the rendered source gives.
"""

from __future__ import annotations

import sys

from porter.descriptor.arch import load_arch
from porter.megakernel import latency
from porter.timing import megakernel_model


def test_backoff_without_jinja2_matches_the_rendered_source(monkeypatch):
    arch = load_arch("hopper")
    rendered = latency.kernel_backoff(arch)
    assert rendered and rendered["backoff_max_ns"] > rendered["backoff_min_ns"] > 0
    monkeypatch.setattr(megakernel_model, "_BACKOFF", {})       # nothing rendered yet
    for name in [m for m in sys.modules if m == "jinja2" or m.startswith("jinja2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "jinja2", None)            # import jinja2 -> ImportError
    assert latency.kernel_backoff(arch) == rendered
    model = latency.LatencyModel.from_arch(arch)
    assert model.backoff == rendered
