"""`roxxel pack`, `info`, `verify` and `cat` as a user runs them."""

import json
import os
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
from click.testing import CliRunner

from roxxel import Roxxel
from roxxel.cli import main, parse_size
from roxxel.pack import iter_input_files
from roxxel.tokenizers import ByteTokenizer


def run(*args, input=None):
    result = CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)
    return result


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "src"
    (root / "pkg" / "sub").mkdir(parents=True)
    files = {
        "pkg/a.py": "print('a')\n",
        "pkg/b.txt": "not python\n",
        "pkg/sub/c.py": "x = 'ü ∑ 𝄞'\n",
        "pkg/sub/binary.py": bytes([0xFF, 0xFE, 0x00, 0x80]),
        "z.py": "",
    }
    for name, content in files.items():
        p = root / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def test_pack_info_verify_cat(tree, tmp_path):
    out = str(tmp_path / "ds")
    r = run("pack", str(tree), "--include", "*.py", "-o", out, "--shard-size", "1KiB", "--include-binary")
    assert r.exit_code == 0, r.output
    files = list(iter_input_files([str(tree)], ["*.py"]))
    assert [os.path.relpath(f, tree) for f in files] == ["z.py", "pkg/a.py", "pkg/sub/binary.py", "pkg/sub/c.py"]
    ds = Roxxel(out)
    assert len(ds) == 4
    for k, f in enumerate(files):
        assert ByteTokenizer().decode_bytes(ds[k]) == open(f, "rb").read()
        assert ds[k][-1] == 256
    info = run("info", out)
    assert info.exit_code == 0 and "documents   4" in info.output and "uint16" in info.output
    assert json.loads(run("info", out, "--json").output)["tokenizer"]["type"] == "bytes"
    assert run("verify", out).output.startswith("OK: ")
    cat = subprocess.run([sys.executable, "-m", "roxxel.cli", "cat", out, "2"], capture_output=True)
    assert cat.returncode == 0 and cat.stdout == open(files[2], "rb").read()


def test_cat_ends_a_line_on_a_terminal_only(tmp_path):
    """`roxxel cat` left the prompt on the document's last line; a pipe still gets the exact bytes."""
    import pty

    doc = tmp_path / "note.txt"
    doc.write_bytes(b"no newline at the end")
    out = str(tmp_path / "ds")
    assert run("pack", str(doc), "-o", out).exit_code == 0
    piped = subprocess.run([sys.executable, "-m", "roxxel.cli", "cat", out, "0"], capture_output=True)
    assert piped.stdout == b"no newline at the end"
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "roxxel.cli", "cat", out, "0"], stdout=follower, timeout=60)
        assert proc.returncode == 0
        assert os.read(leader, 4096).replace(b"\r\n", b"\n") == b"no newline at the end\n"
    finally:
        os.close(leader)
        os.close(follower)


def test_verify_exits_nonzero_naming_the_file(tree, tmp_path):
    out = tmp_path / "ds"
    assert run("pack", str(tree), "-o", str(out)).exit_code == 0
    shard = out / "shard-00000.rox"
    data = bytearray(shard.read_bytes())
    data[4096 + 3] ^= 0x55
    shard.write_bytes(bytes(data))
    proc = subprocess.run([sys.executable, "-m", "roxxel.cli", "verify", str(out)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"{shard}: checksum mismatch" in proc.stderr


def test_pack_refuses_existing_and_appends(tree, tmp_path):
    out = str(tmp_path / "ds")
    assert run("pack", str(tree / "z.py"), "-o", out).exit_code == 0
    r = subprocess.run(
        [sys.executable, "-m", "roxxel.cli", "pack", str(tree / "pkg" / "a.py"), "-o", out],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "already holds a dataset" in r.stderr and "--append" in r.stderr
    assert run("pack", str(tree / "pkg" / "a.py"), "-o", out, "--append").exit_code == 0
    assert len(Roxxel(out)) == 2


def test_pack_errors_are_clear(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "roxxel.cli", "pack", str(tmp_path / "missing"), "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "input not found" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"body": "no text"}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "roxxel.cli", "pack", str(bad), "-o", str(tmp_path / "o2")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and f"{bad}:2: the line has no field 'text' (it has 'body')" in proc.stderr
    assert not (tmp_path / "o2" / "dataset.json").exists()


def test_jsonl_stdin_and_parquet(tmp_path):
    rows = ["first doc", "second ✓", "third"]
    jl = tmp_path / "d.jsonl"
    jl.write_text("".join(json.dumps({"content": t}) + "\n" for t in rows))
    assert run("pack", str(jl), "--text-field", "content", "-o", str(tmp_path / "j")).exit_code == 0
    dec = ByteTokenizer().decode
    assert [dec(d) for d in Roxxel(str(tmp_path / "j"))[:]] == rows
    r = run(
        "pack", "-", "-o", str(tmp_path / "s"), "--format", "jsonl", "--text-field", "content", input=jl.read_text()
    )
    assert r.exit_code == 0 and [dec(d) for d in Roxxel(str(tmp_path / "s"))[:]] == rows
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": rows}), tmp_path / "d.parquet")
    assert run("pack", str(tmp_path / "d.parquet"), "-o", str(tmp_path / "p")).exit_code == 0
    assert [dec(d) for d in Roxxel(str(tmp_path / "p"))[:]] == rows


def test_huggingface_tokenizer_json(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 20
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=60, special_tokens=["<unk>", "<|endoftext|>"]))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:3]))
    assert run("pack", str(src), "--tokenizer", str(path), "-o", str(tmp_path / "ds")).exit_code == 0
    ds = Roxxel(str(tmp_path / "ds"))
    assert ds.eos_id == 1 and ds.tokenizer["type"] == "huggingface" and ds.tokenizer["name"] == "tokenizer.json"
    assert ds.dtype == np.dtype("uint16")
    assert tok.decode(ds[1][:-1].tolist()) == texts[1]
    r = run("cat", str(tmp_path / "ds"), "0", "--tokenizer", str(path))
    assert r.output == texts[0]
    # Without --tokenizer: the one the dataset names, found beside it (here, in the directory
    # above, where examples/lm/prepare.py puts it) and checked by its SHA-256.
    r = run("cat", str(tmp_path / "ds"), "0")
    assert r.exit_code == 0 and r.output == texts[0], r.output
    # Another tokenizer would decode the ids into wrong text that can look right: refused, naming both.
    tok.add_tokens(["mat"])
    tok.save(str(tmp_path / "other.json"))
    for other in (str(tmp_path / "other.json"), "bytes"):
        r = run("cat", str(tmp_path / "ds"), "0", "--tokenizer", other)
        assert r.exit_code == 1 and "was packed with tokenizer 'tokenizer.json' (SHA-256 " in r.output, r.output
        assert "decode wrong" in r.output and len(r.output.strip().splitlines()) == 1
    tok.save(str(path))  # the other one now under the recorded name: not taken, and the error says where it looked
    r = run("cat", str(tmp_path / "ds"), "0")
    assert r.exit_code == 1 and f"neither {tmp_path / 'ds' / 'tokenizer.json'} nor {path} is it" in r.output, r.output
    assert "pass --tokenizer PATH (that tokenizer.json), or --ids" in r.output
    assert run("pack", str(src), "-o", str(tmp_path / "bytes")).exit_code == 0
    r = run("cat", str(tmp_path / "bytes"), "0", "--tokenizer", str(path))
    assert r.exit_code == 1 and "was packed with the byte-level tokenizer, not tokenizer 'tokenizer.json'" in r.output
    # The original API's tokenizer= variant, with the Tokenizer object itself.
    Roxxel(str(tmp_path / "api")).write(texts[:3], tokenizer=tok)
    assert tok.decode(Roxxel(str(tmp_path / "api"))[2][:-1].tolist()) == texts[2]


def test_original_write_api(tmp_path):
    Roxxel(str(tmp_path / "lines.rox")).write(["alpha", b"beta", "gamma"], separator=b"\n", block_size=4096)
    ds = Roxxel(str(tmp_path / "lines.rox"))
    assert ds.read(0, ds.num_tokens).tobytes() == b"alpha\nbeta\ngamma\n" and ds.eos_id == 10
    arrays = [np.arange(i, i + 50, dtype=np.int32) for i in range(100)]
    m = Roxxel(str(tmp_path / "tok.rox")).write(arrays, max_shard_bytes=8192, dtype="int32")
    assert len(m.shards) > 1 and os.path.exists(tmp_path / "tok_0000.rox")
    ds = Roxxel(str(tmp_path / "tok.rox"))
    assert ds.dtype == np.dtype("uint32") and np.array_equal(ds[42], arrays[42])


def test_cat_prints_bytes_written_without_a_tokenizer_and_asks_for_one_for_other_ids(tmp_path):
    """Found by a new user: the original API's byte documents (uint8, no tokenizer recorded) could
    only be printed with --ids; cat asked for a tokenizer.json file name the data never had."""
    Roxxel(str(tmp_path / "lines.rox")).write(["alpha", "beta"], separator=b"\n")
    for args in ([], ["--tokenizer", "bytes"]):
        r = CliRunner().invoke(main, ["cat", str(tmp_path / "lines.rox"), "1", *args])
        assert r.exit_code == 0 and r.stdout_bytes == b"beta\n", r.output
    Roxxel(str(tmp_path / "tok.rox")).write([np.arange(5, dtype=np.int32)], dtype="int32")
    r = CliRunner().invoke(main, ["cat", str(tmp_path / "tok.rox"), "0"])
    assert r.exit_code == 1 and "records no tokenizer (its ids were written without one); pass --tokenizer" in r.output
    assert run("cat", str(tmp_path / "tok.rox"), "0", "--ids").output == "0 1 2 3 4\n"


def test_parse_size():
    assert parse_size("256MiB") == 256 << 20
    assert parse_size("1GB") == 10**9
    assert parse_size("4096") == 4096
    with pytest.raises(Exception, match="not a size"):
        parse_size("lots")


@pytest.mark.slow
def test_pack_the_python_standard_library(tmp_path):
    """The issue's acceptance run: real text that ships with every Python, decoded back exactly."""
    stdlib = sysconfig.get_paths()["stdlib"]
    out = str(tmp_path / "stdlib")
    cmd = ["pack", stdlib, "--include", "*.py", "--exclude", "*/site-packages/*", "-o", out]
    assert run(*cmd).exit_code == 0
    assert run("verify", out).exit_code == 0
    files = list(iter_input_files([stdlib], ["*.py"], ["*/site-packages/*"]))
    ds = Roxxel(out)
    assert len(ds) == len(files) > 500
    dec = ByteTokenizer().decode_bytes
    for k in range(0, len(files), 7):
        assert dec(ds[k]) == open(files[k], "rb").read(), files[k]
