"""Micro-benchmarks of the simulator's timed mode (benchmarks/timed_micro/probes.py): probe
kernels written here run in timed mode and must reproduce the shape of the published
curves (the figures are porter's timing model's, not measurements)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "timed_micro"))

import probes  # noqa: E402


@pytest.fixture(scope="module")
def hopper():
    return probes.params_of("hopper")


@pytest.fixture(scope="module")
def blackwell():
    return probes.params_of("blackwell")


def test_wgmma_throughput_grows_with_n_and_rs_beats_ss_at_small_n(hopper):
    peak = hopper["mma_flop_per_clk_per_sm"]["f16"]
    ss = {n: probes.wgmma_rate(hopper, n, rs=False) for n in (16, 64, 256)}
    rs16 = probes.wgmma_rate(hopper, 16, rs=True)
    assert ss[16] < ss[64] < ss[256] <= peak * 1.01
    assert ss[64] < 0.95 * ss[256]             # N=64 is slower per FLOP than N=256 (latency per MMA)
    assert rs16 > 1.2 * ss[16]                  # at small N, reading A from shared memory binds SS


def test_tcgen05_ss_below_128_is_bound_by_shared_memory_ts_reaches_the_peak(blackwell):
    peak = blackwell["mma_flop_per_clk_per_sm"]["f16"]
    ss64, ts64 = probes.tcgen05_rate(blackwell, 64, ts=False), probes.tcgen05_rate(blackwell, 64, ts=True)
    ss256 = probes.tcgen05_rate(blackwell, 256, ts=False)
    port = blackwell["smem_bytes_per_clk_per_sm"]
    # SS N=64 reads 4 KiB of A and 2 KiB of B per 2*128*64*16 FLOP: the port's rate bounds it
    bound = 2 * 128 * 64 * 16 / ((128 * 16 * 2 + 64 * 16 * 2) / port)
    assert ss64 == pytest.approx(bound, rel=0.05) and ss64 < 0.8 * peak
    assert ts64 >= 0.97 * peak and ss256 >= 0.97 * peak


def test_cta_pair_mma_lifts_the_per_sm_rate_where_one_cta_is_smem_bound(blackwell):
    one, pair = probes.tcgen05_rate(blackwell, 64, ts=False), probes.tcgen05_pair_rate(blackwell, 64)
    assert pair > 1.1 * one                     # each SM reads half of B
    assert probes.tcgen05_pair_rate(blackwell, 256) >= 0.97 * blackwell["mma_flop_per_clk_per_sm"]["f16"]


def test_tma_bandwidth_grows_with_bytes_in_flight_up_to_the_window(hopper):
    window = int(hopper["tma_inflight_bytes"])
    bw = {b: probes.tma_bandwidth(hopper, b) for b in (window // 16, window // 4, window, 2 * window)}
    small, mid, full, past = (bw[b] for b in sorted(bw))
    assert small < mid < full
    assert mid == pytest.approx(4 * small, rel=0.2)              # Little's law: latency-bound, linear
    assert past <= 1.05 * full                                   # past the window nothing more flies
    assert full <= hopper["l2_bytes_per_clk_per_sm"] * 1.01      # nor beyond the SM's share of the L2
