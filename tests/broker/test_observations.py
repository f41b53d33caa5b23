"""Bucket counters of the metrics: every observation lands in the first bucket whose bound
holds it, intervals add up to the totals, and the publish latency's quantiles are ordered."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.observations import (
    ENTRY_SIZE_BOUNDS,
    PUBLISH_QUANTILES,
    WRITE_LATENCY_BOUNDS_MS,
    Buckets,
    PublishLatency,
)

latencies = st.floats(min_value=0.0, max_value=120_000.0, allow_nan=False)


@given(st.lists(latencies, max_size=200))
def test_each_value_lands_in_its_bucket(values: list[float]) -> None:
    buckets = Buckets(WRITE_LATENCY_BOUNDS_MS)
    for value in values:
        buckets.observe(value)
    assert buckets.count == len(values)
    assert math.isclose(buckets.sum, sum(values), abs_tol=1e-6)
    bounds = (-math.inf, *WRITE_LATENCY_BOUNDS_MS, math.inf)
    for index, count in enumerate(buckets.counts):
        low, high = bounds[index], bounds[index + 1]
        assert count == sum(1 for v in values if low < v <= high)


@given(st.lists(st.lists(st.integers(0, 3_000_000), max_size=50), max_size=6))
def test_intervals_add_up(intervals: list[list[int]]) -> None:
    buckets = Buckets(tuple(float(b) for b in ENTRY_SIZE_BOUNDS))
    seen = [0] * len(buckets.counts)
    for sizes in intervals:
        for size in sizes:
            buckets.observe(size)
        buckets.tick()
        assert buckets.last_count == len(sizes)
        assert buckets.last_sum == sum(sizes)
        seen = [a + b for a, b in zip(seen, buckets.last, strict=True)]
    assert seen == buckets.counts


@given(st.lists(latencies, min_size=1, max_size=300))
def test_quantiles_are_ordered_and_bound_the_values(values: list[float]) -> None:
    latency = PublishLatency()
    assert all(math.isnan(latency.quantile(q)) for q in PUBLISH_QUANTILES)  # nothing yet
    for value in values:
        latency.observe(value)
    latency.tick()
    quantiles = [latency.quantile(q) for q in PUBLISH_QUANTILES]
    assert quantiles == sorted(quantiles)
    # each is the upper bound of a bucket: at least the smallest value, the maximum at least
    # the largest one (infinite past the last bound), within a bucket's width
    assert quantiles[0] >= min(values)
    assert quantiles[-1] >= max(values)
    if max(values) <= latency.bounds[-1]:
        assert quantiles[-1] <= max(max(values) * 1.13, latency.bounds[0])
    latency.tick()  # an interval without publishes
    assert all(math.isnan(latency.quantile(q)) for q in PUBLISH_QUANTILES)
