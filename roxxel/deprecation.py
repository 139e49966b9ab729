"""Renamed parameters: the old name keeps working, warns once per call, and names the new one.

Roxxel renamed some of the original's parameters to the field's terms (``datasets`` for
``primary_streamer``/``mix_streamers``, ``save_interval_steps`` for ``checkpoint_every``, ...).
The old names stay accepted; :func:`renamed` is the one place that decides what a call that
uses one of them means, so every renamed parameter behaves alike.

The warning is a :class:`RoxxelDeprecationWarning`, a ``FutureWarning``: Python's warnings
documentation names that category for deprecated features meant for the users of an
application, and shows it by default wherever the call is. A ``DeprecationWarning`` is shown
by default only when it points into ``__main__``, so a training library of the user's that
called an old name would never hear of it.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType
from typing import Any

__all__ = ["RoxxelDeprecationWarning", "renamed", "warn_renamed"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class RoxxelDeprecationWarning(FutureWarning):
    """A Roxxel name or keyword that is deprecated: it still works, and the message names what
    replaces it.

    A ``FutureWarning`` (not a ``DeprecationWarning``), so that Python shows it by default from
    any module, the user's imported ones included (the warnings module's documentation: the
    category for deprecated features aimed at end users). Each call site warns once, as
    Python's default filter action does. To turn them into errors:
    ``warnings.simplefilter("error", RoxxelDeprecationWarning)`` or
    ``-W error::roxxel.deprecation.RoxxelDeprecationWarning``; to hide them, ``"ignore"``.
    """


def warn_renamed(owner: str, old: str, new: str) -> None:
    """Emit the :class:`RoxxelDeprecationWarning` for ``owner``'s parameter ``old``, renamed to ``new``.

    The warning points at the first caller outside the ``roxxel`` package, however deep inside
    Roxxel the old name was read: it names the user's line, and Python's "once per location"
    counts the user's call sites, not Roxxel's.
    """
    warnings.warn(
        f"{owner}: {old} is deprecated, use {new} instead (same meaning)",
        RoxxelDeprecationWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """``stacklevel`` for a :func:`warnings.warn` in :func:`warn_renamed`: the first frame outside roxxel."""
    # The caller of warn_renamed (level 1 is warn_renamed itself). Private access: warnings.warn's
    # skip_file_prefixes needs Python 3.12; sys._getframe is CPython's documented frame access until then.
    frame: FrameType | None = sys._getframe(2)  # noqa: SLF001  (see above)
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def renamed(owner: str, new: str, new_value: Any, old: str, old_value: Any) -> Any:
    """The value of a parameter given under its new name, its old name, or neither.

    Args:
        owner: what takes the parameter, for messages (``"Trainer"``).
        new, new_value: the parameter's name and value (``None``: not given).
        old, old_value: its deprecated name and value (``None``: not given).

    Returns:
        ``new_value``, else ``old_value`` (after a :class:`RoxxelDeprecationWarning`), else ``None``.

    Raises:
        ValueError: both names given with different values (names both and the fix).
    """
    if old_value is None:
        return new_value
    if new_value is not None and not _same(new_value, old_value):
        raise ValueError(
            f"{owner}: {new}={new_value!r} and its deprecated name {old}={old_value!r} disagree; give only {new}"
        )
    warn_renamed(owner, old, new)
    return old_value if new_value is None else new_value


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:  # objects whose == is not a bool (arrays): only identity counts
        return a is b
