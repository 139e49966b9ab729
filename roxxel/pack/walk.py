"""Which files ``roxxel pack`` packs, in a fixed order: inputs as given, a glob's matches sorted,
directories walked by name (``os.walk``'s rules, never silently), ``--include``/``--exclude`` patterns.
"""

from __future__ import annotations

import fnmatch
import glob
import itertools
import json
import logging
import operator
import os
import re
from typing import Callable, Iterator, Sequence

from roxxel.format.manifest import MANIFEST_FORMAT, MANIFEST_NAME

log = logging.getLogger("roxxel.pack")  # one logger for the whole command: its name is what users filter on


def iter_input_files(inputs: Sequence[str], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Iterator[str]:
    """Expand inputs in a fixed order.

    Inputs are taken as given; a glob's matches in sorted order; a directory's files by
    name, then its subdirectories by name. Every input is checked when this is called;
    directories are walked as the files are taken.

    Args:
        inputs: files, directories, glob patterns (``**`` recurses), or ``-`` for stdin.
        include: basename patterns (``*.py``); when given, files found in directories and
            globs must match one of them (files named explicitly are always taken).
        exclude: path patterns (``*/site-packages/*``); files found in directories and globs
            that match one of them are skipped.

    Raises:
        FileNotFoundError: an input does not exist or a glob matches nothing (raised by the
            call itself, before any file is taken).
    """
    excluded, included = _any_of(exclude), _any_of(include)

    def wanted(path: str) -> bool:
        if excluded is not None and excluded(path):
            return False
        return included is None or bool(included(os.path.basename(path)))

    resolved: list[list[str] | str] = []  # a directory to walk, or files taken as they are
    for item in inputs:
        if item == "-":
            resolved.append([item])
        elif os.path.isdir(item):
            resolved.append(item)
        elif os.path.isfile(item):
            resolved.append([item])
        elif any(c in item for c in "*?["):
            matches = sorted(p for p in glob.glob(item, recursive=True) if wanted(p) and os.path.isfile(p))
            if not matches:
                raise FileNotFoundError(f"no files match {item!r}")
            resolved.append(matches)
        else:
            raise FileNotFoundError(f"input not found: {item}")
    return itertools.chain.from_iterable(_walk(r, included, excluded) if isinstance(r, str) else r for r in resolved)


def _walk(top: str, included: Matcher | None, excluded: Matcher | None) -> Iterator[str]:
    """Files under ``top``: its own by name, then each subdirectory's by name (``os.walk``'s rules).

    Like ``os.walk``, an unreadable directory is passed over and a symlink to a directory is
    not entered, but each with a warning (as a broken link or a FIFO among the wanted files):
    nothing is left out silently. Directory entries carry their type, so no file costs an
    extra ``stat``.
    """
    pending = [top]  # directories still to walk, the next one last (depth first, as a recursion would)
    while pending:
        files, subdirs = _scan(pending.pop(), included, excluded)
        yield from files
        pending.extend(reversed(subdirs))


def _scan(top: str, included: Matcher | None, excluded: Matcher | None) -> tuple[list[str], list[str]]:
    """The wanted files and the subdirectories to walk of one directory, each sorted by name.

    An entry that cannot be examined (its type unknown and its ``stat`` failing) is neither,
    as for ``os.walk`` and ``os.path.isfile``. The checks are inline: a walk sees many entries.
    """
    files, subdirs = [], []
    manifest = False
    try:
        with os.scandir(top) as it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if not is_dir and entry.name == MANIFEST_NAME:
                    manifest = True
                if is_dir:
                    # Prune excluded directories instead of walking them (e.g. site-packages).
                    if excluded is None or not excluded(entry.path + os.sep):
                        if not _is_symlink(entry):
                            subdirs.append(entry.path)
                        else:  # not followed (os.walk's rule: a link may loop), but never silently
                            log.warning(
                                "skipping %s: a symbolic link to a directory is not followed "
                                "(pass it as an input to pack what it holds)",
                                entry.path,
                            )
                elif (included is None or included(entry.name)) and (excluded is None or not excluded(entry.path)):
                    try:
                        if entry.is_file():
                            files.append(entry.path)
                            continue
                    except OSError:
                        pass
                    log.warning(
                        "skipping %s: %s",
                        entry.path,
                        "a broken symbolic link"
                        if _is_symlink(entry)
                        else "not a regular file (a FIFO, socket or device)",
                    )
    except OSError as e:
        log.warning("skipping %s: cannot read the directory (%s)", top, e.strerror or e)
        return [], []
    if manifest and is_dataset(top):
        # An earlier pack's output is not input text: its manifest would be packed as a document.
        log.warning("skipping %s: a Roxxel dataset (pass its files by name to pack them anyway)", top)
        return [], []
    files.sort()  # every path is top + "/" + name: sorting the paths sorts the names
    subdirs.sort()
    return files, subdirs


def _is_symlink(entry: os.DirEntry) -> bool:
    try:
        return entry.is_symlink()
    except OSError:  # its type unknown and its lstat failing: gone since it was listed
        return False


def is_dataset(directory: str) -> bool:
    """Whether ``directory`` holds a Roxxel dataset: a ``dataset.json`` of the Roxxel manifest format."""
    try:
        with open(os.path.join(directory, MANIFEST_NAME), "rb") as f:
            return json.load(f).get("format") == MANIFEST_FORMAT
    except (OSError, ValueError, AttributeError):  # unreadable, not JSON, not an object: someone else's file
        return False


Matcher = Callable[[str], object]  # truthy for a match


def _any_of(patterns: Sequence[str]) -> Matcher | None:
    """One matcher for several ``fnmatch`` patterns (None for none), with ``fnmatch``'s meaning.

    A pattern that is a literal with ``*`` at one or both ends (``*.py``, ``*/site-packages/*``)
    becomes a string method (``endswith``, ``in``) called from C: several times quicker than a
    regex on each of the many paths a walk sees. The others are joined into one regex.
    """
    if not patterns:
        return None
    suffixes, prefixes, exact, others = [], [], set(), []
    tests: list[Matcher] = []
    for p in patterns:
        literal = p.strip("*")
        if any(c in literal for c in "*?["):
            others.append(p)
        elif p.startswith("*") and p.endswith("*"):  # "*" itself too: "" is in every path
            tests.append(operator.methodcaller("__contains__", literal))
        elif p.startswith("*"):
            suffixes.append(literal)
        elif p.endswith("*"):
            prefixes.append(literal)
        else:
            exact.add(literal)
    if suffixes:
        tests.append(operator.methodcaller("endswith", tuple(suffixes)))
    if prefixes:
        tests.append(operator.methodcaller("startswith", tuple(prefixes)))
    if exact:
        tests.append(frozenset(exact).__contains__)
    if others:
        tests.append(re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in others)).match)
    if len(tests) == 1:
        return tests[0]
    return lambda path: any(test(path) for test in tests)
