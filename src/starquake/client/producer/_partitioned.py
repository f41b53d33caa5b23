"""Producers of partitioned topics: one :class:`ProducerImpl` per partition, plus routing."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from starquake.client.base._config import ProducerConfig
from starquake.client.base._enums import HashingScheme, PartitionsRoutingMode
from starquake.client.base._message import Message, MessageId
from starquake.client.core._handler import ClientCore
from starquake.client.core._partition_updates import PartitionWatcher
from starquake.client.exceptions import InvalidConfiguration
from starquake.client.producer._producer import OutgoingMessage, ProducerImpl
from starquake.client.producer._send_ops import partition_topic
from starquake.common.hashes import boost_hash, java_string_hash, murmur3_32_masked

# our own generator: a library must not draw from (or disturb) the global one
_RANDOM = random.Random()

_HASHES: dict[HashingScheme, Callable[[str], int]] = {
    HashingScheme.BoostHash: boost_hash,
    HashingScheme.JavaStringHash: java_string_hash,
    HashingScheme.Murmur3_32Hash: lambda key: murmur3_32_masked(key.encode("utf-8")),
}


class MessageRouter:
    """Chooses the partition of each message, as the official clients do.

    Keyed messages go to ``hash(partition_key) % n``. Keyless ones: RoundRobin stays on one
    partition until a batch would be full (count, bytes or delay) and then moves on (every
    message when batching is off); SinglePartition uses one random partition; a custom router
    decides itself.
    """

    def __init__(self, config: ProducerConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._hash = _HASHES[config.hashing_scheme]
        self._mode = config.message_routing_mode
        if config.message_router is not None:
            self._mode = PartitionsRoutingMode.CustomPartition
        elif self._mode == PartitionsRoutingMode.CustomPartition:
            raise InvalidConfiguration("CustomPartition routing needs a message_router")
        self._single = -1
        self._cursor = _RANDOM.randrange(1 << 16)
        self._count = 0
        self._bytes = 0
        self._since = clock()

    def choose(self, msg: OutgoingMessage, num_partitions: int) -> int:
        """Partition index for ``msg``."""
        config = self._config
        if self._mode == PartitionsRoutingMode.CustomPartition:
            assert config.message_router is not None
            view = Message(
                msg.content or b"",
                properties=msg.properties,
                partition_key=msg.partition_key or "",
                ordering_key=msg.ordering_key or b"",
                event_timestamp=msg.event_timestamp or 0,
            )
            return int(config.message_router(view, num_partitions)) % num_partitions
        if msg.partition_key:
            return self._hash(msg.partition_key) % num_partitions
        if self._mode == PartitionsRoutingMode.UseSinglePartition:
            if self._single < 0:
                self._single = _RANDOM.randrange(num_partitions)
            return self._single % num_partitions
        if not config.batching_enabled:
            self._cursor += 1
            return self._cursor % num_partitions
        self._count += 1
        self._bytes += msg.size
        now = self._clock()
        if (
            self._count > config.batching_max_messages
            or self._bytes > config.batching_max_allowed_size_in_bytes
            or now - self._since >= config.batching_max_publish_delay_ms / 1000
        ):
            self._cursor += 1
            self._count = 1
            self._bytes = msg.size
            self._since = now
        return self._cursor % num_partitions


class PartitionedProducer:
    """Presents the partitions' producers as one producer."""

    def __init__(
        self, core: ClientCore, topic: str, config: ProducerConfig, num_partitions: int
    ) -> None:
        self.topic = topic
        self._core = core
        self._config = config
        self._per_partition = min(
            config.max_pending_messages,
            max(1, config.max_pending_messages_across_partitions // num_partitions),
        )
        self.producers = [self._new_producer(i) for i in range(num_partitions)]
        self._router = MessageRouter(config)
        self._watcher = PartitionWatcher(core, topic, num_partitions, self._add_partitions)

    def _new_producer(self, index: int) -> ProducerImpl:
        config = self._config
        sub_config = ProducerConfig(**{k: getattr(config, k) for k in config.__slots__})
        sub_config.max_pending_messages = self._per_partition
        return ProducerImpl(self._core, partition_topic(self.topic, index), sub_config, index)

    async def start(self) -> None:
        """Create every partition's producer; on failure, close the ones that were created."""
        await self._start_all(self.producers)
        self._watcher.start()

    async def _start_all(self, producers: list[ProducerImpl]) -> None:
        results = await asyncio.gather(*(p.start() for p in producers), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)
            raise errors[0]

    async def _add_partitions(self, known: int, now: int) -> None:
        """Partitions were added: start their producers, then route messages to them too."""
        added = [self._new_producer(i) for i in range(known, now)]
        await self._start_all(added)
        self.producers.extend(added)

    @property
    def producer_name(self) -> str:
        return self.producers[0].producer_name

    @property
    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id for p in self.producers)

    @property
    def connected(self) -> bool:
        return all(p.connected for p in self.producers)

    def _pick(self, msg: OutgoingMessage) -> ProducerImpl:
        return self.producers[self._router.choose(msg, len(self.producers))]

    def send_nowait(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        return self._pick(msg).send_nowait(msg)

    async def send_async(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        return await self._pick(msg).send_async(msg)

    async def send(self, msg: OutgoingMessage) -> MessageId:
        return await self._pick(msg).send(msg)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.producers))

    async def close(self) -> None:
        self._watcher.stop()
        await asyncio.gather(*(p.close() for p in self.producers))

    @property
    def is_closed(self) -> bool:
        return all(p.is_closed for p in self.producers)


async def open_producer(
    core: ClientCore, topic: str, config: ProducerConfig
) -> ProducerImpl | PartitionedProducer:
    """Create and start the producer of ``topic`` (fully qualified), partitioned or not."""
    partitions = await core.lookup.get_partitioned_metadata(topic)
    impl: ProducerImpl | PartitionedProducer
    if partitions > 0:
        impl = PartitionedProducer(core, topic, config, partitions)
    else:
        impl = ProducerImpl(core, topic, config)
    await impl.start()
    return impl
