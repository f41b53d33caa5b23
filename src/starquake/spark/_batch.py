"""Batch reads: ``spark.read.format("pulsar")``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from starquake.client.exceptions import PulsarException
from starquake.spark._option_types import short
from starquake.spark._options import read_options
from starquake.spark._plan import (
    Probes,
    PulsarSourceError,
    RangePartition,
    plan_ranges,
    resolve_partitions,
    resolve_position,
)
from starquake.spark._read import read_range
from starquake.spark._runtime import Session
from starquake.spark._typed import RAW_LAYOUT, RowLayout


class PulsarBatchReader(DataSourceReader):
    """Reads the range fixed when the query is planned: ``startingOffsets`` (default earliest)
    up to ``endingOffsets`` (default: the last message at planning time)."""

    def __init__(self, options: Mapping[str, str], layout: RowLayout = RAW_LAYOUT) -> None:
        self._opts = read_options(options, streaming=False)
        self._layout = layout

    def partitions(self) -> Sequence[InputPartition]:
        opts = self._opts
        with Session(opts.service_url, opts.client_args) as session:
            try:
                return session.run(self._plan(session))
            except PulsarException as exc:
                raise PulsarSourceError(f"planning the read failed: {exc}") from None
            except PulsarSourceError as exc:
                raise short(exc) from None

    async def _plan(self, session: Session) -> list[RangePartition]:
        opts = self._opts
        client = session.client
        names = await resolve_partitions(client, opts)
        if not names and opts.pattern is not None:
            namespace = "/".join(opts.pattern.partition("://")[2].split("/")[:2])
            raise PulsarSourceError(
                f"option 'topicsPattern': no topic of namespace {namespace} matches "
                f"{opts.pattern!r} (the pattern is a regular expression over full topic names)"
            )
        probes = Probes(client, opts.poll_timeout_s)
        try:
            lasts = await probes.last_positions(names)
        finally:
            await probes.close()
        starts = {p: await resolve_position(client, opts.starting, p, lasts[p]) for p in names}
        ends = {
            p: await resolve_position(client, opts.ending, p, lasts[p], "endingTime") for p in names
        }
        return plan_ranges(starts, ends, opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return  # nothing to read: Spark plans one empty partition in place of none
        yield from read_range(self._opts, partition, self._layout)
