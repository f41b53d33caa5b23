"""The SUBSCRIBE command of a consumer, from its settings, the two special start ids
(earliest, latest), and SEEK with what a consumer skips after it."""

from __future__ import annotations

from starquake.client.base._config import ConsumerConfig, declared_schema
from starquake.client.base._enums import ConsumerType, KeySharedMode
from starquake.client.base._message import MessageId
from starquake.protocol import client_commands
from starquake.protocol.wire import pb

_I64_MAX = (1 << 63) - 1


def is_earliest(mid: MessageId) -> bool:
    """Whether ``mid`` is :attr:`MessageId.earliest` (the oldest message)."""
    return mid.ledger_id() < 0 and mid.entry_id() < 0


def is_latest(mid: MessageId) -> bool:
    """Whether ``mid`` is :attr:`MessageId.latest` (after the newest message)."""
    return mid.ledger_id() == _I64_MAX and mid.entry_id() == _I64_MAX


def seek_command(
    consumer_id: int, request_id: int, target: MessageId | int, inclusive: bool
) -> tuple[pb.BaseCommand, MessageId | int]:
    """SEEK to a publish time (ms) or a message id, and the position sought: for the id of a
    chunked message that is included (``inclusive``), its first chunk (it is read whole)."""
    if isinstance(target, int):
        return client_commands.seek(consumer_id, request_id, publish_time=target), target
    first_chunk = target.first_chunk_message_id
    if first_chunk is not None and inclusive:
        target = first_chunk
    message_id = target.to_proto(with_batch=False)
    return client_commands.seek(consumer_id, request_id, message_id=message_id), target


def skip_after_seek(position: MessageId | int, durable: bool) -> tuple[MessageId | None, int]:
    """What a consumer skips after a seek to ``position``, as (start id, minimum publish time):
    the messages before an id (nothing to skip from earliest or latest), or, for a reader
    (not durable: it re-subscribes from the earliest message), those published before a time
    in ms."""
    if isinstance(position, int):
        return None, 0 if durable else position
    concrete = not (is_earliest(position) or is_latest(position))
    return (position.plain() if concrete else None), 0


def subscribe_command(
    config: ConsumerConfig,
    topic: str,
    subscription: str,
    consumer_id: int,
    request_id: int,
    consumer_name: str,
    start: pb.MessageIdData | None,
) -> pb.BaseCommand:
    """SUBSCRIBE for a consumer with ``config`` (a non-durable one starts at ``start``)."""
    return client_commands.subscribe(
        topic,
        subscription,
        int(config.consumer_type),
        consumer_id,
        request_id,
        consumer_name=consumer_name,
        durable=config.durable,
        initial_position=int(config.initial_position),
        read_compacted=config.is_read_compacted,
        metadata=config.properties,
        start_message_id=start,
        key_shared_meta=key_shared_meta(config),
        replicate_subscription_state=config.replicate_subscription_state_enabled,
        schema=declared_schema(config.schema),
    )


def key_shared_meta(config: ConsumerConfig) -> pb.KeySharedMeta | None:
    """The Key_Shared settings of SUBSCRIBE (None for the other subscription types)."""
    if config.consumer_type != ConsumerType.KeyShared:
        return None
    policy = config.key_shared_policy
    meta = pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT)
    if policy is not None:
        meta.allowOutOfOrderDelivery = policy.allow_out_of_order_delivery
        if policy.key_shared_mode == KeySharedMode.Sticky:
            meta.keySharedMode = pb.STICKY
            for start, end in policy.sticky_ranges or ():
                meta.hashRanges.add(start=start, end=end)
    else:
        meta.allowOutOfOrderDelivery = False
    return meta
