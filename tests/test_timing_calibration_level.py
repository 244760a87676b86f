"""The calibration table is made at one level of the model for every row (issue 16 item 7):
`porter predict hopper --calibration --level L1` asks every row, the fitted cuBLAS row
included, of L1, and the table says which level it shows."""

from __future__ import annotations

from porter.descriptor.arch import load_arch
from porter.timing import calibration
from porter.timing.predict import predict as real_predict


def test_every_row_is_predicted_at_the_level_asked(monkeypatch):
    levels = []

    def at_l0(arch, spec, *, product=None, shape=None, level="L0"):
        levels.append(level)
        return real_predict(arch, spec, product=product, shape=shape)     # L0 underneath: the test stays fast
    monkeypatch.setattr(calibration, "predict", at_l0)
    cal = calibration.calibrate(load_arch("hopper"), level="L1")
    assert levels and set(levels) == {"L1"}
    assert cal["level"] == "L1"
    assert calibration.table_markdown(cal).startswith("Calibration on H100 SXM at L1: one fitted factor")
    assert calibration.calibrate(load_arch("hopper"))["level"] == "L0"
