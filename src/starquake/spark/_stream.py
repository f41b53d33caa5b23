"""Streaming reads: ``spark.readStream.format("pulsar")`` (micro-batch).

Spark keeps this reader in one long-lived Python process on the driver and pickles it to the
executors for :meth:`read`; the driver-side state (client, probes, counts) is therefore
created lazily and left out of the pickle. Offsets are resolved to concrete positions in
:meth:`initialOffset`, so checkpoints never hold ``earliest``/``latest``. Partitions and
topics that appear later (``topicsPattern``, partitions added to a topic) start at the
earliest position at the next trigger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from starquake.client.bulk import EARLIEST, Position
from starquake.client.exceptions import PulsarException
from starquake.spark._admission import Admission, EntryCountsApi
from starquake.spark._option_types import short
from starquake.spark._options import ReadOptions, read_options
from starquake.spark._plan import (
    Probes,
    PulsarSourceError,
    RangePartition,
    decode_offsets,
    encode_offsets,
    next_after,
    plan_ranges,
    resolve_partitions,
    resolve_position,
)
from starquake.spark._progress import SubscriptionProgress
from starquake.spark._read import read_range
from starquake.spark._runtime import Session
from starquake.spark._typed import RAW_LAYOUT, RowLayout

log = logging.getLogger("starquake.spark")


class _Driver:
    """Driver-side state of a streaming read."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.session = Session(opts.service_url, opts.client_args)
        self.probes = Probes(self.session.client, opts.poll_timeout_s)
        self.admission = Admission(
            self.session.client,
            opts.poll_timeout_s,
            # entry sizes (maxBytesPerTrigger) are known only from reading the entries
            EntryCountsApi(opts.admin_url, opts.admin_args, opts.poll_timeout_s)
            if opts.admin_url and not opts.limits.max_bytes
            else None,
        )
        self.progress = (
            SubscriptionProgress(self.session.client, opts.subscription)
            if opts.subscription
            else None
        )

    def run(self, what: str, coro: Any) -> Any:
        try:
            return self.session.run(coro)
        except PulsarException as exc:
            raise PulsarSourceError(f"{what} failed: {exc}") from None
        except PulsarSourceError as exc:
            raise short(exc) from None

    async def partitions(self) -> list[str]:
        names = await resolve_partitions(self.session.client, self.opts)
        if self.progress is not None:
            await self.progress.attach(names)
        return names

    async def latest(
        self, names: list[str]
    ) -> tuple[dict[str, Position], dict[str, Position | None]]:
        lasts = await self.probes.last_positions(names)
        ends = {p: next_after(last) if last is not None else EARLIEST for p, last in lasts.items()}
        return ends, lasts


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets are ``{"<partition>": [ledger, entry, batch]}``."""

    def __init__(self, options: Mapping[str, str], layout: RowLayout = RAW_LAYOUT) -> None:
        self._opts = read_options(options, streaming=True)
        self._layout = layout
        self._driver: _Driver | None = None
        self._target: tuple[dict[str, Position], dict[str, Position | None]] | None = None
        self._last_end: dict[str, Position] | None = None
        self._last_trigger_ms = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {
            "_opts": self._opts,
            "_layout": self._layout,
            "_driver": None,
            "_target": None,
            "_last_end": None,
            "_last_trigger_ms": 0.0,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def _d(self) -> _Driver:
        if self._driver is None:
            self._driver = _Driver(self._opts)
        return self._driver

    def initialOffset(self) -> dict[str, Any]:
        d = self._d
        return encode_offsets(d.run("resolving the starting offsets", self._initial(d)))

    async def _initial(self, d: _Driver) -> dict[str, Position]:
        names = await d.partitions()
        _ends, lasts = await d.latest(names)
        client = d.session.client
        return {p: await resolve_position(client, self._opts.starting, p, lasts[p]) for p in names}

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark takes one limit from a Python source; the others come from the options, in
        # latestOffset, unless Spark asks for everything (ReadAllAvailable: Trigger.Once)
        limits = self._opts.limits
        if limits.max_records:
            return ReadMaxRows(limits.max_records)
        if limits.max_bytes:
            return ReadMaxBytes(limits.max_bytes)
        if limits.min_records:
            return ReadMinRows(limits.min_records)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        d = self._d
        self._target = d.run("reading the latest offsets", self._latest_all(d))

    async def _latest_all(
        self, d: _Driver
    ) -> tuple[dict[str, Position], dict[str, Position | None]]:
        return await d.latest(await d.partitions())

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        d = self._d
        if start is None:  # Spark before 4.2: no admission control
            start = encode_offsets(self._last_end) if self._last_end else self.initialOffset()
        end = d.run("planning the next micro-batch", self._latest(d, decode_offsets(start), limit))
        self._last_end = end
        return encode_offsets(end)

    async def _latest(
        self, d: _Driver, start: dict[str, Position], limit: ReadLimit | None
    ) -> dict[str, Position]:
        if self._target is not None:
            ends, lasts = self._target
            names = sorted(set(ends) | set(start))
        else:
            names = sorted(set(await d.partitions()) | set(start))
            ends, lasts = await d.latest([n for n in names])
        starts = {p: start.get(p, EARLIEST) for p in names}
        end = {p: max(starts[p], ends.get(p, starts[p])) for p in names}
        if limit is None or isinstance(limit, ReadAllAvailable):
            return end
        limits = self._opts.limits
        if limits.min_records and self._target is None and await self._wait(d, starts, end, lasts):
            return dict(start)  # no batch (a partition new since would make an empty one)
        if limits.max_records:
            end = await d.admission.admit(
                starts, end, lasts, limits.max_records, advance=not limits.max_bytes
            )
        if limits.max_bytes:
            end = await d.admission.admit_bytes(starts, end, lasts, limits.max_bytes)
        return end

    async def _wait(
        self,
        d: _Driver,
        starts: dict[str, Position],
        end: dict[str, Position],
        lasts: Mapping[str, Position | None],
    ) -> bool:
        """Whether to skip this trigger (as Spark's Kafka source): fewer than
        ``minOffsetsPerTrigger`` rows are there and ``maxTriggerDelay`` has not passed since
        the last batch (the first trigger after a start never waits). Not with availableNow,
        which would then end before the data it was started for."""
        limits = self._opts.limits
        now = time.time() * 1000
        if now - self._last_trigger_ms >= limits.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        if await d.admission.count(starts, end, lasts, limits.min_records) < limits.min_records:
            return True
        self._last_trigger_ms = now
        return False

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return encode_offsets(self._last_end) if self._last_end else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ends = decode_offsets(end)
        starts = decode_offsets(start)
        return plan_ranges(starts, ends, self._opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self._opts, partition, self._layout)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's checkpoint holds the progress; with ``predefinedSubscription`` the
        subscription is moved there too."""
        d = self._d
        if d.progress is not None:
            d.run("moving the subscription", d.progress.commit(decode_offsets(end)))

    def stop(self) -> None:
        if self._driver is not None:
            d, self._driver = self._driver, None
            try:
                d.session.run(d.probes.close())
                d.session.run(d.admission.close())
                if d.progress is not None:
                    d.session.run(d.progress.close())
            finally:
                d.session.close()
