"""Dead letter and retry letter topics of one consumer.

Dead letter (``dead_letter_policy``, Shared and Key_Shared subscriptions), following the
official C++ client (``ConsumerImpl::messageReceived`` / ``processPossibleToDLQ``):

- A message received with ``redelivery_count >= max_redeliver_count`` is still delivered, but
  remembered as a dead-letter candidate (one received with a count above the maximum is not
  delivered at all and goes straight to the dead letter path).
- When such a message is due for redelivery (negative ack, ack timeout), it is published to the
  dead letter topic instead, and then acknowledged on the original topic. If publishing fails
  it is redelivered as usual.
- So with ``max_redeliver_count=n`` the application sees a message ``n + 1`` times
  (redelivery counts 0..n) before it is dead-lettered.
- The dead letter message keeps payload, key, ordering key and properties, and gets
  ``REAL_TOPIC`` (the topic it came from) and ``ORIGIN_MESSAGE_ID`` (the id's text form, as
  ``str(message_id)``). Properties already present (a message coming back from the retry
  topic) are kept, as the Java client does.
- The default topic is ``<topic>-<subscription>-DLQ`` where ``<topic>`` is the topic the message
  came from, so each partition of a partitioned topic has its own (as the official C++/Python
  client does; with ``enable_retry`` the Java client's single ``<first topic>-<subscription>-DLQ``
  is used instead). ``initial_subscription_name`` is sent in
  the DLQ producer's CommandProducer (field 13, as the official clients do); since a broker may
  ignore that field, the subscription is also created by subscribing (earliest) and closing,
  before anything is published.

Retry letter (``enable_retry=True``, a Starquake extension: the official Python client has no
``reconsume_later``; semantics of the Java client's):

- ``reconsume_later(msg, delay)`` publishes the message to ``<topic>-<subscription>-RETRY``
  (the consumer subscribes to it automatically) with ``REAL_TOPIC``, ``ORIGIN_MESSAGE_ID``,
  ``RECONSUMETIMES`` (1, 2, ...), ``DELAY_TIME`` (ms) and the caller's properties, delivered
  after ``delay``; then it acknowledges the original.
- When ``RECONSUMETIMES`` would exceed ``max_redeliver_count`` (16 without a dead letter
  policy) the message goes to the dead letter topic instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starquake.client.base._config import ProducerConfig
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import Message
from starquake.client.core._handler import ClientCore
from starquake.client.exceptions import PulsarException
from starquake.client.producer._outgoing import OutgoingMessage
from starquake.client.producer._partitioned import PartitionedProducer, open_producer
from starquake.client.producer._producer import ProducerImpl
from starquake.common.topic_name import TopicName

log = logging.getLogger(CLIENT_LOGGER_NAME)

REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
DLQ_SUFFIX = "-DLQ"
RETRY_SUFFIX = "-RETRY"
MAX_RECONSUME_TIMES = 16  # the Java client's default when retry is on without a DLQ policy

AnyProducer = ProducerImpl | PartitionedProducer
# Creates a subscription on a topic (all its partitions) if it does not exist: (topic, name).
CreateSubscription = Callable[[str, str], Awaitable[None]]


def base_topic(topic: str) -> str:
    """The fully qualified topic without any ``-partition-N`` suffix."""
    return str(TopicName.parse(topic).partitioned_topic_name)


class DeadLetterHandler:
    """Publishes a consumer's dead letters and retry letters (one per consumer front)."""

    def __init__(
        self,
        core: ClientCore,
        topic: str,
        subscription: str,
        policy: Any,
        *,
        enable_retry: bool = False,
        retry_letter_topic: str | None = None,
        create_subscription: CreateSubscription,
    ) -> None:
        self._core = core
        self._create_subscription = create_subscription
        self._subscription = subscription
        prefix = f"{base_topic(topic)}-{subscription}"
        self.max_redeliver_count: int = (
            policy.max_redeliver_count if policy is not None else MAX_RECONSUME_TIMES
        )
        named = getattr(policy, "dead_letter_topic", "") if policy is not None else ""
        self._named_dead_letter_topic = str(TopicName.parse(named)) if named else None
        self.dead_letter_topic = self._named_dead_letter_topic or prefix + DLQ_SUFFIX
        initial = getattr(policy, "initial_subscription_name", "") if policy is not None else ""
        self.initial_subscription_name: str | None = initial or None
        self.retry_letter_topic: str | None = None
        if enable_retry:
            self.retry_letter_topic = (
                str(TopicName.parse(retry_letter_topic))
                if retry_letter_topic
                else prefix + RETRY_SUFFIX
            )
        self._producers: dict[str, asyncio.Future[AnyProducer]] = {}
        self._closed = False

    # --- producers --------------------------------------------------------------------------

    async def _producer(self, topic: str, dead_letter: bool) -> AnyProducer:
        fut = self._producers.get(topic)
        if fut is None or (fut.done() and fut.exception() is not None):
            fut = asyncio.get_running_loop().create_future()
            self._producers[topic] = fut
            try:
                producer = await self._open(topic, dead_letter)
            except BaseException as exc:
                fut.set_exception(exc)
                fut.exception()
                del self._producers[topic]
                raise
            fut.set_result(producer)
        return await asyncio.shield(fut)

    async def _open(self, topic: str, dead_letter: bool) -> AnyProducer:
        initial = self.initial_subscription_name if dead_letter else None
        if initial:
            await self._create_subscription(topic, initial)
        config = ProducerConfig(
            batching_enabled=False,
            block_if_queue_full=False,
            initial_subscription_name=initial,
        )
        return await open_producer(self._core, topic, config)

    # --- dead letters -----------------------------------------------------------------------

    def dead_letter_topic_for(self, source_topic: str) -> str:
        """Where dead letters of ``source_topic`` (a topic or partition) go."""
        if self._named_dead_letter_topic is not None or self.retry_letter_topic is not None:
            return self.dead_letter_topic
        return f"{source_topic}-{self._subscription}{DLQ_SUFFIX}"

    async def send_to_dead_letter(self, messages: list[Message], source_topic: str) -> bool:
        """Publish ``messages`` to the dead letter topic; True once all are stored."""
        if self._closed:
            return False
        topic = self.dead_letter_topic_for(source_topic)
        try:
            producer = await self._producer(topic, True)
            for msg in messages:
                await producer.send(_republished(msg, _origin_properties(msg)))
        except PulsarException as exc:
            log.warning("could not publish to dead letter topic %s: %s", topic, exc)
            return False
        return True

    # --- retry letters ----------------------------------------------------------------------

    async def reconsume_later(
        self, msg: Message, delay_ms: int, properties: dict[str, str] | None
    ) -> None:
        """Publish ``msg`` to the retry topic (or, past the maximum, to the dead letter topic)."""
        assert self.retry_letter_topic is not None
        props = _origin_properties(msg)
        props.update(properties or {})
        previous = props.get(RECONSUMETIMES, "")
        times = int(previous) + 1 if previous.isdigit() else 1
        props[RECONSUMETIMES] = str(times)
        props[DELAY_TIME] = str(max(delay_ms, 0))
        if times > self.max_redeliver_count:
            producer = await self._producer(self.dead_letter_topic, True)
            await producer.send(_republished(msg, props))
            return
        out = _republished(msg, props)
        if delay_ms > 0:
            out.deliver_at = int(time.time() * 1000) + delay_ms
        producer = await self._producer(self.retry_letter_topic, False)
        await producer.send(out)

    async def close(self) -> None:
        self._closed = True
        producers, self._producers = self._producers, {}
        for fut in producers.values():
            if fut.done() and fut.exception() is None:
                try:
                    await fut.result().close()
                except PulsarException as exc:
                    log.debug("closing dead letter producer: %s", exc)


def _origin_properties(msg: Message) -> dict[str, str]:
    props = dict(msg.properties())
    props.setdefault(REAL_TOPIC, msg.topic_name())
    props.setdefault(ORIGIN_MESSAGE_ID, str(msg.message_id()))
    return props


def _republished(msg: Message, properties: dict[str, str]) -> OutgoingMessage:
    return OutgoingMessage(
        None if msg.has_null_value() else msg.data(),
        properties=properties,
        partition_key=msg.partition_key() or None,
        ordering_key=msg.ordering_key_bytes or None,
        event_timestamp=msg.event_timestamp() or None,
    )


__all__ = [
    "DELAY_TIME",
    "ORIGIN_MESSAGE_ID",
    "REAL_TOPIC",
    "RECONSUMETIMES",
    "DeadLetterHandler",
    "base_topic",
]
