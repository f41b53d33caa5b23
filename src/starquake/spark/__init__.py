"""PySpark data source ``pulsar``: read topics as DataFrames and write DataFrames to topics.

Installed with ``pip install 'starquake[spark]'``; the format is registered automatically
(the top-level module ``pyspark_pulsar`` exposes it to Spark), so::

    df = spark.read.format("pulsar").option("topic", "events").load()
    query = (spark.readStream.format("pulsar").option("topic", "events").load()
             .writeStream.format("pulsar").option("topic", "copy")
             .option("checkpointLocation", "/tmp/ckpt").start())

Rows: ``value`` binary, ``__key`` string, ``__topic`` string, ``__messageId`` binary (a
serialized message id), ``__publishTime`` and ``__eventTime`` timestamps,
``__messageProperties`` map<string,string>. The options are listed in the README.
"""

from __future__ import annotations

from starquake.spark._options import PulsarOptionError
from starquake.spark._plan import PulsarSourceError
from starquake.spark._source import PulsarDataSource, register
from starquake.spark._write import PulsarSinkError

__all__ = [
    "PulsarDataSource",
    "PulsarOptionError",
    "PulsarSinkError",
    "PulsarSourceError",
    "register",
]
