"""Datasets and streaming: the ``Dataset`` (virtual concatenation of shards) and what reads it.

The original API's ``Roxxel`` (a dataset that also streams and writes) is :class:`roxxel.Roxxel`,
in :mod:`roxxel.compat`.
"""

from roxxel.data.curriculum import Curriculum, Phase
from roxxel.data.dataset import Dataset
from roxxel.data.stream import Stream

__all__ = ["Curriculum", "Dataset", "Phase", "Stream"]
