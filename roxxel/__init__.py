"""Roxxel: train JAX models on multi-host pods from memory-mapped token shards."""

from roxxel._version import __version__
from roxxel.data import Curriculum, Phase, Roxxel, Stream

__all__ = ["__version__", "Curriculum", "Phase", "Roxxel", "Stream"]
