"""The input walk: ``os.walk``'s files in a fixed order, and never the files a pack is writing,
even when its output lies inside an input directory."""

from __future__ import annotations

import os

import numpy as np
import pytest

from roxxel import Roxxel
from roxxel.pack import iter_input_files, pack


@pytest.mark.parametrize("include_binary", [False, True])
def test_packing_a_directory_into_itself_takes_only_the_files_that_were_there(tmp_path, include_binary):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"text of {name}\n")
    (tmp_path / "zz").mkdir()
    out = tmp_path / "zz" / "out"  # inside the input, after the files above in walk order
    pack([str(tmp_path)], str(out), include_binary=include_binary)
    ds = Roxxel(str(out))
    assert [np.asarray(ds[k][:-1], np.uint8).tobytes() for k in range(len(ds))] == [
        b"text of a.txt\n",
        b"text of b.txt\n",
    ]


def test_a_missing_input_fails_before_any_directory_is_walked(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError, match="input not found: .*nope"):
        iter_input_files([str(tmp_path / "d"), str(tmp_path / "nope")])


def test_the_walk_takes_what_os_walk_lists_as_files_in_sorted_order(tmp_path):
    """Files by name, then each subdirectory's; a link to a file is taken, a link to a directory is
    not entered (os.walk's default), a broken link is not a file, excluded directories are pruned."""
    top = tmp_path / "in"
    for rel in ("b.py", "a.py", "notes.txt", "pkg/z.py", "pkg/sub/m.py", "skip/site-packages/x.py", "c/d.py"):
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(rel)
    os.symlink(top / "pkg", top / "link-to-dir")
    os.symlink(top / "a.py", top / "link.py")
    os.symlink(top / "gone.py", top / "broken.py")
    (top / "dir.py").mkdir()  # a directory whose name matches: walked, not taken
    (top / "dir.py" / "in.py").write_text("in")

    expected = []
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "site-packages")
        expected += [
            os.path.join(root, f) for f in sorted(files) if f.endswith(".py") and os.path.isfile(os.path.join(root, f))
        ]
    got = list(iter_input_files([str(top)], include=["*.py"], exclude=["*/site-packages/*"]))
    assert got == expected
    assert [os.path.relpath(p, top) for p in got] == [
        "a.py",
        "b.py",
        "link.py",
        "c/d.py",
        "dir.py/in.py",
        "pkg/z.py",
        "pkg/sub/m.py",
    ]


def test_an_earlier_packs_dataset_inside_the_inputs_is_skipped_with_a_warning(tmp_path, caplog):
    """Found by a new user: packing a directory that held an earlier pack's output took its
    dataset.json in as a text document (its shards were skipped as binary)."""
    (tmp_path / "a.txt").write_text("text of a\n")
    pack([str(tmp_path / "a.txt")], str(tmp_path / "old"))  # a dataset inside the input directory
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "dataset.json").write_text('{"rows": [1, 2]}\n')  # someone else's JSON: input text
    with caplog.at_level("WARNING", logger="roxxel.pack"):
        pack([str(tmp_path)], str(tmp_path / "new"))
    ds = Roxxel(str(tmp_path / "new"))
    texts = [np.asarray(ds[k][:-1], np.uint8).tobytes() for k in range(len(ds))]
    assert texts == [b"text of a\n", b'{"rows": [1, 2]}\n']
    assert f"skipping {tmp_path / 'old'}: a Roxxel dataset" in caplog.text
    with pytest.raises(FileNotFoundError, match=r"old is a Roxxel dataset, not input text.*--append -o"):
        pack([str(tmp_path / "old")], str(tmp_path / "again"))


def test_what_the_walk_leaves_out_it_names_in_a_warning(tmp_path, caplog, monkeypatch):
    """Found in a new user's pass: a linked corpus directory, a broken link and an unreadable
    directory were left out of the dataset without a word (os.walk's silence)."""
    top = tmp_path / "in"
    (top / "locked").mkdir(parents=True)
    (top / "locked" / "secret.txt").write_text("unread")
    (top / "a.txt").write_text("a")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "c.txt").write_text("c")
    os.symlink(tmp_path / "corpus", top / "corpus")
    os.symlink(tmp_path / "gone.txt", top / "broken.txt")
    os.mkfifo(top / "pipe.txt")
    os.symlink(tmp_path / "gone.py", top / "ignored.py")  # not wanted (--exclude): no word about it
    scandir = os.scandir

    def unreadable(path):  # as for a user without read permission (root, running the tests, has it)
        if str(path) == str(top / "locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", unreadable)
    with caplog.at_level("WARNING", logger="roxxel.pack"):
        got = list(iter_input_files([str(top)], exclude=["*.py"]))
    assert got == [str(top / "a.txt")]
    warned = [r.getMessage() for r in caplog.records]
    assert sorted(warned[:3]) == [  # in the directory's order, then the subdirectory's
        f"skipping {top / 'broken.txt'}: a broken symbolic link",
        f"skipping {top / 'corpus'}: a symbolic link to a directory is not followed (pass it as an input to pack what it holds)",
        f"skipping {top / 'pipe.txt'}: not a regular file (a FIFO, socket or device)",
    ]
    assert warned[3:] == [f"skipping {top / 'locked'}: cannot read the directory (Permission denied)"]
    # Named as an input, the linked directory is packed.
    assert list(iter_input_files([str(top / "corpus")])) == [str(top / "corpus" / "c.txt")]
