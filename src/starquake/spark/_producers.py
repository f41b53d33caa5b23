"""The producers of one write task: one per partition of every topic it writes to, opened
with the task's producer name, and the check that the broker deduplicates what they send."""

from __future__ import annotations

import asyncio
from typing import Any

from starquake.client import CompressionType, CryptoKeyReader
from starquake.client.asyncio import Client, Producer, Transaction
from starquake.client.exceptions import ProducerBusy
from starquake.client.schema import Schema
from starquake.client.topics import base_topic, normalize_topic
from starquake.spark._options import WriteOptions
from starquake.spark._sink import (
    PulsarSinkError,
    deduplication_off_error,
    ensure_deduplication,
    hold_topic,
)

__all__ = ["ProducerResent", "Targets"]

_CODECS = {
    "none": CompressionType.NONE,
    "lz4": CompressionType.LZ4,
    "zlib": CompressionType.ZLib,
    "zstd": CompressionType.ZSTD,
    "snappy": CompressionType.SNAPPY,
}


class ProducerResent(PulsarSinkError):
    """A producer of a transactional write reconnected and sent again what the broker had not
    confirmed: without deduplication the broker may have stored it twice in the transaction,
    which is therefore aborted (and the task's rows written again in a new one)."""


class Targets:
    """The producers of one task: one per partition of every topic it writes to."""

    def __init__(
        self,
        client: Client,
        opts: WriteOptions,
        name: str,
        schema: Schema | None = None,
        checked: bool = False,
        txn: Transaction | None = None,
    ) -> None:
        self._client = client
        self._txn = txn  # the transaction of every row (a transactional write)
        self._opts = opts
        self._name = name
        self._schema = schema
        self._producers: dict[str, list[Producer]] = {}
        # topics whose deduplication is known to be on (the admin API said so)
        self._checked: set[str] = {opts.topic} if checked and opts.topic else set()
        # producers (by id) whose name the broker did not know: deduplication may be off
        self._unverified: set[int] = set()

    async def producers(self, topic: str) -> list[Producer]:
        """The producers for ``topic`` (as the row names it: normalized once per name)."""
        found = self._producers.get(topic)
        if found is not None:
            return found
        name = normalize_topic(topic)
        found = self._producers.get(name)
        if found is not None:
            self._producers[topic] = found
            return found
        found = await self._open_all(name)
        self._producers[name] = self._producers[topic] = found
        return found

    async def _open_all(self, topic: str) -> list[Producer]:
        opts = self._opts
        if (
            opts.exactly_once
            and topic != opts.topic
            and opts.admin_url is not None
            and ensure_deduplication(opts.admin_url, topic, opts.poll_timeout_s, opts.admin_args)
        ):
            self._checked.add(topic)
        if opts.sink_subscription and topic != opts.topic:
            await hold_topic(self._client, topic, opts.sink_subscription)
        for _ in range(3):
            names = await self._client.get_topic_partitions(topic)
            producers = [await self._open(p) for p in names]
            if len(producers) != 1 or not producers[0].is_partitioned:
                return producers
            # created as a partitioned topic between the two lookups: ask again
            await producers[0].close()
        raise PulsarSinkError(f"the partitions of {topic} keep changing")

    async def _open(self, partition: str) -> Producer:
        args: dict[str, Any] = {
            "batching_max_messages": 1000,
            "max_pending_messages": 10000,
            "batching_max_publish_delay_ms": 5,
            **self._opts.producer_args,
        }
        if "compression_type" in args:
            args["compression_type"] = _CODECS[args["compression_type"]]
        public_key = args.pop("public_key_path", None)
        if public_key is not None:  # producers need no private key
            args["crypto_key_reader"] = CryptoKeyReader(public_key, "")
        args["block_if_queue_full"] = True
        if self._schema is not None:  # declared, so the broker registers it and versions rows
            args["schema"] = self._schema
        deadline = asyncio.get_running_loop().time() + self._opts.poll_timeout_s
        while True:
            try:
                producer = await self._client.create_producer(
                    partition, producer_name=self._name, **args
                )
                break
            except ProducerBusy:  # an earlier attempt of this task is still connected
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.5)
        if self._txn is not None:
            await self._txn.register_produced_topic(producer.topic())
        # With deduplication on, the broker tells a producer its name's last sequence id;
        # off, it always says -1. A name it does not know yet is checked after the first row.
        if (
            self._opts.exactly_once
            and base_topic(partition) not in self._checked
            and producer.last_sequence_id() < 0
        ):
            self._unverified.add(id(producer))
        return producer

    def unverified(self, producer: Producer) -> bool:
        """Whether deduplication is still to be checked through ``producer`` (one partition
        of a topic checked is enough: the setting is the topic's)."""
        return id(producer) in self._unverified and (
            base_topic(producer.topic()) not in self._checked
        )

    async def verify(self, producer: Producer, sequence_id: int) -> Producer:
        """After ``producer`` stored ``sequence_id`` (its receipt came): open its name again
        and check that the broker reports that id, as it does only with deduplication on;
        the producer that replaces ``producer``."""
        partition = producer.topic()
        self._unverified.discard(id(producer))
        await producer.close()
        again = await self._open(partition)
        self._unverified.discard(id(again))
        for producers in self._producers.values():
            for i, p in enumerate(producers):
                if p is producer:
                    producers[i] = again
        if again.last_sequence_id() < sequence_id:
            raise deduplication_off_error(base_topic(partition))
        self._checked.add(base_topic(partition))
        return again

    def check_not_resent(self) -> None:
        """Raise :class:`ProducerResent` if a producer reconnected (see there)."""
        for producers in self._producers.values():
            for producer in producers:
                if producer.registrations > 1:
                    raise ProducerResent(
                        f"the producer of {producer.topic()} reconnected during the transaction"
                    )

    async def close(self) -> None:
        closed: set[int] = set()
        for producers in self._producers.values():
            for producer in producers:
                if id(producer) not in closed:
                    closed.add(id(producer))
                    await producer.close()
