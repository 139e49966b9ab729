"""`roxxel pack` and `roxxel cat` given what a new user gets wrong: each mistake fails with one
line that names the flag to change, and leaves no dataset behind (issue 19's new-user pass)."""

import gzip
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from roxxel import Roxxel
from roxxel.cli import main


def run(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)


def test_inputs_that_are_all_skipped_as_binary_write_no_empty_dataset(tmp_path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01\x02" * 10)
    r = run("pack", blob, "-o", tmp_path / "ds")
    assert r.exit_code == 1, r.output
    assert "every input was skipped as binary content (1 file, e.g." in r.output and "--include-binary" in r.output
    assert "include_binary=" not in r.output
    assert not (tmp_path / "ds" / "dataset.json").exists()  # before: an empty dataset, exit 0
    assert run("pack", blob, "-o", tmp_path / "ds", "--include-binary").exit_code == 0  # the fix it names works


def test_a_failed_pack_leaves_no_output_directory_it_made(tmp_path):
    """A pack that failed (a JSONL line without the text field) left an empty output directory."""
    (tmp_path / "notes.jsonl").write_text('{"text": "a note"}\n')
    r = run("pack", tmp_path / "notes.jsonl", "--text-field", "body", "-o", tmp_path / "out" / "n4")
    assert r.exit_code == 1 and "--text-field" in r.output
    assert not (tmp_path / "out" / "n4").exists()
    (tmp_path / "mine").mkdir()  # a directory that was there before stays
    assert run("pack", tmp_path / "notes.jsonl", "--text-field", "body", "-o", tmp_path / "mine").exit_code == 1
    assert (tmp_path / "mine").is_dir()


def test_an_output_that_cannot_be_created_is_named_with_the_fix(tmp_path):
    """It was the bare "[Errno 20] Not a directory: '...'"."""
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "file").write_text("")
    r = run("pack", tmp_path / "a.txt", "-o", tmp_path / "file" / "ds")
    assert r.exit_code == 1
    assert r.output.strip() == (
        f"roxxel: error: cannot create the dataset directory '{tmp_path / 'file' / 'ds'}': "
        "Not a directory; choose a directory you can write to"
    )


def test_empty_jsonl_fails_and_an_empty_append_leaves_the_dataset_as_it_was(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    r = run("pack", empty, "-o", tmp_path / "ds")
    assert r.exit_code == 1 and "the inputs hold no documents" in r.output and "--text-field" in r.output
    (tmp_path / "a.txt").write_text("one")
    assert run("pack", tmp_path / "a.txt", "-o", tmp_path / "ds").exit_code == 0
    assert run("pack", empty, "-o", tmp_path / "ds", "--append").exit_code == 1
    assert Roxxel(str(tmp_path / "ds")).num_documents == 1


def test_an_include_that_matches_nothing_names_the_flag_not_python_values(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1")
    r = run("pack", tmp_path / "src", "--include", "*.pyy", "-o", tmp_path / "ds")
    assert r.exit_code == 1
    assert f"no file in {tmp_path / 'src'} matches --include '*.pyy'" in r.output, r.output
    assert "['" not in r.output and "include=" not in r.output


def test_eos_id_the_byte_tokenizer_would_ignore_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    for eos in ("300", "-1"):
        r = run("pack", tmp_path / "a.txt", "-o", tmp_path / "ds", "--eos-id", eos)
        assert r.exit_code == 1 and f"always 256, not {eos}; leave --eos-id out" in r.output, r.output
    assert run("pack", tmp_path / "a.txt", "-o", tmp_path / "ds", "--eos-id", "256").exit_code == 0


def test_eos_id_outside_a_tokenizers_vocabulary_is_refused(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "a.txt").write_text("a a")
    r = run(
        "pack", tmp_path / "a.txt", "-o", tmp_path / "ds", "--tokenizer", tmp_path / "tokenizer.json", "--eos-id", "5"
    )
    assert r.exit_code == 1 and "EOS id 5 is outside the vocabulary" in r.output and "--eos-id" in r.output


def test_cat_out_of_range_counts_in_english(tmp_path):
    (tmp_path / "a.txt").write_text("one")
    assert run("pack", tmp_path / "a.txt", "-o", tmp_path / "ds").exit_code == 0
    r = run("cat", tmp_path / "ds", "5")
    assert r.exit_code == 1
    assert "document index 5 out of range: the dataset holds 1 document, numbered from 0" in r.output, r.output


def test_cat_takes_a_negative_index_as_documented(tmp_path):
    """`roxxel cat ds -1` was click's "No such option: -1"; it needed `-- -1`."""
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "b.txt").write_text("two")
    assert run("pack", tmp_path / "a.txt", tmp_path / "b.txt", "-o", tmp_path / "ds").exit_code == 0
    assert run("cat", tmp_path / "ds", "-1").output == "two"
    assert run("cat", tmp_path / "ds", "-2", "--ids").output.split() == [str(b) for b in b"one"] + ["256"]  # + EOS
    assert run("cat", tmp_path / "ds", "--ids", "--", "-1").output.split() == [str(b) for b in b"two"] + ["256"]
    r = run("cat", tmp_path / "ds", "-3")
    assert r.exit_code == 1 and "document index -3 out of range" in r.output
    assert run("cat", tmp_path / "ds", "-1", "--idz").exit_code == 2  # a mistyped option is still one


def test_cat_with_a_tokenizer_but_without_the_tokenizers_package_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "a.txt").write_text("one")
    assert run("pack", tmp_path / "a.txt", "-o", tmp_path / "ds").exit_code == 0
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # `import tokenizers` raises ImportError
    r = run("cat", tmp_path / "ds", "0", "--tokenizer", tmp_path / "tokenizer.json")
    assert r.exit_code == 1  # before: an ImportError traceback
    assert r.output.startswith("roxxel: error: ") and "pip install 'roxxel[tokenizers]'" in r.output


def test_a_negative_wait_lock_is_refused():
    r = CliRunner().invoke(main, ["pack", "x.txt", "-o", "ds", "--wait-lock", "-3"])
    assert r.exit_code == 2 and "--wait-lock" in r.output and "-3" in r.output


def test_ctrl_c_during_a_pack_exits_130_and_keeps_the_dataset_as_it_was(tmp_path, monkeypatch):
    """Ctrl-C printed click's bare 'Aborted!' and exited 1; a shell reports SIGINT as 130."""
    import roxxel.pack

    (tmp_path / "a.txt").write_text("first")
    assert run("pack", tmp_path / "a.txt", "-o", tmp_path / "ds").exit_code == 0
    real = roxxel.pack.pack

    def interrupted(*args, **kwargs):
        kwargs["on_progress"] = lambda *_: (_ for _ in ()).throw(KeyboardInterrupt)  # Ctrl-C mid-write
        return real(*args, **kwargs)

    monkeypatch.setattr(roxxel.pack, "pack", interrupted)
    (tmp_path / "b.txt").write_text("second")
    r = CliRunner().invoke(main, ["pack", str(tmp_path / "b.txt"), "-o", str(tmp_path / "ds"), "--append"])
    assert r.exit_code == 130 and "interrupted" in r.output and "is as it was before" in r.output, r.output
    assert Roxxel(str(tmp_path / "ds")).num_documents == 1


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("cut.txt.gz", gzip.compress(b"hello world\n" * 100)[:20], "cut.txt.gz: not a complete gzip file"),
        ("cut.jsonl.gz", gzip.compress(b'{"text": "hello"}\n' * 100)[:25], "cut.jsonl.gz: not a complete gzip file"),
        ("fake.txt.gz", b"no gzip here\n", "fake.txt.gz: not a complete gzip file"),
        (
            "half.jsonl",
            b'{"text": "ok"}\n{"text": "\\ud800 x"}\n',
            "half.jsonl:2: the text holds an unpaired surrogate",
        ),
    ],
    ids=["cut-gz", "cut-jsonl-gz", "not-gzip", "surrogate"],
)
def test_a_damaged_input_is_named_in_one_line(tmp_path, name, content, message):
    """Found by a new user's pass: a truncated .gz printed only "Aborted!", a non-gzip .gz named no
    file, and a JSONL line with half a UTF-16 pair ended in a tokenizer's TypeError traceback."""
    (tmp_path / name).write_bytes(content)
    roxxel = os.path.join(os.path.dirname(sys.executable), "roxxel")
    for extra in ([], ["--jobs", "2"]):
        r = subprocess.run(
            [roxxel, "pack", str(tmp_path / name), "-o", str(tmp_path / "out"), *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1 and "Traceback" not in r.stderr and "Aborted" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith(f"roxxel: error: {tmp_path / message}"), r.stderr
        assert not (tmp_path / "out").exists()
