"""Wording shared by user-facing messages of ``roxxel`` and ``roxxel-launch`` (dependency-free).

A count reads as English ("1 document", "2,048 documents"), never "1 documents" or
"2 shard(s)", and a message quoted inside a sentence does not end it twice ("found.. Retry").
tests/architecture/test_message_wording.py checks the messages for these
slips.
"""

from __future__ import annotations

__all__ = ["as_clause", "count"]

_IRREGULAR = {"process": "processes", "index": "indices", "slice": "slices"}


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in the singular for 1, else in the plural, with thousands separators.

    Args:
        n: how many (an int; ``-1`` and ``0`` take the plural, as in English).
        noun: the singular, e.g. ``"document"``.
        plural: the plural when it is not ``noun + "s"`` (``process`` -> ``processes`` is known).

    >>> count(1, "document"), count(2048, "document"), count(2, "process")
    ('1 document', '2,048 documents', '2 processes')
    """
    word = noun if n == 1 else (plural or _IRREGULAR.get(noun) or noun + "s")
    return f"{n:,} {word}"


def as_clause(message: object) -> str:
    """``str(message)`` without a final period, for a sentence that goes on after it.

    ``f"{as_clause(err)}. Retry."`` reads "... timed out. Retry." whether or not ``err``'s own
    message ends with a period (never "timed out.. Retry.").
    """
    return str(message).rstrip().rstrip(".")
