"""Datasets and streaming: the ``Roxxel`` dataset (virtual concatenation of shards) and what reads it."""

from roxxel.data.dataset import Roxxel

__all__ = ["Roxxel"]
