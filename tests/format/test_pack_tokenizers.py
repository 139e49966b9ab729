"""A Hugging Face tokenizer is used as an encoder only (#49): every document is packed whole, as
its text, and the one EOS id in it is the separator Roxxel adds after it.

Each test failed before the fix: literal special-token text became the EOS id (3 documents gave
5 segments), a tokenizer.json saved with truncation or padding cut or padded every document.
"""

import json
import os
import pickle

import pytest
from click.testing import CliRunner

from roxxel import Roxxel
from roxxel.cli import main
from roxxel.tokenizers import load_tokenizer

tokenizers = pytest.importorskip("tokenizers")

EOT = "<|endoftext|>"
DOCS = [
    f"tokenizer.decode(ids) + '{EOT}'  # the GPT-2 separator, quoted",
    f"{EOT}",
    f"chat: user said {EOT}{EOT} twice, then <|im_start|> and </s>",
]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def byte_level_bpe(special=True):
    """A byte-level BPE (exact decode) trained on a tiny corpus, with ``<|endoftext|>``: special (id
    0), or an ordinary added token (the last id; the trainer would make it special)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["def f(x):\n    return x  # done", "the cat sat on the mat", "print('hello world')"] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=[EOT] if special else [],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    if not special:
        tok.add_tokens([AddedToken(EOT, special=False)])
    assert tok.token_to_id(EOT) == (0 if special else tok.get_vocab_size() - 1)
    return tok


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    return path


def assert_packed_whole(ds_path, tok, docs=DOCS):
    ds = Roxxel(str(ds_path))
    assert len(ds) == len(docs)
    for k, text in enumerate(docs):
        ids = ds[k]
        assert ids[-1] == ds.eos_id and (ids[:-1] != ds.eos_id).all(), (k, ids)
        assert tok.decode(ids[:-1].tolist()) == text


@pytest.mark.parametrize("jobs", [1, 2])
def test_special_token_text_in_a_document_is_packed_as_text(tmp_path, jsonl, jobs):
    tok = byte_level_bpe()
    tok.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "ds"
    r = run("pack", jsonl, "--tokenizer", tmp_path / "tokenizer.json", "-o", out, "--jobs", jobs)
    assert r.exit_code == 0, r.output
    assert_packed_whole(out, tok)
    # The document index agrees: 3 documents, and cat gives each back exactly.
    for k, text in enumerate(DOCS):
        assert run("cat", out, k).output == text


def test_the_python_api_encodes_special_token_text_as_text(tmp_path):
    tok = byte_level_bpe()
    Roxxel(str(tmp_path / "api")).write(DOCS, tokenizer=tok)
    assert_packed_whole(tmp_path / "api", tok)
    # The caller's Tokenizer object is left as it was.
    assert not tok.encode_special_tokens
    assert tok.encode(EOT, add_special_tokens=False).ids == [0]


def test_a_pickled_tokenizer_still_encodes_special_token_text_as_text():
    """A forkserver pool worker (used once JAX is imported) gets the tokenizer pickled: the setting
    lives outside tokenizer.json, so it must be set again there."""
    hf = pickle.loads(pickle.dumps(load_tokenizer(byte_level_bpe())))
    ids = hf.encode(DOCS[0])
    assert 0 not in ids.tolist() and hf.decode(ids) == DOCS[0]


@pytest.mark.parametrize(
    "setting",
    [
        lambda t: t.enable_truncation(max_length=8),
        lambda t: t.enable_padding(length=64, pad_id=0, pad_token=EOT),
        lambda t: (t.enable_truncation(max_length=8), t.enable_padding(length=64)),
    ],
    ids=["truncation", "padding", "both"],
)
def test_a_tokenizer_json_saved_with_truncation_or_padding_packs_documents_whole(tmp_path, jsonl, setting, caplog):
    clean = byte_level_bpe()
    clean.save(str(tmp_path / "clean.json"))
    saved = byte_level_bpe()
    setting(saved)
    saved.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "ds"
    r = run("pack", jsonl, "--tokenizer", tmp_path / "tokenizer.json", "-o", out)
    assert r.exit_code == 0, r.output
    assert_packed_whole(out, clean)
    # The identity records the tokenizer as used: the JSON hashed with truncation and padding off
    # (the same as a file saved without them), and what was turned off.
    ident = Roxxel(str(out)).tokenizer
    assert ident["sha256"] == load_tokenizer(str(tmp_path / "clean.json")).identity["sha256"]
    assert set(ident["turned_off"]) <= {"truncation", "padding"} and ident["turned_off"]
    assert "turned off, documents are packed whole" in caplog.text
    assert run("cat", out, 2).output == DOCS[2]  # found beside the dataset, and taken: the same tokenizer


def test_a_file_without_those_settings_keeps_its_identity(tmp_path):
    """Datasets packed before still match their tokenizer.json: its hash is unchanged."""
    import hashlib

    tok = byte_level_bpe()
    tok.save(str(tmp_path / "tokenizer.json"))
    ident = load_tokenizer(str(tmp_path / "tokenizer.json")).identity
    from tokenizers import Tokenizer

    before = hashlib.sha256(Tokenizer.from_file(str(tmp_path / "tokenizer.json")).to_str().encode()).hexdigest()
    assert ident["sha256"] == before and "turned_off" not in ident


def test_a_post_processor_that_adds_tokens_adds_none(tmp_path, jsonl):
    from tokenizers import processors

    tok = byte_level_bpe()
    bos = tok.add_special_tokens(["<s>"]) and tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    tok.save(str(tmp_path / "tokenizer.json"))
    assert tok.encode("the cat").ids[0] == bos  # what it would add
    out = tmp_path / "ds"
    assert run("pack", jsonl, "--tokenizer", tmp_path / "tokenizer.json", "-o", out).exit_code == 0
    ds = Roxxel(str(out))
    assert all(bos not in ds[k].tolist() for k in range(len(ds)))
    assert_packed_whole(out, tok)


def test_an_eos_token_not_marked_special_in_a_document_is_refused_naming_it(tmp_path, jsonl):
    """Text can still encode to an EOS id whose token is not special (or an ordinary token given as
    --eos-id): refused in one line naming the file, the document and the fix; nothing is written."""
    tok = byte_level_bpe(special=False)
    tok.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "ds"
    for jobs in (1, 2):
        r = run("pack", jsonl, "--tokenizer", tmp_path / "tokenizer.json", "-o", out, "--jobs", jobs)
        assert r.exit_code != 0
        line = r.output.strip()
        assert len(line.splitlines()) == 1, r.output
        eos = tok.token_to_id(EOT)
        assert f"{jsonl}, document 1: its text encodes to '{EOT}' (id {eos}), the end-of-document id" in line, line
        assert "mark '<|endoftext|>' special" in line and "--eos-id" in line
        assert not os.path.exists(out / "dataset.json")
    with pytest.raises(ValueError, match=r"^document 0: its text encodes to .*pass an eos_id"):
        Roxxel(str(tmp_path / "api")).write(DOCS, tokenizer=tok)
    # Documents that do not contain it pack as before.
    clean = tmp_path / "clean.jsonl"
    clean.write_text(json.dumps({"text": "the cat sat"}) + "\n")
    assert run("pack", clean, "--tokenizer", tmp_path / "tokenizer.json", "-o", tmp_path / "ok").exit_code == 0
    assert (Roxxel(str(tmp_path / "ok"))[0] == tok.token_to_id(EOT)).sum() == 1


def test_the_byte_level_tokenizer_packs_special_token_text_as_text(tmp_path, jsonl):
    """The other tokenizer `roxxel pack` offers: its EOS (256) is no byte, so no text can make it."""
    out = tmp_path / "ds"
    assert run("pack", jsonl, "-o", out).exit_code == 0
    ds = Roxxel(str(out))
    assert len(ds) == len(DOCS)
    for k, text in enumerate(DOCS):
        assert (ds[k][:-1] != 256).all() and run("cat", out, k).output == text
