"""Griffe extension: the reStructuredText habits of Roxxel's docstrings, as Markdown.

The docstrings are Google style with a few reST constructs that Markdown would show
literally or misread; before mkdocstrings renders them, this rewrites

* roles (``:func:`~roxxel.distributed.detect```) as code spans (`` `detect` ``);
* ``Title`` underlined with ``===`` or ``---`` (a reST section) as a bold line, not a page heading;
* simple tables (rows between ``=====  =====`` borders) as preformatted text;
* a paragraph ending in ``::`` (a literal block follows) with a single ``:``.

Loaded by mkdocstrings (``extensions:`` in mkdocs.yml).
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const|term|ref):`(~?)([^`]+)`")
_UNDERLINE = re.compile(r"^\s*(={3,}|-{3,}|~{3,})\s*$")
_TABLE_BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")


def _role(match: re.Match) -> str:
    text = match.group(2)
    if match.group(1):
        text = text.rsplit(".", 1)[-1]
    return f"`{text}`"


def rst_to_markdown(text: str) -> str:
    text = _ROLE.sub(_role, text)
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _TABLE_BORDER.match(line):
            borders, j = 1, i + 1
            while j < len(lines) and borders < 3:
                if _TABLE_BORDER.match(lines[j]):
                    borders += 1
                j += 1
            out += ["", "```text", *lines[i:j], "```", ""]
            i = j
            continue
        if (
            i + 1 < len(lines)
            and line.strip()
            and _UNDERLINE.match(lines[i + 1])
            and not _UNDERLINE.match(line)
            and len(lines[i + 1].strip()) >= len(line.strip()) - 2
        ):
            if out and out[-1].strip():
                out.append("")
            out += [f"**{line.strip()}**", ""]
            i += 2
            continue
        if line.rstrip().endswith("::") and not line.strip() == "::":
            line = line.rstrip()[:-1]
        out.append(line)
        i += 1
    return "\n".join(out)


class RstToMarkdown(griffe.Extension):
    """Rewrites every docstring once, as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
