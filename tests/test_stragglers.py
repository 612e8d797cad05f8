"""The slowest of N GPUs sets a synchronous step's pace."""

from __future__ import annotations

import random
import statistics

import pytest

from pipesim.planner.stragglers import expected_max_z, slowest_share


def test_expected_max_is_the_order_statistic():
    """Blom's approximation against a simulation of the maximum of n normal draws."""
    rng = random.Random(0)
    for n in (2, 8, 64, 1024):
        sim = statistics.mean(max(rng.gauss(0, 1) for _ in range(n)) for _ in range(2000))
        assert expected_max_z(n) == pytest.approx(sim, abs=0.05)
    assert expected_max_z(1) == 0.0


def test_more_gpus_wait_longer():
    shares = [slowest_share(n, 0.012) for n in (1, 8, 1024, 16384)]
    assert shares[0] == 1.0 and shares == sorted(shares, reverse=True)
    assert 0.95 < shares[-1] < 0.96  # about 4.7% slower at sixteen thousand GPUs
    assert slowest_share(16384, 0.0) == 1.0  # the switch: gpu_speed_sd = 0
