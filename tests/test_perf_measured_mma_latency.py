"""The B200 tcgen05 MMA latency figures against the measurement they were taken from
(arch/blackwell.yaml [SAMU]: one tcgen05.mma issued, committed to an mbarrier and waited
on, median SM cycles). porter's timed mode books a single MMA's completion as
max(tensor, smem) + mma_latency_base_cycles + mma_latency_per_n_cycles x N and the
commit's arrive as mbarrier_cycles; together they must give the measured latencies back,
so a change to any of the three that breaks the match fails here."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.timing.figures import Figures

# (CTA group, M, N, measured median cycles): BF16, K = 16, A and B from shared memory
SS_BF16 = [(1, 128, 64, 168), (1, 128, 128, 200), (1, 128, 256, 264),
           (2, 256, 64, 202), (2, 256, 128, 234), (2, 256, 256, 298)]


def _booked(fig: Figures, group: int, m: int, n: int, k: int = 16) -> float:
    rate = fig.mma_rate("f16")
    tensor = 2.0 * m * n * k / rate / group
    smem = (m / group * k * 2 + n / group * k * 2) / fig["smem_bytes_per_clk_per_sm"]
    return (max(tensor, smem) + fig["mma_latency_base_cycles"]
            + fig["mma_latency_per_n_cycles"] * n + fig["mbarrier_cycles"])


@pytest.mark.parametrize("group,m,n,measured", SS_BF16)
def test_a_single_tcgen05_mma_is_booked_near_its_measured_latency(group, m, n, measured):
    fig = Figures.of(load_arch("blackwell"))
    assert _booked(fig, group, m, n) == pytest.approx(measured, rel=0.25)


def test_the_booked_latency_grows_with_n_only_by_the_tensor_time():
    # measured: 168 -> 264 cycles from N = 64 to 256 at M = 128, the tensor time's 32 -> 128
    fig = Figures.of(load_arch("blackwell"))
    grown = _booked(fig, 1, 128, 256) - _booked(fig, 1, 128, 128)
    assert grown == pytest.approx(264 - 200, abs=8)
    lo, hi = fig.uncertain["mma_latency_per_n_cycles"]
    assert lo <= fig["mma_latency_per_n_cycles"] <= hi <= 0.1
