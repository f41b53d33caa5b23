"""Starquake: Apache Pulsar's model and wire protocol, in Python."""

from starquake._native import choose_build

__version__ = "0.1.0"
__all__ = ["__version__"]

choose_build()
