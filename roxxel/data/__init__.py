"""Datasets and streaming: the ``Roxxel`` dataset (virtual concatenation of shards) and what reads it."""

from roxxel.data.curriculum import Curriculum, Phase
from roxxel.data.dataset import Roxxel
from roxxel.data.stream import Stream

__all__ = ["Curriculum", "Phase", "Roxxel", "Stream"]
