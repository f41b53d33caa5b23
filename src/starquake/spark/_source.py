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
from starquake.spark._rows import SOURCE_SCHEMA
from starquake.spark._stream import PulsarStreamReader
from starquake.spark._write import PulsarBatchWriter, PulsarStreamWriter


class PulsarDataSource(DataSource):
    """Read and write Pulsar topics; see the package documentation for the options."""

    @classmethod
    def name(cls) -> str:
        return "pulsar"

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return PulsarBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PulsarStreamReader(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return PulsarBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return PulsarStreamWriter(self.options, schema, overwrite)


def register(spark: SparkSession) -> None:
    """Register the source with ``spark`` (only needed where auto-registration is off)."""
    spark.dataSource.register(PulsarDataSource)
