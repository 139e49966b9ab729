"""Errors raised when reading or writing Roxxel shards and datasets.

Every error names the file it is about and, where there is one, the fix. All of them
derive from :class:`RoxxelFormatError` (a ``ValueError``) except the two that are
about a path's existence, which derive from the matching built-in ``OSError``
subclasses so that ``except FileNotFoundError`` keeps working.

What a restart would meet again (a missing, truncated, corrupt or mixed-up file, an empty or
unfinished dataset) is also a :class:`~roxxel.exit_codes.ConfigurationError`: uncaught under
``roxxel-worker`` it exits 78 and the job is not restarted. A dataset locked by a pack that
is still running (:class:`DatasetLockedError`) and a failed read (:class:`ShardReadError`:
EIO, ESTALE) are not: a later attempt may succeed.
"""

from __future__ import annotations

from roxxel.exit_codes import ConfigurationError


def for_cli(err: BaseException, message: str) -> BaseException:
    """Give ``err`` the wording a command line shows instead of ``str(err)``; return it.

    The library's messages name Python arguments (``append=True``); a command's user knows
    its flags (``--append``). ``roxxel`` prints ``err.cli_message`` when an error has one.
    """
    err.cli_message = message  # type: ignore[attr-defined]
    return err


class RoxxelFormatError(ValueError):
    """A shard or dataset is malformed, inconsistent, or cannot be used as asked."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class ShardNotFoundError(FileNotFoundError, ConfigurationError):
    """A shard, manifest, or dataset path does not exist (or a glob matched nothing)."""


class DatasetExistsError(FileExistsError):
    """Writing would mix with an existing dataset; pass ``append=True`` (``--append``) or pick an empty directory."""


class BadSignatureError(RoxxelFormatError, ConfigurationError):
    """The file does not start (new format) or end (``ROXXEL02``) with a Roxxel signature."""


class TruncatedShardError(RoxxelFormatError, ConfigurationError):
    """The file is shorter than its header says; the message names the region where it ends."""


class CorruptShardError(RoxxelFormatError, ConfigurationError):
    """The header, footer or document index contradict each other."""


class ChecksumMismatchError(RoxxelFormatError, ConfigurationError):
    """The SHA-256 recomputed by ``verify()`` differs from the one stored in the footer or the manifest."""


class BlockChecksumError(ChecksumMismatchError):
    """A block of token data does not match the CRC-32 stored for it (checked on its first read)."""


class DatasetLockedError(RoxxelFormatError):
    """Another pack or append holds the dataset's lock; wait for it to finish, then retry."""


class DtypeMismatchError(RoxxelFormatError, ConfigurationError):
    """Shards of one dataset disagree on token dtype (or tokenizer), or a token does not fit the dtype;
    also datasets blended or appended to that do (the same on every attempt)."""


class EmptyDatasetError(RoxxelFormatError, ConfigurationError):
    """The dataset holds no tokens."""


class IncompleteDatasetError(RoxxelFormatError, ConfigurationError):
    """A pack into this directory did not finish (it was killed); re-run the pack."""


class ShardChangedError(RoxxelFormatError, ConfigurationError):
    """A shard's file changed while this process read it: rewritten in place (size, modification or
    change time moved), replaced by another file at its path, or removed. The message says what
    changed. A configuration error (exit 78, not restarted): a restart would read other tokens than
    the run's past batches, so a person must decide (restore the shard, or start a new run)."""


class ShardReadError(OSError):
    """The storage failed a read of a shard (EIO, ESTALE, a FUSE daemon gone, a timeout).

    An ``OSError`` with the original ``errno``; the message names the shard, the mount point
    (and file system type) that holds it, and whether a retry can help. Not a configuration
    error: the job is restarted from its checkpoint, since a network or FUSE mount often
    recovers. Attributes: ``path``, ``mount``, ``fstype`` (None when unknown).
    """

    def __init__(self, code: int, message: str, path: str, mount: str | None = None, fstype: str | None = None):
        super().__init__(code, message)
        self.path, self.mount, self.fstype = path, mount, fstype

    def __str__(self) -> str:
        return str(self.strerror)
