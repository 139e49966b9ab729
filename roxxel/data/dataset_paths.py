"""What a dataset path names: a manifest, a directory, a glob, one shard, or a ``STEM`` of shards.

:func:`resolve` turns one path into the manifests it names and the shards (:class:`Entry`)
they list or that it finds, in order; shards of a pack or append that did not finish are
refused or left out (the markers of :mod:`roxxel.format.directory`). :func:`check_found`
refuses, from the file system's names alone (nothing read), a path that names no dataset, so
that a dataset made on a wrong path fails where it is made. :func:`check_unlisted` refuses
shards next to a manifest that it does not list.
"""

from __future__ import annotations

import glob
import os
import re

from roxxel.format.errors import CorruptShardError, IncompleteDatasetError, ShardNotFoundError
from roxxel.format.manifest import MANIFEST_NAME, Manifest

_GLOB_CHARS = "*?["
NOT_FOUND_FIX = "pack it first (roxxel pack INPUTS -o DIR), or check the path and that its storage is mounted"
"""The fix every "dataset not found" message names: the data was never packed, or is elsewhere."""


class Entry:
    """A shard of the dataset: its path and, when a manifest listed it, its expected counts."""

    __slots__ = ("path", "num_tokens", "num_documents", "sha256", "nbytes", "identity")

    def __init__(self, path, num_tokens=None, num_documents=None, sha256=None, nbytes=None):
        self.path, self.num_tokens, self.num_documents, self.sha256, self.nbytes = (
            path,
            num_tokens,
            num_documents,
            sha256,
            nbytes,
        )
        self.identity = None  # the file's identity when first opened: an LRU reopen must find the same file


_STEM_MANIFEST = (
    ".dataset.json"  # the manifest of the dataset written as STEM.rox: STEM.dataset.json, shards STEM_*.rox
)


def _not_found(what: str) -> ShardNotFoundError:
    return ShardNotFoundError(f"{what}; {NOT_FOUND_FIX}")


def check_found(spec: str) -> None:
    """Refuse ``spec`` when it names nothing :func:`resolve` could open, looking at names only.

    What a dataset path may name is :func:`resolve`'s; this reads no manifest and no shard, so
    a damaged dataset is still found only when it opens.

    Raises:
        ShardNotFoundError: no such file or directory, a glob that matches nothing, a directory
            with neither a manifest nor ``.rox`` shards (one line naming ``spec`` and the fix).
        IncompleteDatasetError: a directory with no shards where a pack did not finish.
    """
    if any(c in spec for c in _GLOB_CHARS) and not os.path.exists(spec):
        if not glob.glob(spec):
            raise _not_found(f"no files match {spec!r}")
    elif os.path.isdir(spec):
        if not os.path.lexists(os.path.join(spec, MANIFEST_NAME)) and not _has_shards(spec):
            _refuse_incomplete(spec)  # a killed pack says so, rather than "not found"
            raise _not_found(f"{spec}: no {MANIFEST_NAME} and no .rox shards in this directory")
    elif not os.path.lexists(spec) and not _stem_found(spec):
        raise _not_found(_missing(spec))


def _has_shards(directory: str) -> bool:
    with os.scandir(directory) as names:
        return any(n.name.endswith(".rox") and not n.name.startswith(".") for n in names)


def _stem_found(spec: str) -> bool:
    """Whether ``STEM.dataset.json`` or ``STEM_*.rox`` exists for ``spec`` (the original's prefix form)."""
    if spec.endswith(".json"):
        return False
    stem = spec[:-4] if spec.endswith(".rox") else spec
    return os.path.lexists(stem + _STEM_MANIFEST) or bool(glob.glob(glob.escape(stem) + "_*.rox"))


def _missing(spec: str) -> str:
    if spec.endswith(".json"):
        return f"dataset manifest not found: {spec}"
    stem = spec[:-4] if spec.endswith(".rox") else spec
    return f"dataset not found: {spec} (no such file, directory, manifest or {stem}_*.rox shards)"


def resolve(spec: str, manifests: list[tuple[str, Manifest]], entries: list[Entry]) -> None:
    """Append the manifests ``spec`` names to ``manifests`` (path, manifest) and its shards to ``entries``, in order.

    Raises:
        ShardNotFoundError: nothing matches ``spec``.
        IncompleteDatasetError: a pack into its directory did not finish, or ``spec`` is a shard of an unfinished append.
    """
    if any(c in spec for c in _GLOB_CHARS) and not os.path.exists(spec):
        matches = sorted(glob.glob(spec))
        pending = {d: _refuse_incomplete(d) for d in {os.path.dirname(m) or "." for m in matches if os.path.isfile(m)}}
        matches = [m for m in matches if os.path.basename(m) not in pending.get(os.path.dirname(m) or ".", ())]
        if not matches:
            raise _not_found(f"no files match {spec!r}")
        for m in matches:
            resolve(m, manifests, entries)
        return
    if os.path.isdir(spec):
        manifest = os.path.join(spec, MANIFEST_NAME)
        if os.path.lexists(manifest):  # a dangling link or unreadable manifest is an error, never skipped
            return _add_manifest(manifest, manifests, entries)
        shards = _committed(sorted(glob.glob(os.path.join(spec, "*.rox"))), _refuse_incomplete(spec))
        if not shards:
            raise _not_found(f"{spec}: no {MANIFEST_NAME} and no .rox shards in this directory")
        entries.extend(Entry(p) for p in shards)
        return
    if spec.endswith(".json"):
        if not os.path.lexists(spec):  # (a dangling link: Manifest.load names it)
            raise _not_found(_missing(spec))
        return _add_manifest(spec, manifests, entries)
    if os.path.exists(spec):
        if not _committed([spec], _refuse_incomplete(os.path.dirname(spec) or ".")):
            raise IncompleteDatasetError(
                f"{spec}: this shard belongs to an append that did not finish; it is not part "
                "of the dataset - the next pack or append into its directory removes it",
                spec,
            )
        entries.append(Entry(spec))
        return
    stem = spec[:-4] if spec.endswith(".rox") else spec
    if os.path.lexists(stem + _STEM_MANIFEST):
        return _add_manifest(stem + _STEM_MANIFEST, manifests, entries)
    shards = _committed(
        sorted(glob.glob(glob.escape(stem) + "_*.rox")), _refuse_incomplete(os.path.dirname(spec) or ".")
    )
    if not shards:
        raise _not_found(_missing(spec))
    entries.extend(Entry(p) for p in shards)


def _add_manifest(path: str, manifests: list[tuple[str, Manifest]], entries: list[Entry]) -> None:
    m = Manifest.load(path)
    base = os.path.dirname(path)
    manifests.append((path, m))
    entries.extend(
        Entry(os.path.join(base, s.path), s.num_tokens, s.num_documents, s.sha256, s.bytes) for s in m.shards
    )


def _refuse_incomplete(directory: str) -> set[str]:
    """Refuse shards next to the marker of a pack that never wrote its manifest.

    Returns the names of shards an unfinished append was committing (not yet in the dataset:
    opening by glob or file skips them, so the dataset reads as it was before the append).
    """
    from roxxel.format.directory import pending_shards

    pending: set[str] = set()
    for marker in glob.glob(os.path.join(glob.escape(directory), ".*.incomplete")):
        manifest = os.path.join(directory, os.path.basename(marker)[1 : -len(".incomplete")])
        if not os.path.exists(manifest):
            raise IncompleteDatasetError(
                f"{directory}: a pack into this directory did not finish (found {os.path.basename(marker)}); "
                "its shards are not a complete dataset - re-run the pack",
                directory,
            )
        listed = {s.path for s in Manifest.load(manifest).shards}
        pending.update(n for n in pending_shards(marker) if n not in listed)
    return pending


def _committed(paths: list[str], pending: set[str]) -> list[str]:
    return [p for p in paths if os.path.basename(p) not in pending]


def check_unlisted(manifest: str, entries: list[Entry]) -> None:
    """Refuse shards next to ``manifest`` that it does not list (``entries``: the dataset's shards).

    Next to a ``dataset.json`` every ``.rox`` file counts; next to a ``STEM.dataset.json`` the
    ``STEM_*.rox`` files (its directory may hold others); a manifest of another name is not
    checked. Shards an unfinished append is committing are not counted.

    Raises:
        CorruptShardError: a shard the manifest does not list (names it and the fix).
        IncompleteDatasetError: a pack into the directory did not finish.
    """
    directory, name = os.path.split(manifest)
    if name == MANIFEST_NAME:
        ours = re.compile(r".*\.rox")
    elif name.endswith(_STEM_MANIFEST):
        ours = re.compile(re.escape(name[: -len(_STEM_MANIFEST)]) + r"_\d+\.rox")  # not STEM_other_0000.rox
    else:  # a manifest under a name of its own: which files would be its shards is unknown
        return
    listed = {os.path.normpath(e.path) for e in entries}
    pending = _refuse_incomplete(directory or ".")  # an unfinished append's shards: not in the dataset yet
    unlisted = sorted(
        p
        for p in glob.glob(os.path.join(glob.escape(directory), "*.rox"))
        if ours.fullmatch(os.path.basename(p))
        and os.path.normpath(p) not in listed
        and os.path.basename(p) not in pending
    )
    if unlisted:
        raise CorruptShardError(
            f"{unlisted[0]}: a shard next to {manifest} that it does not list"
            f"{f' (and {len(unlisted) - 1} more)' if len(unlisted) > 1 else ''}: the manifest lost an entry "
            "(restore it, or re-pack) or the file does not belong here (move it away)",
            unlisted[0],
        )
