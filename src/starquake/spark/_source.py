"""The ``pulsar`` data source: what Spark instantiates for ``format("pulsar")``."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from starquake.spark._batch import PulsarBatchReader
from starquake.spark._headers import with_headers
from starquake.spark._option_types import short
from starquake.spark._options import (
    PulsarOptionError,
    check_read_options,
    include_headers,
    source_target,
)
from starquake.spark._plan import PulsarSourceError
from starquake.spark._read import plan_layout
from starquake.spark._sink import PulsarSinkError
from starquake.spark._stream import PulsarStreamReader
from starquake.spark._typed import RowLayout
from starquake.spark._write import PulsarBatchWriter, PulsarStreamWriter


class PulsarDataSource(DataSource):
    """Read and write Pulsar topics; see the package documentation for the options."""

    # Set by schema() on the driver; Spark pickles the source with it for reader() (Spark
    # asks that __init__ be left as it is).
    _layout: RowLayout | None = None

    @classmethod
    def name(cls) -> str:
        return "pulsar"

    def _row_layout(self, given: StructType | None = None) -> RowLayout:
        if self._layout is not None:
            return self._layout
        layout = plan_layout(source_target(self.options))
        expected = with_headers(layout.schema) if include_headers(self.options) else layout.schema
        if given is not None and layout.kind != "raw" and given != expected:
            # schema() was not called: the query gave its own schema
            raise PulsarOptionError(
                "option 'schema.decode': the schema given to the read, "
                f"{given.simpleString()}, differs from the topic's, "
                f"{expected.simpleString()}; leave the schema out"
            )
        self._layout = layout
        return layout

    def _full_schema(self) -> StructType:
        """The layout's schema, and the ``headers`` column with ``includeHeaders``."""
        schema = self._row_layout().schema
        return with_headers(schema) if include_headers(self.options) else schema

    def schema(self) -> StructType:
        # Spark asks for the schema at load(), for batch and streaming reads alike, while a
        # stream's reader is made only once the query runs: options wrong for both kinds of
        # read fail here, at load(), not at awaitTermination()
        try:
            check_read_options(self.options)
            return self._full_schema()
        except _OURS as exc:
            raise short(exc) from None

    def reader(self, schema: StructType) -> DataSourceReader:
        try:
            return PulsarBatchReader(self.options, self._row_layout(schema))
        except _OURS as exc:
            raise short(exc) from None

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return PulsarStreamReader(self.options, self._row_layout(schema))
        except _OURS as exc:
            raise short(exc) from None

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        try:
            return PulsarBatchWriter(self.options, schema, overwrite)
        except _OURS as exc:
            raise short(exc) from None

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        try:
            return PulsarStreamWriter(self.options, schema, overwrite)
        except _OURS as exc:
            raise short(exc) from None


_OURS = (PulsarOptionError, PulsarSourceError, PulsarSinkError)


def register(spark: SparkSession) -> None:
    """Register the source with ``spark`` (only needed where auto-registration is off)."""
    spark.dataSource.register(PulsarDataSource)
