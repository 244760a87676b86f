"""porter's analytical timing model: predict a kernel's speed on a product without a GPU.

L0 (``gemm_model``, ``attention_model``): per-tile resource times from the kernel's
configuration and the descriptor's ``perf:`` figures; L2 (``schedule``): the per-tile
period extrapolated over the exact persistent tile schedule, capped by HBM. A measured
per-tile period (a timed simulator run) can replace L0's: ``schedule.Schedule`` takes the
period per tile. Every figure it prints carries ``LABEL`` and a range.
"""

from .predict import LABEL, Prediction, predict
from .shapes import standard_shapes

__all__ = ["LABEL", "Prediction", "predict", "standard_shapes"]
