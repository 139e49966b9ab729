"""The dataset manifest (``dataset.json``): every shard of a dataset, in order, in one small file.

Opening a dataset of thousands of shards on a FUSE mount then reads this one file; a
shard's own header is read only when its tokens are first needed. The manifest also
carries what must agree across shards (dtype, vocabulary, EOS id, tokenizer) and each
shard's SHA-256, so ``verify()`` can tell a swapped or damaged shard from a good one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import posixpath
import re
from typing import Any, Mapping, Sequence

from roxxel.format.atomic import atomic_write
from roxxel.format.errors import CorruptShardError, ShardNotFoundError

MANIFEST_NAME = "dataset.json"
MANIFEST_FORMAT = "roxxel.dataset"
MANIFEST_VERSION = 1
ID_FIELDS = ("tokenizer", "vocab_size", "eos_id")
"""What a manifest and each shard's metadata record of the token ids, and what must agree for
ids to mean the same thing: across the shards of a dataset, an append and a blend (the
tokenizer first: another one is the cause of any other difference)."""


def first_difference(a: Mapping[str, Any], b: Mapping[str, Any], fields: Sequence[str] = ID_FIELDS) -> str | None:
    """The first of ``fields`` whose values in ``a`` and ``b`` differ (a missing key counts as None), or None."""
    return next((k for k in fields if a.get(k) != b.get(k)), None)


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """One shard as the manifest lists it. ``path`` is relative to the manifest's directory."""

    path: str
    num_tokens: int
    num_documents: int
    bytes: int
    sha256: str


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A dataset: its shards in order and the properties they share.

    Attributes:
        dtype: token dtype name (``uint8``/``uint16``/``uint32``).
        vocab_size: number of token ids (None when unknown).
        eos_id: id appended after each document (None when documents carry no EOS).
        tokenizer: identity of the tokenizer (``{"type": ..., "sha256": ...}``) or None.
        shards: the shards, in dataset order.
    """

    dtype: str
    vocab_size: int | None
    eos_id: int | None
    tokenizer: dict[str, Any] | None
    shards: tuple[ShardEntry, ...]
    writer_version: str
    created: str

    @property
    def num_tokens(self) -> int:
        """Tokens in all shards."""
        return sum(s.num_tokens for s in self.shards)

    @property
    def num_documents(self) -> int:
        """Documents in all shards."""
        return sum(s.num_documents for s in self.shards)

    def fingerprint(self) -> str:
        """SHA-256 (hex) identifying the dataset's content: dtype, vocabulary and every shard's checksum, in order."""
        ident = {
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "shards": [[s.num_tokens, s.sha256] for s in self.shards],
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The manifest as the JSON object written to ``dataset.json``."""
        return {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "tokenizer": self.tokenizer,
            "num_tokens": self.num_tokens,
            "num_documents": self.num_documents,
            "writer_version": self.writer_version,
            "created": self.created,
            "shards": [dataclasses.asdict(s) for s in self.shards],
        }

    def save(self, path: str) -> None:
        """Write atomically (temporary file + rename)."""
        with atomic_write(path, "w") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path: str) -> Manifest:
        """Read a manifest.

        Raises:
            ShardNotFoundError: no such file.
            CorruptShardError: not a Roxxel manifest, or an unreadable one (names the file); a
                shard path that is not a relative name inside the manifest's directory.
        """
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            raise ShardNotFoundError(f"dataset manifest not found (or a dangling link): {path}") from None
        except (IsADirectoryError, PermissionError) as e:
            raise CorruptShardError(
                f"{path}: cannot read the dataset manifest ({e.strerror}); fix or remove it", path
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CorruptShardError(
                f"{path}: dataset manifest is not valid JSON ({e}); re-pack the dataset", path
            ) from None
        if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
            raise CorruptShardError(
                f'{path}: not a Roxxel dataset manifest (missing "format": "{MANIFEST_FORMAT}")', path
            )
        if raw.get("format_version", 0) > MANIFEST_VERSION:
            raise CorruptShardError(
                f"{path}: manifest version {raw['format_version']} is newer than this Roxxel reads; upgrade roxxel",
                path,
            )
        try:
            shards = tuple(ShardEntry(**s) for s in raw["shards"])
            m = cls(
                dtype=raw["dtype"],
                vocab_size=raw.get("vocab_size"),
                eos_id=raw.get("eos_id"),
                tokenizer=raw.get("tokenizer"),
                shards=shards,
                writer_version=raw.get("writer_version", "?"),
                created=raw.get("created", "?"),
            )
        except (KeyError, TypeError) as e:
            raise CorruptShardError(
                f"{path}: dataset manifest is missing or has a malformed field ({e}); re-pack the dataset", path
            ) from None
        for s in shards:
            _check_shard_path(path, s.path)
        problem = _malformed(m) or _inconsistent(m, raw)
        if problem:
            raise CorruptShardError(
                f"{path}: {problem}; the manifest was edited or damaged - restore it or re-pack the dataset", path
            )
        return m


_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")  # in C: a manifest may list 10^5 shards, and each open reads them all


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _malformed(m: Manifest) -> str | None:
    """What in a loaded manifest has the wrong type or range (JSON gives any type anywhere), or None."""
    if not isinstance(m.dtype, str):
        return f"dtype {m.dtype!r} is not a dtype name"
    if m.vocab_size is not None and not (_count(m.vocab_size) and m.vocab_size > 0):
        return f"vocab_size {m.vocab_size!r} is not a positive int"
    if m.eos_id is not None and not (_count(m.eos_id) and (m.vocab_size is None or m.eos_id < m.vocab_size)):
        return f"eos_id {m.eos_id!r} is not an id of the vocabulary"
    if m.tokenizer is not None and not isinstance(m.tokenizer, dict):
        return f"tokenizer {m.tokenizer!r} is not an object"
    for k, s in enumerate(m.shards):
        for field in ("num_tokens", "num_documents", "bytes"):
            if not _count(getattr(s, field)):
                return f"shard {k} ({s.path!r}) has {field} {getattr(s, field)!r}, not a count"
        if not (isinstance(s.sha256, str) and _HEX_SHA256.fullmatch(s.sha256)):
            return f"shard {k} ({s.path!r}) has sha256 {s.sha256!r}, not a hex SHA-256"
    return None


def _inconsistent(m: Manifest, raw: dict[str, Any]) -> str | None:
    """A shard listed twice, or totals that are not the sums of the shard list (an entry removed or added), or None."""
    paths = [s.path for s in m.shards]
    if len(set(paths)) < len(paths):
        twice = next(p for p in paths if paths.count(p) > 1)
        return f"it lists shard {twice!r} {paths.count(twice)} times"
    for field in ("num_tokens", "num_documents"):
        if field in raw and raw[field] != getattr(m, field):
            return f"its {field} is {raw[field]!r} but its shards hold {getattr(m, field)}"
    return None


def _check_shard_path(manifest: str, name: object) -> None:
    """Refuse shard paths that leave the dataset directory (``../x``, ``/etc/passwd``, ``a/../../b``)."""
    ok = (
        isinstance(name, str)
        and name
        and not os.path.isabs(name)
        and "\\" not in name
        and "\0" not in name
        and ".." not in name.split("/")
        and posixpath.normpath(name) == name
    )
    if not ok:
        raise CorruptShardError(
            f"{manifest}: shard path {name!r} is not a relative name inside the dataset directory; a manifest may "
            "only list shards next to it (or below it) - fix the manifest or re-pack the dataset",
            manifest,
        )
