"""Makes ``format("pulsar")`` work without ``register()``: Spark registers the ``DefaultSource``
of every top-level module named ``pyspark_<name>``."""

from starquake.spark import PulsarDataSource as DefaultSource

__all__ = ["DefaultSource"]
