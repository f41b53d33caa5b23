"""PySpark data source ``pulsar``: read topics as DataFrames and write DataFrames to topics.

Installed with ``pip install 'starquake[spark]'``; the format is registered automatically
(the top-level module ``pyspark_pulsar`` exposes it to Spark), so::

    df = spark.read.format("pulsar").option("topic", "events").load()
    query = (spark.readStream.format("pulsar").option("topic", "events").load()
             .writeStream.format("pulsar").option("topic", "copy")
             .option("checkpointLocation", "/tmp/ckpt").start())

Rows: ``value`` binary, ``__key`` string, ``__topic`` string, ``__messageId`` binary (a
serialized message id), ``__publishTime`` and ``__eventTime`` timestamps,
``__messageProperties`` map<string,string>; with ``option("includeHeaders", "true")`` also
Kafka's ``headers`` array<struct<key string, value binary>>. The options are listed in the
README; those with the names of Spark's Kafka source mean what they mean there.

Typed rows: ``option("schema.decode", "true")`` reads values decoded with the topic's schema
(an AVRO or JSON record's fields as columns, or one typed ``value`` column for STRING and the
number schemas; see :mod:`starquake.spark._typed`), and ``option("schema.type", "avro")``
(or ``json``, ``string``) writes the value columns as records of a schema derived from the
DataFrame's, which the producers register (see :mod:`starquake.spark._encode`).
"""

from __future__ import annotations

from starquake.spark._decode import PulsarDecodeError
from starquake.spark._options import PulsarOptionError
from starquake.spark._plan import PulsarSourceError
from starquake.spark._sink import PulsarSinkError
from starquake.spark._source import PulsarDataSource, register

__all__ = [
    "PulsarDataSource",
    "PulsarDecodeError",
    "PulsarOptionError",
    "PulsarSinkError",
    "PulsarSourceError",
    "register",
]
