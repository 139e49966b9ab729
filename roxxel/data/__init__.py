"""Datasets and streaming: the ``Dataset`` (virtual concatenation of shards) and what reads it.

The original API's ``Roxxel`` (a dataset that also streams and writes) is :class:`roxxel.Roxxel`,
in :mod:`roxxel.compat`. The names below are imported on first use: ``Dataset`` and the modules
that only read or write shards (``roxxel pack``, ``info``, ``verify``, ``cat``) need no JAX, which
``Stream`` and ``Curriculum`` load (about half a second).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roxxel._lazy import lazy_names

if TYPE_CHECKING:
    from roxxel.data.curriculum import Curriculum, Phase
    from roxxel.data.dataset import Dataset
    from roxxel.data.stream import Stream

_LAZY = {
    "Curriculum": "roxxel.data.curriculum",
    "Phase": "roxxel.data.curriculum",
    "Dataset": "roxxel.data.dataset",
    "Stream": "roxxel.data.stream",
}

__all__ = ["Curriculum", "Dataset", "Phase", "Stream"]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
