"""The latency histogram of the analytics rollups: buckets and percentile estimates."""

from __future__ import annotations

import math
import random

import pytest

from service.db.rollup_tables import LATENCY_BUCKETS
from service.usage.rollups import bucket_bounds, estimate_percentile, latency_bucket


def test_buckets_grow_by_sqrt_two_and_cover_every_duration() -> None:
    assert latency_bucket(0.0) == latency_bucket(0.999) == 0
    assert latency_bucket(1.0) == 1 and latency_bucket(1.41) == 1 and latency_bucket(1.42) == 2
    assert latency_bucket(100.0) == 14 and bucket_bounds(14) == (2**6.5, 2**7)
    assert latency_bucket(1e12) == LATENCY_BUCKETS - 1 and bucket_bounds(LATENCY_BUCKETS - 1)[1] == math.inf
    for duration in (0.5, 1.0, 3.3, 47.0, 512.0, 30_000.0, 400_000.0):
        low, high = bucket_bounds(latency_bucket(duration))
        assert low <= duration < high


def test_percentile_of_one_value_per_bucket_is_its_geometric_middle_capped_by_the_maximum() -> None:
    histogram = [0] * LATENCY_BUCKETS
    for duration in (100, 200, 300, 400, 1000):
        histogram[latency_bucket(duration)] += 1
    assert estimate_percentile(histogram, 0.5, 1000) == pytest.approx(2 ** (33 / 4))  # 300 in [256, 362)
    assert estimate_percentile(histogram, 0.95, 1000) == pytest.approx(math.sqrt(2**9.5 * 1000))
    assert estimate_percentile(histogram, 1.0, 1000) <= 1000
    assert estimate_percentile([0] * LATENCY_BUCKETS, 0.5, 0.0) is None
    zero = [0] * LATENCY_BUCKETS
    zero[0] = 4  # four calls under 1 ms: linear inside [0, max]
    assert estimate_percentile(zero, 0.5, 0.8) == pytest.approx(0.8 * 1.5 / 4)


def test_estimates_stay_within_one_bucket_of_the_exact_nearest_rank() -> None:
    rng = random.Random(3)
    for _ in range(50):
        durations = [rng.lognormvariate(rng.uniform(1, 7), rng.uniform(0.2, 1.5)) for _ in range(rng.randint(1, 500))]
        histogram = [0] * LATENCY_BUCKETS
        for duration in durations:
            histogram[latency_bucket(duration)] += 1
        ordered = sorted(durations)
        for p in (0.5, 0.95):
            exact = ordered[math.ceil(p * len(ordered)) - 1]
            estimate = estimate_percentile(histogram, p, max(durations))
            assert estimate is not None
            assert exact / math.sqrt(2) <= estimate <= exact * math.sqrt(2)
