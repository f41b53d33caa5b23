"""Properties of the pure policy rules: the system-topic name rule and the checks of retention
and backlog quota values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.admin.policies import CHECKS, quota_fits_retention
from starquake.broker.policy_types import BacklogQuota, PolicyError, RetentionPolicies, to_json
from starquake.broker.system_topics import EVENT_TOPIC_NAMES, hide_system_topics, is_system_topic
from starquake.common.topic_name import TopicDomain, TopicName

_segment = st.text(alphabet="abcxyz_-.0123456789", min_size=1, max_size=12).filter(
    lambda s: not s.startswith("-")
)
_local = st.one_of(
    _segment,
    st.sampled_from(sorted(EVENT_TOPIC_NAMES)),
    _segment.map(lambda s: s + "__transaction_pending_ack"),
    st.sampled_from(["transaction_coordinator_assign", "__transaction_log_3"]),
)
_topics = st.builds(
    TopicName,
    st.sampled_from(list(TopicDomain)),
    st.sampled_from(["public", "pulsar", "t"]),
    st.sampled_from(["default", "system", "ns"]),
    _local,
)


@given(_topics, st.integers(min_value=0, max_value=1000))
def test_a_partition_is_a_system_topic_exactly_when_its_topic_is(
    topic: TopicName, index: int
) -> None:
    assert is_system_topic(topic.partition(index)) is is_system_topic(topic)


@given(st.lists(_topics, max_size=20))
def test_hiding_keeps_the_other_topics_in_order(topics: list[TopicName]) -> None:
    names = [str(t) for t in topics]
    assert hide_system_topics(names) == [str(t) for t in topics if not is_system_topic(t)]


_limit = st.integers(min_value=-3, max_value=10_000)


@given(_limit, _limit)
def test_retention_values_pulsar_accepts(minutes: int, size_mb: int) -> None:
    body = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}
    valid = minutes >= -1 and size_mb >= -1 and ((minutes == 0) == (size_mb == 0))
    if valid:
        assert to_json(CHECKS["retention_policies"](body)) == body
    else:
        with pytest.raises(PolicyError):
            CHECKS["retention_policies"](body)


@given(
    st.integers(min_value=-1, max_value=5000),
    st.integers(min_value=-1, max_value=5000),
    st.integers(min_value=-1, max_value=5000),
    st.integers(min_value=-1, max_value=5000),
)
def test_a_quota_fits_a_retention_it_stays_under(
    minutes: int, size_mb: int, limit_mb: int, limit_minutes: int
) -> None:
    retention = RetentionPolicies(minutes, size_mb)
    quota = BacklogQuota(
        "producer_request_hold",
        limit_size=limit_mb * 1024 * 1024 if limit_mb >= 0 else -1,
        limit_time=limit_minutes * 60 if limit_minutes >= 0 else -1,
    )
    fits = quota_fits_retention(quota, retention, -1)
    size_clash = size_mb > 0 and limit_mb >= size_mb
    time_clash = minutes > 0 and limit_minutes >= minutes
    assert fits is not (size_clash or time_clash)
    # no retention limit (or none at all): any quota fits
    assert quota_fits_retention(quota, None, -1)
    assert quota_fits_retention(quota, RetentionPolicies(-1, -1), -1)
