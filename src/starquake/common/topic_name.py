"""Topic and namespace names.

Accepted topic name forms (Pulsar's "v2" names; the old 4-part names with a cluster are
rejected)::

    my-topic                                -> persistent://public/default/my-topic
    tenant/ns/my-topic                      -> persistent://tenant/ns/my-topic
    {persistent|non-persistent}://tenant/ns/my-topic

A partition of a partitioned topic is the topic ``<name>-partition-<N>``, N a canonical decimal
(no sign, no leading zeros) that fits in a signed 32-bit int.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "PARTITIONED_TOPIC_SUFFIX",
    "InvalidTopicNameError",
    "TopicDomain",
    "TopicName",
    "parse_namespace",
]

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITIONED_TOPIC_SUFFIX = "-partition-"

_SCHEME_SEPARATOR = "://"
_INT32_MAX = 0x7FFFFFFF
# Pulsar's NamedEntity rule for tenant, namespace (and cluster) names.
_ENTITY_NAME = re.compile(r"[-=:.\w]+", re.ASCII)


class InvalidTopicNameError(ValueError):
    """A topic or namespace name is malformed."""


class TopicDomain(StrEnum):
    """Whether a topic's messages are stored (persistent) or only relayed (non-persistent)."""

    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


def _entity_problem(kind: str, value: str) -> str | None:
    if not value:
        return f"empty {kind}"
    if not _ENTITY_NAME.fullmatch(value):
        return f"{kind} {value!r} may only contain letters, digits, '_', '-', '=', ':' and '.'"
    return None


def _topic_problem(tenant: str, namespace: str, local_name: str) -> str | None:
    problem = _entity_problem("tenant", tenant) or _entity_problem("namespace", namespace)
    if problem:
        return problem
    if not local_name:
        return "empty local name"
    if "/" in local_name:
        return "the local name may not contain '/'"
    return None


def parse_namespace(name: str) -> tuple[str, str]:
    """Split and validate a ``tenant/namespace`` string; return ``(tenant, namespace)``."""
    parts = name.split("/")
    if len(parts) != 2:
        raise InvalidTopicNameError(f"invalid namespace {name!r}: expected 'tenant/namespace'")
    tenant, namespace = parts
    problem = _entity_problem("tenant", tenant) or _entity_problem("namespace", namespace)
    if problem:
        raise InvalidTopicNameError(f"invalid namespace {name!r}: {problem}")
    return tenant, namespace


def _partition_split(local_name: str) -> tuple[str, int]:
    """Return ``(base, index)`` for ``base-partition-index``, or ``(local_name, -1)``."""
    cut = local_name.rfind(PARTITIONED_TOPIC_SUFFIX)
    if cut <= 0:
        return local_name, -1
    digits = local_name[cut + len(PARTITIONED_TOPIC_SUFFIX) :]
    if not (digits.isascii() and digits.isdigit()) or (len(digits) > 1 and digits[0] == "0"):
        return local_name, -1
    index = int(digits)
    if index > _INT32_MAX:
        return local_name, -1
    return local_name[:cut], index


@dataclass(frozen=True, slots=True)
class TopicName:
    """A fully qualified topic name: ``domain://tenant/namespace/local_name``.

    Construct it with :meth:`parse`, or directly from validated parts (the constructor checks
    them too).
    """

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str

    def __post_init__(self) -> None:
        if not isinstance(self.domain, TopicDomain):
            raise InvalidTopicNameError(f"invalid topic domain {self.domain!r}")
        problem = _topic_problem(self.tenant, self.namespace, self.local_name)
        if problem:
            raise InvalidTopicNameError(f"invalid topic name {str(self)!r}: {problem}")

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse a short (``topic``, ``tenant/ns/topic``) or full topic name."""
        scheme, sep, rest = name.partition(_SCHEME_SEPARATOR)
        if sep:
            try:
                domain = TopicDomain(scheme)
            except ValueError:
                raise InvalidTopicNameError(
                    f"invalid topic name {name!r}: domain must be 'persistent' or "
                    f"'non-persistent', not {scheme!r}"
                ) from None
            parts = rest.split("/")
            if len(parts) == 4:
                raise InvalidTopicNameError(
                    f"invalid topic name {name!r}: names with a cluster "
                    "(domain://tenant/cluster/namespace/topic) are not supported"
                )
            if len(parts) != 3:
                raise InvalidTopicNameError(
                    f"invalid topic name {name!r}: expected "
                    f"'{domain.value}://tenant/namespace/topic'"
                )
        else:
            domain = TopicDomain.PERSISTENT
            parts = name.split("/")
            if len(parts) == 1:
                parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, name]
            elif len(parts) != 3:
                raise InvalidTopicNameError(
                    f"invalid topic name {name!r}: expected 'topic', 'tenant/namespace/topic' "
                    "or 'persistent://tenant/namespace/topic'"
                )
        tenant, namespace, local_name = parts
        problem = _topic_problem(tenant, namespace, local_name)
        if problem:
            raise InvalidTopicNameError(f"invalid topic name {name!r}: {problem}")
        return cls(domain, tenant, namespace, local_name)

    def __str__(self) -> str:
        return f"{self.domain.value}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def namespace_name(self) -> str:
        """``tenant/namespace``."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def is_persistent(self) -> bool:
        """True for ``persistent://`` topics."""
        return self.domain is TopicDomain.PERSISTENT

    @property
    def partition_index(self) -> int:
        """The N of a ``...-partition-N`` topic, or -1 if this is not a partition."""
        return _partition_split(self.local_name)[1]

    @property
    def is_partition(self) -> bool:
        """True if this names one partition of a partitioned topic."""
        return self.partition_index >= 0

    @property
    def partitioned_topic_name(self) -> TopicName:
        """The partitioned topic this partition belongs to; ``self`` if not a partition."""
        base, index = _partition_split(self.local_name)
        if index < 0:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, base)

    def partition(self, index: int) -> TopicName:
        """Return partition ``index`` of this topic.

        On a partition this returns its sibling: ``t-partition-1`` -> ``t-partition-<index>``.
        """
        if not 0 <= index <= _INT32_MAX:
            raise ValueError(f"partition index out of range: {index}")
        base = _partition_split(self.local_name)[0]
        return TopicName(
            self.domain, self.tenant, self.namespace, f"{base}{PARTITIONED_TOPIC_SUFFIX}{index}"
        )
