"""Pack the language model's data: real text that ships with every Python.

Under OUTPUT (default runs/data/lm), a tokenizer and three datasets of its tokens:
  tokenizer.json  byte-level BPE with 1,024 ids (Hugging Face ``tokenizers``), trained on a
                  quarter of the code/ files: a token is ~2.4 bytes of Python on average, and
                  common words with the space before them (`` self``, `` return``) are one token
  code/           .py sources of the standard library (every file but each 20th), less the
                  generated codec tables (see :func:`is_codec_table`)
  text/           the library's other text files (.txt, .rst, .toml, .json, .xml, .cfg, .css, .html,
                  .md, decimal tests)
  code-eval/      every 20th .py file, held out for evaluation
Files that are not UTF-8 (a few tests of other encodings) are left out: BPE reads text.

Usage: python examples/lm/prepare.py [OUTPUT]
What already exists (the tokenizer, a packed dataset) is kept: delete OUTPUT to start afresh
(a dataset packed from another number of files than this prepare.py selects says so).
A deleted tokenizer.json is trained again, the same (the same files give the same merges).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
import time

from roxxel import Roxxel
from roxxel.pack import iter_input_files, pack
from roxxel.tokenizers import check_identity, load_tokenizer
from roxxel.wording import count

TEXT_PATTERNS = ["*.txt", "*.rst", "*.toml", "*.json", "*.xml", "*.cfg", "*.decTest", "*.css", "*.html", "*.md"]
EXCLUDE = ["*/site-packages/*", "*/__pycache__/*"]
HOLD_OUT_EVERY = 20
VOCAB_SIZE = 1024
TRAIN_TOKENIZER_EVERY = 4  # of the code files: 2 s of training, and the same merges as on all of them, nearly
EOS = "<|endoftext|>"


def datasets(stdlib: str) -> dict[str, list[str]]:
    """The files of each dataset, in a fixed order (UTF-8 text only)."""
    code = [f for f in iter_input_files([stdlib], ["*.py"], EXCLUDE) if is_utf8(f) and not is_codec_table(f)]
    text = [f for f in iter_input_files([stdlib], TEXT_PATTERNS, EXCLUDE) if is_utf8(f)]
    return {
        "code": [f for i, f in enumerate(code) if i % HOLD_OUT_EVERY],
        "code-eval": code[::HOLD_OUT_EVERY],
        "text": text,
    }


def is_utf8(path: str) -> bool:
    with open(path, "rb") as f:
        try:
            f.read().decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


# How every character-map codec of encodings/ opens (its module docstring), whether gencodec.py
# wrote it ("Python Character Mapping Codec cp1252 generated from 'MAPPINGS/...' with
# gencodec.py.") or a hand adapted it ("... for CP858, modified from cp850.").
CODEC_TABLE_HEADER = "Python Character Mapping Codec"


def is_codec_table(path: str) -> bool:
    """Whether ``path`` is one of the standard library's character-map codecs (encodings/cp1252.py,
    mac_roman.py, ... about 70 files): a page of boilerplate around a 256-entry
    ``decoding_table`` (or ``decoding_map``) literal, one ``'\\x..'  #  0x.. -> LATIN SMALL
    LETTER ...`` line per byte.

    Left out of the datasets because they are data, not code: ~4% of the sources' bytes, but the
    most repetitive, so a small model learns them first, and its sample after ``    def `` drifted
    into ``0x00,     #  LATIN SMALL LETTER`` rows (the BPE vocabulary, trained on the same files,
    spent ids on `` LATIN``, `` SMALL``, `` LETTER`` too). Recognised by what the files say of
    themselves (the docstring every such codec opens with, and its table), not by their names,
    so a Python that adds or renames a codec needs no change here.
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    opening = text.lstrip().removeprefix('"""').lstrip()
    return opening.startswith(CODEC_TABLE_HEADER) and ("decoding_table" in text or "decoding_map" in text)


def train_tokenizer(files: list[str], path: str, vocab_size: int = VOCAB_SIZE) -> None:
    """Train a byte-level BPE tokenizer (GPT-2's pre-tokenization, ``<|endoftext|>`` as EOS) on
    ``files`` and save it to ``path`` (a tokenizer.json), atomically.

    Byte-level: every byte has an id, so any text encodes, and decoding gives back the exact text.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(
        files,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOS],
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tokenizer-", suffix=".json")
    os.close(fd)
    try:
        tok.save(tmp)
        os.chmod(tmp, 0o644)  # as the shards: readable by the workers, whichever user they run as
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main(output: str) -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    files = datasets(stdlib)
    os.makedirs(output, exist_ok=True)
    tokenizer = os.path.join(output, "tokenizer.json")
    if os.path.exists(tokenizer):
        print(f"{tokenizer}: already trained")
    else:
        t0 = time.monotonic()
        train_tokenizer(files["code"][::TRAIN_TOKENIZER_EVERY], tokenizer)
        print(f"{tokenizer}: byte-level BPE, {VOCAB_SIZE:,} ids, trained in {time.monotonic() - t0:.0f} s")
    tok = None  # loaded (and hashed) once, for the datasets an earlier run packed
    for name, paths in files.items():
        path = os.path.join(output, name)
        if os.path.exists(os.path.join(path, "dataset.json")):
            try:  # packed by an earlier run: with this tokenizer?
                tok = tok or load_tokenizer(tokenizer)
                check_identity(tok, Roxxel(path).tokenizer, path)
            except ValueError:  # another tokenizer, or a tokenizer.json that does not load
                sys.exit(
                    f"prepare.py: {path} was not packed with {tokenizer}; delete {tokenizer} to train it again "
                    f"from the same files, or all of {output} to start afresh"
                )
            packed = Roxxel(path).num_documents  # a document per file
            if packed != len(paths):  # packed from another selection (another Python, an older prepare.py)
                print(
                    f"{path}: already packed, from {count(packed, 'file')}; this prepare.py selects "
                    f"{count(len(paths), 'file')}: delete {output} to pack them afresh"
                )
            else:
                print(f"{path}: already packed")
            continue
        # Tokenizing the code takes ~20 s of both cores: say so before it starts, not after.
        print(f"{path}: packing {count(len(paths), 'file')} (BPE on every core) ...", flush=True)
        t0 = time.monotonic()
        m = pack(paths, path, tokenizer=tokenizer, jobs=0)  # jobs=0: tokenize on every core
        print(f"{path}: {m.num_documents:,} documents, {m.num_tokens:,} tokens ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/data/lm")
