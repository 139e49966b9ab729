"""Every relative link of README.md and docs/ leads somewhere: to a file of the repository, or to
one of the pages the MkDocs build generates from the code (listed here explicitly; they exist
only in the built site, which README.md says how to build). A link to a moved or renamed file
fails here, not on GitHub (issue 19)."""

from __future__ import annotations

import re
from pathlib import Path

from support.paths import REPO

DOCS = REPO / "docs"
# Pages docs/_hooks/reference.py generates at every build (not in the repository).
GENERATED = {"docs/reference/job-spec.md", "docs/reference/cli.md", "docs/reference/api/index.md"}
GENERATED_API = re.compile(r"^docs/reference/api/(?P<module>[a-z_][a-z0-9_.]*)\.md$")

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,}).*?^\1\2`*\s*$", re.S | re.M)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\((?P<target><[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)]


def links(text: str) -> list[str]:
    """The targets of the Markdown links of ``text``, outside code blocks and inline code."""
    text = _INLINE_CODE.sub("", _FENCE.sub("", text))
    return [m.group("target").strip("<>") for m in _LINK.finditer(text)]


def _module_exists(module: str) -> bool:
    parts = module.split(".")
    roots = {"roxxel": REPO, "roxxel_launch": REPO / "launcher"}
    if parts[0] not in roots:
        return False
    base = roots[parts[0]].joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def broken(page: Path, target: str) -> str | None:
    """Why ``target`` (a link on ``page``) leads nowhere, or None when it resolves."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return None  # https://, mailto:, an anchor on the same page
    path = target.split("#", 1)[0]
    resolved = (page.parent / path).resolve()
    try:
        rel = resolved.relative_to(REPO).as_posix()
    except ValueError:
        return f"{target} points outside the repository"
    if resolved.exists() or rel in GENERATED:
        return None
    if (m := GENERATED_API.match(rel)) and _module_exists(m.group("module")):
        return None
    return f"{target} -> {rel} does not exist (and is not a page the docs build generates)"


def test_every_relative_link_resolves():
    problems = []
    for page in _pages():
        for target in links(page.read_text(encoding="utf-8")):
            if (why := broken(page, target)) is not None:
                problems.append(f"{page.relative_to(REPO)}: {why}")
    assert not problems, "\n".join(problems)


def test_the_link_check_finds_broken_links():
    page = DOCS / "index.md"
    assert links('see [a](a.md), `[b](b.md)` and\n```\n[c](c.md)\n```\n[d](<d e.md> "t")') == ["a.md", "d e.md"]
    assert broken(page, "reference/cli.md#roxxel-pack") is None
    assert broken(page, "reference/api/roxxel.format.layout.md") is None
    assert broken(page, "reference/api/roxxel.no_such_module.md") is not None
    assert broken(page, "no-such-page.md") is not None
    assert broken(page, "https://example.com/x.md") is None
    assert broken(REPO / "README.md", "roxxel/format/layout.py") is None
