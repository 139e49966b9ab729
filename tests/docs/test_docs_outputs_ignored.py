"""What a reader who follows the docs in a checkout of this repository writes stays out of git:
the datasets the pages pack (``roxxel pack ... -o data/NAME``) and the runs they train
(``runs/NAME``) are ignored by .gitignore, and the patterns that ignore them reach no source
folder of the same name (``roxxel/data/``, ``tests/data/``).
"""

from __future__ import annotations

import re
import subprocess

from support.paths import REPO

_PACK_OUTPUT = re.compile(r"roxxel pack .*?(?:-o|--output)[ =]([\w./-]+)")
_RUN_DIR = re.compile(r"""["'](runs/[\w./-]+)["']""")


def _written_by_the_pages() -> set[str]:
    found: set[str] = set()
    for page in sorted((REPO / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        found.update(p for p in _PACK_OUTPUT.findall(text) if not p.startswith(("/", "$", "gs:")))
        found.update(_RUN_DIR.findall(text))
    return found


def _ignored(paths: list[str]) -> set[str]:
    """The ``paths`` (relative to the repository) that .gitignore ignores, tracked files judged as untracked."""
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=REPO,
        input="\n".join(paths),
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr  # 1: none of them ignored
    return set(out.stdout.split())


def test_what_the_pages_write_is_ignored():
    written = sorted(_written_by_the_pages())
    assert "data/json" in written and "runs/minimal" in written, written  # the pages were read
    assert set(written) - _ignored(written) == set()


def test_the_patterns_leave_source_folders_alone():
    sources = ["roxxel/data/dataset.py", "tests/data/test_compat.py", "roxxel/data/__init__.py"]
    assert (REPO / sources[0]).is_file()
    assert _ignored(sources) == set()
