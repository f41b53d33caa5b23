"""Reading: the row layout of a read (fixed when it is planned) and the rows of one range."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from starquake.client.asyncio import Client, ConsumerCryptoFailureAction
from starquake.client.bulk import BulkReader, CryptoKeyReader, DataLossError
from starquake.client.exceptions import CryptoError, PulsarException, Timeout
from starquake.client.schema import SchemaInfo, SchemaType
from starquake.client.topics import base_topic
from starquake.spark._decode import Decoder
from starquake.spark._headers import add_headers
from starquake.spark._options import PulsarOptionError, ReadOptions, SourceTarget
from starquake.spark._plan import PulsarSourceError, RangePartition, resolve_partitions
from starquake.spark._rows import segments_to_record_batches
from starquake.spark._runtime import Session
from starquake.spark._typed import RAW_LAYOUT, RowLayout, layout_of

__all__ = ["ROWS_PER_BATCH", "plan_layout", "read_range"]

ROWS_PER_BATCH = 65536
QUEUE_BYTES = 32 << 20
"""Without ``receiverQueueSize``, a reading task's queue grows past its 10,000 messages to
what this many bytes hold: small messages need more permits than that in flight, or the task
waits on each permit round trip (about half the time of a read of 100-byte messages)."""


def crypto_args(reader_args: Mapping[str, Any]) -> dict[str, Any]:
    """The bulk reader's arguments for the options ``pulsar.reader.privateKeyPath`` and
    ``pulsar.reader.cryptoFailureAction``."""
    args: dict[str, Any] = {}
    path = reader_args.get("private_key_path")
    if path is not None:
        args["crypto_key_reader"] = CryptoKeyReader("", path)  # readers need no public key
    action = reader_args.get("crypto_failure_action")
    if action is not None:
        args["crypto_failure_action"] = (
            action
            if isinstance(action, ConsumerCryptoFailureAction)
            else ConsumerCryptoFailureAction[action]
        )
    return args


def _no_schema(info: SchemaInfo | None) -> bool:
    return info is None or info.type in (SchemaType.BYTES, SchemaType.NONE)


def _same(a: SchemaInfo | None, b: SchemaInfo | None) -> bool:
    if a is None or b is None or _no_schema(a) or _no_schema(b):
        return _no_schema(a) and _no_schema(b)
    return a.same_definition(b)


def _describe(info: SchemaInfo | None) -> str:
    return "no schema" if info is None or _no_schema(info) else f"schema type {info.type.name}"


async def _layout(client: Client, target: SourceTarget) -> RowLayout:
    if target.pattern is not None:
        topics = sorted({base_topic(p) for p in await resolve_partitions(client, target)})
    else:
        topics = list(target.topics)
    infos = [(topic, await client.get_schema_info(topic)) for topic in topics]
    if not infos:
        return RAW_LAYOUT
    first, first_info = infos[0]
    for topic, info in infos[1:]:
        if _same(first_info, info):
            continue
        if _describe(first_info) == _describe(info):
            kind = info.type.name if info is not None else ""
            found = f"{first} and {topic} have different {kind} schemas"
        else:
            found = f"{first} has {_describe(first_info)} and {topic} has {_describe(info)}"
        raise PulsarOptionError(
            f"option 'schema.decode': the topics read must share one schema, but {found}; "
            "read them separately"
        )
    return layout_of(first_info, first)


def plan_layout(target: SourceTarget | None) -> RowLayout:
    """Driver side: the row layout of a read: the raw one without ``schema.decode``
    (``target`` None), else the one of the topics' latest schema, which they must share."""
    if target is None:
        return RAW_LAYOUT
    with Session(target.service_url, target.client_args) as session:
        try:
            return session.run(_layout(session.client, target))
        except PulsarException as exc:
            raise PulsarSourceError(f"fetching the topic schema failed: {exc}") from exc


def read_range(
    opts: ReadOptions, part: RangePartition, layout: RowLayout = RAW_LAYOUT
) -> Iterator[pa.RecordBatch]:
    """Executor side: the rows of one range as Arrow record batches of ``layout`` (and a
    ``headers`` column with ``includeHeaders``)."""
    batches = _read_range(opts, part, layout)
    if not opts.include_headers:
        return batches
    return (add_headers(batch) for batch in batches)


async def _open_reader(
    session: Session, opts: ReadOptions, part: RangePartition, with_schema_versions: bool
) -> BulkReader:
    """The bulk reader of one range, with the read options' reader settings."""
    given = opts.reader_args.get("receiver_queue_size")
    try:
        return await BulkReader.create(
            session.client,
            part.topic,
            part.start,
            part.end,
            receiver_queue_size=10000 if given is None else int(given),
            wait_timeout=opts.poll_timeout_s,
            fail_on_data_loss=opts.fail_on_data_loss,
            with_schema_versions=with_schema_versions,
            **crypto_args(opts.reader_args),
            subscription_prefix=opts.reader_args.get("subscription_role_prefix") or "bulk-reader",
            consumer_name=opts.reader_args.get("reader_name"),
            max_queue_bytes=QUEUE_BYTES if given is None else 0,
        )
    except DataLossError as exc:
        raise PulsarSourceError(f"{exc} (option failOnDataLoss)") from exc
    except (PulsarException, OSError) as exc:
        raise PulsarSourceError(f"cannot read {part.topic}: {exc}") from exc


def _read_range(
    opts: ReadOptions, part: RangePartition, layout: RowLayout
) -> Iterator[pa.RecordBatch]:
    with Session(opts.service_url, opts.client_args) as session:

        def fetch(version: int) -> SchemaInfo | None:
            try:
                return session.run(session.client.get_schema_info(part.topic, version))
            except PulsarException as exc:
                raise PulsarSourceError(
                    f"fetching schema version {version} of {part.topic} failed: {exc}"
                ) from exc

        decoder = Decoder(layout, part.topic, fetch) if layout.kind != "raw" else None
        versions = decoder is not None and decoder.needs_versions
        reader = session.run(_open_reader(session, opts, part, versions))
        try:
            while not reader.done:
                try:
                    if decoder is None:
                        segments = session.run(reader.read_segments(ROWS_PER_BATCH))
                        yield from segments_to_record_batches(segments, part.topic)
                        continue
                    cols = session.run(reader.read(ROWS_PER_BATCH))
                except Timeout as exc:
                    raise PulsarSourceError(
                        f"reading {part.topic} [{part.start}, {part.end}): {exc} "
                        "(option pollTimeoutMs)"
                    ) from exc
                except DataLossError as exc:
                    raise PulsarSourceError(f"{exc} (option failOnDataLoss)") from exc
                except CryptoError as exc:
                    raise PulsarSourceError(
                        f"{exc} (options pulsar.reader.privateKeyPath, "
                        "pulsar.reader.cryptoFailureAction)"
                    ) from exc
                if len(cols):
                    yield decoder.record_batch(cols)
        finally:
            session.run(reader.close())
