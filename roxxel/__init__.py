"""Roxxel: train JAX models on multi-host pods from memory-mapped token shards.

``import roxxel`` stays light (no numpy, no JAX): the public names below are imported on
first use (PEP 562 module ``__getattr__``), so that ``roxxel-launch`` and ``roxxel-worker``
can use :mod:`roxxel.contract` without loading the training stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roxxel._lazy import lazy_names
from roxxel._version import __version__

if TYPE_CHECKING:  # what the lazy names resolve to, for type checkers and editors
    from roxxel.compat import Roxxel
    from roxxel.data import Curriculum, Dataset, Phase, Stream
    from roxxel.deprecation import RoxxelDeprecationWarning
    from roxxel.train import Checkpointer, Logger, Trainer

# Public name -> the module that defines it.
_LAZY = {
    "Curriculum": "roxxel.data",
    "Phase": "roxxel.data",
    "Dataset": "roxxel.data",
    "Roxxel": "roxxel.compat",
    "RoxxelDeprecationWarning": "roxxel.deprecation",
    "Stream": "roxxel.data",
    "Checkpointer": "roxxel.train",
    "Logger": "roxxel.train",
    "Trainer": "roxxel.train",
}

__all__ = [
    "__version__",
    "Checkpointer",
    "Curriculum",
    "Dataset",
    "Logger",
    "Phase",
    "Roxxel",
    "RoxxelDeprecationWarning",
    "Stream",
    "Trainer",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


def _watch_configuration_errors() -> None:
    """Under ``roxxel-worker``, an uncaught configuration error is reported to it (see roxxel.exit_codes),
    and with ``ROXXEL_LOG_FORMAT=json`` roxxel's log lines are JSON (see roxxel.log_format)."""
    import os

    from roxxel.contract import ENV_CONFIG_ERROR_FILE, ENV_LOG_FORMAT

    if os.environ.get(ENV_LOG_FORMAT):  # JSON log lines first: the hook below wraps their excepthook
        from roxxel.log_format import install

        install()
    path = os.environ.get(ENV_CONFIG_ERROR_FILE)
    if path:
        from roxxel.exit_codes import report_configuration_errors

        report_configuration_errors(path)


_watch_configuration_errors()
