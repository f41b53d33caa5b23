from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.common.topic_name import (
    InvalidTopicNameError,
    TopicDomain,
    TopicName,
    parse_namespace,
)


@pytest.mark.parametrize(
    ("given_name", "full"),
    [
        ("my-topic", "persistent://public/default/my-topic"),
        ("tenant/ns/topic", "persistent://tenant/ns/topic"),
        ("persistent://tenant/ns/topic", "persistent://tenant/ns/topic"),
        ("non-persistent://tenant/ns/topic", "non-persistent://tenant/ns/topic"),
        ("t-1/ns.a=b:c_d/x y%z", "persistent://t-1/ns.a=b:c_d/x y%z"),
        ("日本", "persistent://public/default/日本"),
    ],
)
def test_parse_accepted_forms(given_name: str, full: str) -> None:
    topic = TopicName.parse(given_name)
    assert str(topic) == full
    assert TopicName.parse(full) == topic


def test_fields_and_properties() -> None:
    topic = TopicName.parse("non-persistent://acme/orders/created")
    assert topic.domain is TopicDomain.NON_PERSISTENT
    assert (topic.tenant, topic.namespace, topic.local_name) == ("acme", "orders", "created")
    assert topic.namespace_name == "acme/orders"
    assert not topic.is_persistent
    assert TopicName.parse("created").is_persistent
    assert topic.partition_index == -1
    assert not topic.is_partition
    assert topic.partitioned_topic_name is topic


def test_domain_is_a_str() -> None:
    assert isinstance(TopicDomain.PERSISTENT, str)
    assert TopicDomain.PERSISTENT.value == "persistent"
    assert f"{TopicDomain.PERSISTENT}" == "persistent"
    assert str(TopicDomain.NON_PERSISTENT) == "non-persistent"
    assert TopicDomain("non-persistent") is TopicDomain.NON_PERSISTENT


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "/",
        "a/b",
        "a/b/c/d",
        "persistent://a/b",
        "persistent://a/b/c/d",  # old-style name with a cluster
        "persistent://a/b/",
        "persistent:///b/c",
        "persistent://a//c",
        "persistent://",
        "persistant://a/b/c",
        "Persistent://a/b/c",
        "http://a/b/c",
        "://a/b/c",
        "a b/ns/t",
        "a/n$s/t",
        "tenant//t",
        "persistent://a/b/c://d",
    ],
)
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError) as info:
        TopicName.parse(bad)
    assert repr(bad) in str(info.value)


def test_error_is_a_value_error_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="domain must be 'persistent' or 'non-persistent'"):
        TopicName.parse("kafka://a/b/c")
    with pytest.raises(ValueError, match="names with a cluster"):
        TopicName.parse("persistent://tenant/cluster/ns/topic")


def test_constructor_validates() -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName(TopicDomain.PERSISTENT, "t", "ns", "")
    with pytest.raises(InvalidTopicNameError):
        TopicName(TopicDomain.PERSISTENT, "t", "ns", "a/b")
    with pytest.raises(InvalidTopicNameError):
        TopicName("persistent", "t", "ns", "x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("local", "index", "base"),
    [
        ("t-partition-0", 0, "t"),
        ("t-partition-7", 7, "t"),
        ("t-partition-2147483647", 2147483647, "t"),
        ("a-partition-1-partition-3", 3, "a-partition-1"),
        ("t-partition-2147483648", -1, None),
        ("t-partition-01", -1, None),
        ("t-partition--1", -1, None),
        ("t-partition-+1", -1, None),
        ("t-partition-", -1, None),
        ("t-partition-x", -1, None),
        ("t-partition-\u0661", -1, None),  # ARABIC-INDIC DIGIT ONE
        ("-partition-3", -1, None),
        ("t-partition-3-x", -1, None),
        ("t", -1, None),
    ],
)
def test_partition_index(local: str, index: int, base: str | None) -> None:
    topic = TopicName.parse(f"persistent://t/ns/{local}")
    assert topic.partition_index == index
    assert topic.is_partition == (index >= 0)
    if base is None:
        assert topic.partitioned_topic_name is topic
    else:
        assert topic.partitioned_topic_name == TopicName.parse(f"persistent://t/ns/{base}")


def test_partition() -> None:
    topic = TopicName.parse("non-persistent://t/ns/orders")
    p3 = topic.partition(3)
    assert str(p3) == "non-persistent://t/ns/orders-partition-3"
    assert p3.partition_index == 3
    assert p3.partitioned_topic_name == topic
    assert str(p3.partition(0)) == "non-persistent://t/ns/orders-partition-0"
    with pytest.raises(ValueError):
        topic.partition(-1)


def test_hashable_and_frozen() -> None:
    a = TopicName.parse("x")
    b = TopicName.parse("persistent://public/default/x")
    assert a == b
    assert len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.tenant = "other"  # type: ignore[misc]


def test_parse_namespace() -> None:
    assert parse_namespace("public/default") == ("public", "default")
    for bad in ("", "public", "a/b/c", "/b", "a/", "a b/c", "a/b$"):
        with pytest.raises(InvalidTopicNameError):
            parse_namespace(bad)


entity = st.text(
    alphabet=st.sampled_from("abcXYZ019_-=:."),
    min_size=1,
    max_size=12,
)
local_names = st.text(
    alphabet=st.characters(exclude_characters="/", exclude_categories=["Cs"]),
    min_size=1,
    max_size=30,
)


@given(st.sampled_from(TopicDomain), entity, entity, local_names)
def test_full_name_round_trip(domain: TopicDomain, tenant: str, ns: str, local: str) -> None:
    topic = TopicName(domain, tenant, ns, local)
    assert TopicName.parse(str(topic)) == topic
    if domain is TopicDomain.PERSISTENT:
        assert TopicName.parse(f"{tenant}/{ns}/{local}") == topic
        if "://" not in local:
            short = TopicName.parse(local)
            assert short.namespace_name == "public/default"
            assert short.local_name == local


@given(st.sampled_from(TopicDomain), entity, entity, local_names, st.integers(0, 2**31 - 1))
def test_partition_round_trip(
    domain: TopicDomain, tenant: str, ns: str, local: str, index: int
) -> None:
    topic = TopicName(domain, tenant, ns, local).partitioned_topic_name
    part = topic.partition(index)
    assert part.partition_index == index
    assert part.partitioned_topic_name == topic
    assert TopicName.parse(str(part)) == part


@given(st.text(max_size=40))
def test_parse_raises_only_invalid_topic_name(name: str) -> None:
    try:
        topic = TopicName.parse(name)
    except InvalidTopicNameError:
        return
    assert TopicName.parse(str(topic)) == topic
