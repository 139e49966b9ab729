"""The input walk never takes the files a pack is writing, even when its output lies inside an input directory."""

from __future__ import annotations

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
    assert [np.asarray(ds[k][:-1], np.uint8).tobytes() for k in range(len(ds))] == [b"text of a.txt\n", b"text of b.txt\n"]


def test_a_missing_input_fails_before_any_directory_is_walked(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError, match="input not found: .*nope"):
        iter_input_files([str(tmp_path / "d"), str(tmp_path / "nope")])
