"""Wire enums as ``IntEnum``s, numbered exactly as in the protocol's protobuf definitions.

Command fields hold plain ints; comparing them with these members names what is meant.
"""

from __future__ import annotations

from enum import IntEnum

from starquake.protocol.compression import CompressionCodec as CompressionType
from starquake.protocol.errors import ServerError

__all__ = [
    "AckType",
    "CompressionType",
    "InitialPosition",
    "KeySharedMode",
    "ProducerAccessMode",
    "ServerError",
    "SubType",
    "TopicListMode",
]


class SubType(IntEnum):
    """Subscription types (``CommandSubscribe.SubType``)."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class InitialPosition(IntEnum):
    """Where a new subscription starts (``CommandSubscribe.InitialPosition``)."""

    Latest = 0
    Earliest = 1


class AckType(IntEnum):
    """Acknowledgement kinds (``CommandAck.AckType``)."""

    Individual = 0
    Cumulative = 1


class ProducerAccessMode(IntEnum):
    """Which producers a topic admits alongside this one (``ProducerAccessMode``)."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class KeySharedMode(IntEnum):
    """How a Key_Shared consumer gets its hash ranges (``KeySharedMode``)."""

    AUTO_SPLIT = 0
    STICKY = 1


class TopicListMode(IntEnum):
    """Which topics GET_TOPICS_OF_NAMESPACE lists (``CommandGetTopicsOfNamespace.Mode``)."""

    PERSISTENT = 0
    NON_PERSISTENT = 1
    ALL = 2
