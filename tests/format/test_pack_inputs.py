"""roxxel pack reads compressed inputs transparently and skips binary files with a count."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from roxxel import Roxxel

ROXXEL = os.path.join(os.path.dirname(sys.executable), "roxxel")


def run(*args):
    return subprocess.run([ROXXEL, "pack", *args, "--no-progress"], capture_output=True, text=True, timeout=120)


def docs_of(d):
    ds = Roxxel(d)
    return [bytes(ds[i][:-1].astype(np.uint8)).decode() for i in range(len(ds))]


def test_binary_files_are_skipped_and_counted(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello")
    (src / "b.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (src / "c.txt").write_text("world")
    r = run(str(src), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "skipped 1 binary file " in r.stdout and "b.bin" in r.stdout and "--include-binary" in r.stdout
    assert docs_of(str(tmp_path / "out")) == ["hello", "world"]
    r = run(str(src), "-o", str(tmp_path / "all"), "--include-binary")
    assert r.returncode == 0 and Roxxel(str(tmp_path / "all")).num_documents == 3


def test_gz_text_and_jsonl_are_decompressed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    with gzip.open(src / "a.jsonl.gz", "wt") as f:
        f.write(json.dumps({"text": "one"}) + "\n" + json.dumps({"text": "two"}) + "\n")
    with gzip.open(src / "b.txt.gz", "wt") as f:
        f.write("three")
    r = run(str(src), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert docs_of(str(tmp_path / "out")) == ["one", "two", "three"]


def test_zst_jsonl_is_decompressed(tmp_path):
    zstandard = pytest.importorskip("zstandard")  # the optional extra roxxel[zstd]
    data = (json.dumps({"text": "zeta"}) + "\n").encode()
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    r = run(str(tmp_path / "a.jsonl.zst"), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert docs_of(str(tmp_path / "out")) == ["zeta"]


def test_non_utf8_hint_names_exclude(tmp_path):
    tok = tmp_path / "tok.json"
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(str(tok))
    (tmp_path / "x.txt").write_bytes(b"\xff\xfe latin")
    r = run(str(tmp_path / "x.txt"), "-o", str(tmp_path / "out"), "--tokenizer", str(tok), "--eos-id", "0")
    assert r.returncode != 0 and "--exclude" in r.stderr and "--include" not in r.stderr.replace("--include-binary", "")


def test_cat_decodes_a_dataset_packed_with_an_eos_id_the_tokenizer_lacks(tmp_path):
    """Found by a new user's pass: packed with --eos-id (the tokenizer has no standard EOS token),
    the dataset could not be decoded by `roxxel cat`, which asked for an --eos-id it does not have."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "[SEP]": 1, "a": 2, "b": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    (tmp_path / "x.txt").write_text("a b a")
    r = run(
        str(tmp_path / "x.txt"), "-o", str(tmp_path / "out"), "--tokenizer", str(tmp_path / "tok.json"), "--eos-id", "1"
    )
    assert r.returncode == 0, r.stderr
    roxxel = os.path.join(os.path.dirname(sys.executable), "roxxel")
    for extra in ([], ["--tokenizer", str(tmp_path / "tok.json")]):
        shown = subprocess.run(
            [roxxel, "cat", str(tmp_path / "out"), "0", *extra], capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0 and shown.stdout.split() == ["a", "b", "a"], shown.stderr


def test_appending_without_the_datasets_tokenizer_names_it(tmp_path):
    """Found by a new user's pass: --append to a tokenizer.json dataset without --tokenizer was
    refused with a dump of two 4-tuples and no word of the flag to pass."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "[SEP]": 1, "a": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    (tmp_path / "x.txt").write_text("a a")
    assert (
        run(
            str(tmp_path / "x.txt"),
            "-o",
            str(tmp_path / "out"),
            "--tokenizer",
            str(tmp_path / "tok.json"),
            "--eos-id",
            "1",
        ).returncode
        == 0
    )
    r = run(str(tmp_path / "x.txt"), "-o", str(tmp_path / "out"), "--append")
    assert r.returncode == 1 and "its tokenizer is" in r.stderr and "--tokenizer tok.json" in r.stderr, r.stderr
    assert "(dtype, vocab_size" not in r.stderr
