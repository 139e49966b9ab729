"""A dataset path that names nothing is refused where the dataset is made, in one line naming
the path and the fix, not at its first read; what names a dataset is still opened lazily. The
original API's ``Roxxel`` is also the writer, so it may name a dataset to come: its first read
refuses a missing one with the same line.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from roxxel import Curriculum, Phase
from roxxel.compat import Roxxel
from roxxel.data import Dataset
from roxxel.format.errors import IncompleteDatasetError, ShardNotFoundError

FIX = "pack it first (roxxel pack INPUTS -o DIR), or check the path and that its storage is mounted"


def _write(path, **kwargs) -> None:
    Roxxel(str(path)).write([np.arange(1, 30)] * 4, vocab_size=32, eos_id=0, **kwargs)


NAMING_NOTHING = {  # what names no dataset, under tmp_path
    "no such path": "nope",
    "no such shard": "nope.rox",
    "no such manifest": "nope.json",
    "a glob that matches nothing": "wiki_*.rox",
    "an empty directory": "empty",
    "a directory with no manifest and no shards": "unrelated",
}


@pytest.mark.parametrize("name", NAMING_NOTHING.values(), ids=NAMING_NOTHING.keys())
def test_a_dataset_that_names_nothing_is_refused_where_it_is_made(tmp_path, name):
    (tmp_path / "empty").mkdir()
    (tmp_path / "unrelated").mkdir()
    (tmp_path / "unrelated" / "notes.txt").write_text("not a shard")
    path = str(tmp_path / name)
    with pytest.raises(ShardNotFoundError) as caught:
        Dataset(path)
    message = str(caught.value)
    assert "\n" not in message and path in message and message.endswith(FIX), message


def test_a_list_refuses_the_path_that_names_nothing(tmp_path):
    _write(tmp_path / "ds")
    with pytest.raises(ShardNotFoundError, match=f"dataset not found: {tmp_path / 'typo'} "):
        Dataset([str(tmp_path / "ds"), str(tmp_path / "typo")])
    with pytest.raises(ValueError, match="filepath is empty"):
        Dataset([])


def test_a_killed_pack_is_named_as_such_not_as_missing(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / ".dataset.json.incomplete").write_text("")
    with pytest.raises(IncompleteDatasetError, match="did not finish"):
        Dataset(str(tmp_path / "ds"))


def test_every_form_that_names_a_dataset_is_made_without_reading_it(tmp_path):
    _write(tmp_path / "ds")
    _write(tmp_path / "one.rox")  # one shard file
    _write(tmp_path / "wiki.rox", max_shard_bytes=4200)  # the original's prefix form: wiki_0000.rox, ...
    forms = [
        tmp_path / "ds",
        tmp_path / "ds" / "dataset.json",
        tmp_path / "ds" / "shard-00000.rox",
        tmp_path / "ds" / "*.rox",
        tmp_path / "one.rox",
        tmp_path / "wiki.rox",
        tmp_path / "wiki",
    ]
    for form in forms:
        ds = Dataset(str(form))
        assert repr(ds) == f"Dataset({str(form)!r})"  # not opened: nothing read yet
        assert ds.num_tokens == 4 * 30, form


def test_roxxel_may_name_a_dataset_to_write_and_refuses_it_at_the_first_read(tmp_path):
    path = str(tmp_path / "new")
    unwritten = Roxxel(path)  # the original's writer: made before the dataset exists
    for read in (
        len,
        lambda r: r.estimate_steps(8, 2),
        lambda r: Curriculum(r, [Phase(global_batch_size=2, seq_len=8)]),
    ):
        with pytest.raises(ShardNotFoundError) as caught:
            read(unwritten)
        assert (
            str(caught.value)
            == f"dataset not found: {path} (no such file, directory, manifest or {path}_*.rox shards); {FIX}"
        )
    Roxxel(path).write([np.arange(1, 30)] * 4, vocab_size=32, eos_id=0)
    assert len(Roxxel(path)) == 4 and len(unwritten) == 4


def test_the_command_line_says_it_in_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "roxxel.cli", "info", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert out.returncode != 0 and out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert str(tmp_path / "nope") in line and "roxxel pack" in line
