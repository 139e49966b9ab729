"""Find the code examples of a Markdown page and the markers that say how to test them.

Every fenced ```python and ```bash block of ``docs/*.md`` (and of README.md) is an example
that ``tests/docs/test_docs.py`` runs: all blocks of one page in document order, in one fresh
working directory, Python blocks sharing one namespace (like a reader who types them into
one interpreter), bash blocks run with ``bash -e -o pipefail``.

An HTML comment on the line(s) just above a fence changes how that block is tested:

``<!-- requires: KIND: reason -->``
    the block is not run; KIND is one of :data:`REQUIRES_KINDS` and the reason is required
    (e.g. ``<!-- requires: cluster: submits to the cluster of the current kubeconfig -->``).
``<!-- exit: N -->``
    a bash block that must exit with status N (e.g. 1 for ``roxxel verify`` of a damaged dataset).
``<!-- raises: ExceptionName -->``
    a Python block that must raise that exception (or a subclass); the rest of the page goes on.
``<!-- output -->``
    above a block of any other language (``text``): the output of the previous example
    must contain it; ``...`` stands for any text (also across lines).

A block of any language whose info string names a file, as in ```` ```python title="train.py" ````
(Material shows the title above the listing), is not run: it is written to that path of the
working directory when the page reaches it, for the commands after it to use (a ``.py`` file
must compile).

On a line of its own anywhere on a page (outside code blocks), ``<!-- slow: reason -->``
marks the page's test ``@pytest.mark.slow``.
An unknown marker above a ``python``/``bash`` block is an error, so a typo cannot silently
turn a test off.
"""

from __future__ import annotations

import dataclasses
import re

RUN_LANGUAGES = {"python": "python", "py": "python", "python3": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
REQUIRES_KINDS = {
    "cluster": "a Kubernetes cluster (kubectl, or roxxel-launch without --local)",
    "cloud": "a Google Cloud project (gcloud, gs:// buckets, Artifact Registry)",
    "docker": "a Docker daemon",
    "accelerator": "a TPU or GPU",
    "minutes": "runs for minutes, or runs this test suite itself",
}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_COMMENT = re.compile(r"^\s*<!--\s*(?P<body>.*?)\s*-->\s*$")
_MARKER = re.compile(r"^(?P<key>[a-z-]+)\s*(?::\s*(?P<value>.*))?$", re.S)
_SLOW = re.compile(r"^\s*<!--\s*slow:\s*(?P<reason>.+?)\s*-->\s*$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')


@dataclasses.dataclass
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # 1-based line of the first code line
    language: str  # as written in the info string, lower-cased
    code: str
    markers: dict[str, str]
    file: str | None = None  # the title="..." of the info string: a file to write

    @property
    def kind(self) -> str | None:
        """``"python"``/``"bash"`` for an example that runs, ``"file"`` for a file listing, else None."""
        if self.file:
            return "file"
        return RUN_LANGUAGES.get(self.language)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclasses.dataclass
class Page:
    path: str
    blocks: list[Block]
    slow: str | None  # the reason, when the page is marked slow

    @property
    def examples(self) -> list[Block]:
        """Blocks the test runs (python, bash) or writes (file listings), in page order."""
        return [b for b in self.blocks if b.kind is not None]


class MarkerError(ValueError):
    """A malformed or unknown marker; the message names the page and line."""


def _markers(lines: list[str], fence_index: int, page: str) -> dict[str, str]:
    """The ``<!-- key: value -->`` comments on the lines right above line ``fence_index``."""
    found: dict[str, str] = {}
    i = fence_index - 1
    while i >= 0:
        m = _COMMENT.match(lines[i])
        if not m:
            break
        mm = _MARKER.match(m.group("body"))
        if mm is None:
            raise MarkerError(f"{page}:{i + 1}: unreadable marker {lines[i].strip()!r}")
        found[mm.group("key")] = (mm.group("value") or "").strip()
        i -= 1
    return found


def parse(text: str, page: str) -> Page:
    """Every fenced block of ``text`` with its markers."""
    lines = text.split("\n")
    blocks: list[Block] = []
    slow = None
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            marker = _SLOW.match(lines[i])
            if marker and slow is None:
                slow = marker.group("reason")
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        language = info.split()[0].lower() if info else ""
        language = language.lstrip("{.").rstrip("}")
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        else:
            raise MarkerError(f"{page}:{i + 1}: code block is never closed")
        title = _TITLE.search(info)
        blocks.append(
            Block(
                page,
                i + 2,
                language,
                "\n".join(body) + "\n",
                _markers(lines, i, page),
                title.group("title") if title else None,
            )
        )
        i = j + 1
    return Page(page, blocks, slow)


def check_markers(page: Page) -> list[str]:
    """Problems with the markers of a page (empty when they are all well formed)."""
    problems = []
    known_run = {"requires", "exit", "raises"}
    for b in page.blocks:
        if b.kind == "file":
            if b.markers:
                problems.append(f"{b.where}: a file listing (title=...) takes no markers")
            if b.file.startswith("/") or ".." in b.file.split("/"):
                problems.append(f"{b.where}: title={b.file!r} must be a relative path inside the working directory")
            continue
        if b.kind is None:
            extra = set(b.markers) - {"output"}
            if extra:
                problems.append(f"{b.where}: markers {sorted(extra)} apply to python/bash blocks only")
            continue
        unknown = set(b.markers) - known_run
        if unknown:
            problems.append(
                f"{b.where}: unknown marker(s) {sorted(unknown)}; known: {sorted(known_run)} "
                "(and 'output' above an output block)"
            )
        if "requires" in b.markers:
            kind, _, reason = b.markers["requires"].partition(":")
            if kind.strip() not in REQUIRES_KINDS:
                problems.append(f"{b.where}: requires kind {kind.strip()!r} is not one of {sorted(REQUIRES_KINDS)}")
            elif not reason.strip():
                problems.append(f"{b.where}: <!-- requires: {kind.strip()}: REASON --> needs a reason")
        if "exit" in b.markers and (b.kind != "bash" or not b.markers["exit"].isdigit()):
            problems.append(f"{b.where}: <!-- exit: N --> needs a bash block and a number")
        if "raises" in b.markers and (b.kind != "python" or not b.markers["raises"].isidentifier()):
            problems.append(f"{b.where}: <!-- raises: Name --> needs a python block and an exception name")
    return problems


def expected_outputs(page: Page) -> list[tuple[Block, Block]]:
    """``(example, expected output block)`` pairs from ``<!-- output -->`` markers.

    Raises:
        MarkerError: an output block with no example before it, or after one that is not run.
    """
    pairs = []
    last: Block | None = None
    for b in page.blocks:
        if b.kind in ("python", "bash"):
            last = b
        elif "output" in b.markers:
            if last is None:
                raise MarkerError(f"{b.where}: <!-- output --> block has no example before it")
            if "requires" in last.markers:
                raise MarkerError(f"{b.where}: <!-- output --> follows {last.where}, which is not run")
            pairs.append((last, b))
    return pairs


def output_pattern(expected: str) -> re.Pattern:
    """A regex for an expected output: lines in order, trailing blanks ignored.

    ``...`` inside a line matches any text; a line that is only ``...`` matches any number of
    whole lines (none included).
    """
    lines = [line.rstrip() for line in expected.strip("\n").split("\n")]
    while lines and lines[0].strip() == "...":  # a search finds the pattern anywhere anyway
        lines.pop(0)
    regex = ""
    for i, line in enumerate(lines):
        if line.strip() == "...":
            regex += r"(?:\n.*)?" if i == len(lines) - 1 else r"(?:\n[^\n]*)*?"
            continue
        if i:
            regex += "\n"
        regex += ".*?".join(re.escape(chunk) for chunk in line.split("..."))
    return re.compile(regex, re.S)


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` (an example's output) contains ``expected`` (see :func:`output_pattern`)."""
    actual = "\n".join(line.rstrip() for line in actual.replace("\r\n", "\n").split("\n"))
    return output_pattern(expected).search(actual) is not None
