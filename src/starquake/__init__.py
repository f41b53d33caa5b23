"""Starquake: Apache Pulsar's model and wire protocol, in Python."""

__version__ = "0.1.0"
__all__ = ["__version__"]
