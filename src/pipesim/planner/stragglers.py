"""The slowest of N GPUs: a synchronous step runs at the pace of its slowest rank.

GPUs of one SKU do not run at one speed. Sinha et al. (SC'22, "Not All GPUs Are Created
Equal", arXiv:2208.11035) ran the same compute-bound kernels on more than 90% of the GPUs
of five clusters (Summit, Vortex, Frontera, Longhorn, Corona) and found 8% average
performance variation between a cluster's slowest and fastest GPUs (up to 22%; outliers
1.5x slower than the median) from manufacturing variation and power management. Read as
the range of about a thousand normally spread speeds (about 6.5 standard deviations), a
GPU's speed has a standard deviation of about 1.2% of the median (``gpu_speed_sd``).

Every collective and every pipeline hand-off waits for its slowest member, and a data-
parallel step for its slowest replica, so a job of N GPUs computes at the pace of the
slowest of N: the median less ``gpu_speed_sd`` times the expected maximum of N standard
normal draws (Blom's approximation of the normal order statistic). Eight GPUs lose about
1.7%, a thousand about 3.9%, sixteen thousand about 4.7%.
"""

from __future__ import annotations

from statistics import NormalDist


def expected_max_z(n: int) -> float:
    """The expected largest of n standard normal draws (Blom 1958: the quantile at
    (n - 0.375) / (n + 0.25)); 0 for one draw."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def slowest_share(gpus: int, speed_sd: float) -> float:
    """The speed of the slowest of ``gpus`` GPUs as a share of the median GPU's."""
    return max(0.5, 1 - speed_sd * expected_max_z(gpus))
