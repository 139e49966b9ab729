"""`roxxel pack` never packs less than its inputs hold (issue 49): a compressed input is read
whole (every gzip member, bzip2 and xz stream, Zstandard frame) or refused as not complete, the
same way for each format; a null or non-text field in JSONL or Parquet is refused naming its
line or row, and nothing is written."""

import bz2
import gzip
import lzma
import os

import numpy as np
import pytest
from click.testing import CliRunner

from roxxel import Roxxel
from roxxel.cli import main
from roxxel.pack import pack, read_input

zstandard = pytest.importorskip("zstandard")  # in the dev extra; roxxel[zstd] for users
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

COMPRESS = {
    "gz": (gzip.compress, "gzip"),
    "bz2": (bz2.compress, "bzip2"),
    "xz": (lzma.compress, "xz"),
    "zst": (lambda data: zstandard.ZstdCompressor().compress(data), "Zstandard"),
}


def run(*args):
    return CliRunner().invoke(main, ["pack", *map(str, args), "--no-progress"], catch_exceptions=False)


def docs_of(directory):
    ds = Roxxel(str(directory))
    return [bytes(ds[i][:-1].astype(np.uint8)).decode() for i in range(len(ds))]


def assert_refused(r, out, message):
    """One line, exit 1, naming the problem; no dataset (not even its directory) left behind."""
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"roxxel: error: {message}"), r.output
    assert not os.path.exists(out)


@pytest.mark.parametrize("ext", COMPRESS)
def test_multi_frame_and_multi_member_inputs_are_read_whole(tmp_path, ext):
    """`cat a.zst b.zst > ab.zst` (and pzstd, zstd --long, pigz, pbzip2) make one file of many frames."""
    compress, _ = COMPRESS[ext]
    text = "".join(f'{{"text": "document {i}"}}\n' for i in range(3000)).encode()
    parts = [text[:10], text[10:40_000], text[40_000:]]
    (tmp_path / f"a.jsonl.{ext}").write_bytes(b"".join(compress(p) for p in parts))
    (tmp_path / f"b.txt.{ext}").write_bytes(b"".join(compress(p) for p in parts))
    assert read_input(str(tmp_path / f"b.txt.{ext}")) == text
    r = run(tmp_path / f"a.jsonl.{ext}", tmp_path / f"b.txt.{ext}", "-o", tmp_path / "out")
    assert r.exit_code == 0, r.output
    docs = docs_of(tmp_path / "out")
    assert len(docs) == 3001 and docs[2999] == "document 2999" and docs[3000] == text.decode()


@pytest.mark.parametrize("ext", COMPRESS)
@pytest.mark.parametrize("kind", ["txt", "jsonl"])
@pytest.mark.parametrize("cut", [0.1, 0.6, 0.99, "frame"])
def test_a_truncated_input_is_refused_at_every_cut(tmp_path, ext, kind, cut):
    """A .zst cut at 60% was packed as the prefix it held (python-zstandard's stream reader returns
    what it decoded and raises nothing); a cut on a frame boundary of a multi-frame file too."""
    compress, name = COMPRESS[ext]
    lines = "".join(f'{{"text": "document {i} {"x" * (i % 50)}"}}\n' for i in range(3000)).encode()
    first, second = compress(lines[:50_000]), compress(lines[50_000:])
    data = first + second
    if cut == "frame":  # the first frame whole, then half of the second one's
        data = first + second[: len(second) // 2]
    else:
        data = data[: int(len(data) * cut)]
    path = tmp_path / f"cut.{kind}.{ext}"
    path.write_bytes(data)
    r = run(path, "-o", tmp_path / "out")
    assert_refused(r, tmp_path / "out", f"{path}: not a complete {name} file")
    assert "re-copy it, or leave it out with --exclude" in r.output


@pytest.mark.parametrize("ext", COMPRESS)
@pytest.mark.parametrize("content", [b"", b"plain text, not compressed\n"], ids=["empty", "not-compressed"])
def test_an_empty_or_uncompressed_file_is_refused_by_every_format(tmp_path, ext, content):
    """An empty .zst read as no text (and an empty .gz as an empty document) while an empty .bz2
    or .xz was refused: an empty file holds no frame, as a download that failed at once leaves it."""
    _, name = COMPRESS[ext]
    path = tmp_path / f"x.txt.{ext}"
    path.write_bytes(content)
    assert_refused(run(path, "-o", tmp_path / "out"), tmp_path / "out", f"{path}: not a complete {name} file")


@pytest.mark.parametrize("ext", COMPRESS)
def test_data_after_the_last_frame_is_refused(tmp_path, ext):
    """bz2 and xz ignored whatever followed their last stream (a second file's damaged start);
    gzip refused it. Zero bytes after it are padding (xz's, tape blocks) and are read past."""
    compress, name = COMPRESS[ext]
    path = tmp_path / f"x.txt.{ext}"
    path.write_bytes(compress(b"one") + b"\0" * 6 + compress(b"two") + b"\0" * 3)
    assert read_input(str(path)) == b"onetwo"
    path.write_bytes(compress(b"one") + b"garbage after it")
    assert_refused(run(path, "-o", tmp_path / "out"), tmp_path / "out", f"{path}: not a complete {name} file")


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": null}', 'is null, not text; give the line a string ("" for an empty document) or drop it'),
        ('{"text": 42}', "is a number (int), not text"),
        ('{"text": 4.5}', "is a number (float), not text"),
        ('{"text": ["a", "b"]}', "is a list, not text"),
        ('{"text": true}', "is a boolean, not text"),
        ('{"body": "x"}', "has no field 'text' (it has 'body'); pass --text-field"),
        ('["text"]', "is a list, not an object with a field 'text'"),
    ],
    ids=["null", "int", "float", "list", "bool", "missing", "not-object"],
)
def test_a_jsonl_field_that_is_not_text_is_named_with_its_line(tmp_path, line, message):
    """Every one of these said "expected an object with a string field 'text'; pass --text-field",
    a fix that does not apply to a null or a number under the right field."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine"}\n\n' + line + "\n")
    for jobs in ("1", "2"):
        r = run(path, "-o", tmp_path / "out", "--jobs", jobs)
        assert_refused(r, tmp_path / "out", f"{path}:3: ")
        assert message in r.output, r.output


def test_a_null_parquet_cell_is_refused_with_its_row(tmp_path):
    """5 rows gave 4 documents: the null was dropped, so document k was no longer row k."""
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": ["a", "b", None, "d", "e"]}), path, row_group_size=2)
    for jobs in ("1", "2"):
        r = run(path, "-o", tmp_path / "out", "--jobs", jobs)
        assert_refused(r, tmp_path / "out", f"{path}: row 2 (counting from 0) of column 'text' is null")
        assert "fill the nulls with '' to pack them as empty documents, or drop those rows" in r.output
    pq.write_table(pa.table({"text": ["a", "b", "", "d", "e"]}), path, row_group_size=2)
    assert run(path, "-o", tmp_path / "out").exit_code == 0
    assert docs_of(tmp_path / "out") == ["a", "b", "", "d", "e"]  # the fix it names: row k is document k


@pytest.mark.parametrize(
    "column, message",
    [
        (pa.array([1, 2, 3]), "column 'text' holds int64, not text; pass --text-field with a string column"),
        (pa.array([None, None], pa.null()), "column 'text' holds null, not text"),
        (pa.array([[1], [2]]), "column 'text' holds list<"),
    ],
    ids=["int", "all-null", "list"],
)
def test_a_parquet_column_that_is_not_text_is_refused(tmp_path, column, message):
    """An integer column ended in a bare AttributeError traceback."""
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": column, "id": pa.array(range(len(column)))}), path)
    assert_refused(run(path, "-o", tmp_path / "out"), tmp_path / "out", f"{path}: {message}")


def test_parquet_string_kinds_are_text(tmp_path):
    """large_string and dictionary-encoded strings are text; so is binary, as a text file's bytes are."""
    path = tmp_path / "rows.parquet"
    table = pa.table(
        {
            "a": pa.array(["x", "y"], pa.large_string()),
            "b": pa.array(["x", "y"]).dictionary_encode(),
            "c": pa.array([b"x", b"y"], pa.binary()),
        }
    )
    pq.write_table(table, path)
    for field in "abc":
        manifest = pack([str(path)], str(tmp_path / field), text_field=field)
        assert manifest.num_documents == 2 and docs_of(tmp_path / field) == ["x", "y"]


def test_a_cut_parquet_file_is_named(tmp_path):
    """pyarrow's "Parquet magic bytes not found in footer ..." named no file."""
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"text": ["a row"] * 100}), path)
    path.write_bytes(path.read_bytes()[:-40])
    r = run(path, "-o", tmp_path / "out")
    assert_refused(r, tmp_path / "out", f"{path}: cannot be read as Parquet (")
    assert "re-copy it, or leave it out with --exclude" in r.output
