"""Roxxel: train JAX models on multi-host pods from memory-mapped token shards."""

from roxxel._version import __version__
from roxxel.data.dataset import Roxxel

__all__ = ["__version__", "Roxxel"]
