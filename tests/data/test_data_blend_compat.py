"""Blends must share tokenizer, vocabulary, EOS id and dtype; the model's vocabulary is enforced."""

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.format import DatasetWriter
from roxxel.format.errors import DtypeMismatchError


def make(path, vocab, eos, dtype, n=2000, tokenizer=None, hi=None):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, hi or min(vocab, 250), 99) for _ in range(n // 100)]
    with DatasetWriter(str(path / "dataset.json"), vocab_size=vocab, eos_id=eos, dtype=dtype, tokenizer=tokenizer) as w:
        w.add_documents(docs)
    return Roxxel(str(path))


PHASE = [Phase(steps=2, global_batch_size=2, seq_len=16, weights={"primary": 1, "b": 1})]


@pytest.mark.parametrize(
    "other, field",
    [
        ((257, 0, "uint16"), "eos_id"),
        ((50_000, 256, "uint16"), "vocab_size"),
        ((257, 256, "uint32"), "dtype"),
    ],
)
def test_incompatible_blend_is_refused_naming_both_and_the_field(tmp_path, other, field):
    a = make(tmp_path / "a", 257, 256, "uint16")
    b = make(tmp_path / "b", *other)
    with pytest.raises(DtypeMismatchError, match=rf"'primary' .*'b' .*differ in {field}"):
        Curriculum({"primary": a, "b": b}, PHASE, chunk_tokens=64)


def test_different_tokenizers_are_refused(tmp_path):
    a = make(tmp_path / "a", 257, 256, "uint16", tokenizer={"type": "bytes"})
    b = make(tmp_path / "b", 257, 256, "uint16", tokenizer={"type": "hf", "sha256": "ab"})
    with pytest.raises(DtypeMismatchError, match="tokenizer"):
        Curriculum({"primary": a, "b": b}, PHASE, chunk_tokens=64)


def test_compatible_blend_is_accepted(tmp_path):
    a = make(tmp_path / "a", 257, 256, "uint16")
    b = make(tmp_path / "b", 257, 256, "uint16")
    assert Curriculum({"primary": a, "b": b}, PHASE, chunk_tokens=64).total_steps == 2


def test_model_vocab_smaller_than_data_vocab_is_refused(tmp_path):
    a = make(tmp_path / "a", 50_000, 0, "uint16")
    with pytest.raises(ValueError, match="50000 ids but the model's vocab_size is 257"):
        Curriculum(a, [Phase(steps=1, global_batch_size=2, seq_len=16)], vocab_size=257)
    with pytest.raises(ValueError, match="vocab_size is 257"):
        a.stream(seq_len=16, batch_size=2, seed=0, vocab_size=257, to_device=False)


def test_rows_with_ids_beyond_model_vocab_raise(tmp_path):
    a = make(tmp_path / "a", 65_536, 0, "uint16", hi=60_000)
    c = Curriculum(a, [Phase(steps=2, global_batch_size=2, seq_len=16)], chunk_tokens=64)
    silent = make(tmp_path / "silent", None, 0, "uint16", hi=60_000)  # data that declares no vocabulary
    c2 = Curriculum(silent, [Phase(steps=2, global_batch_size=2, seq_len=16)], chunk_tokens=64, vocab_size=1000)
    with pytest.raises(ValueError, match="beyond the model's vocab_size 1000"):
        list(c2.stream(seed=0, to_device=False, prefetch_size=0))
    assert len(list(c.stream(seed=0, to_device=False, prefetch_size=0))) == 2


@pytest.mark.parametrize("how", ["list", "glob"])
def test_one_dataset_of_shards_from_two_tokenizers_is_refused(tmp_path, how):
    """Found by a new user's pass: Roxxel([bpe_dir, bytes_dir]) (or a glob over both) read the
    byte-level ids as BPE ids, under the first one's vocabulary and EOS; only the dtype was compared."""
    make(tmp_path / "a", 1000, 0, "uint16", tokenizer={"type": "huggingface", "sha256": "ab"})
    make(tmp_path / "b", 1000, 0, "uint16", tokenizer={"type": "bytes"})
    spec = [str(tmp_path / "a"), str(tmp_path / "b")] if how == "list" else str(tmp_path / "*" / "shard-*.rox")
    with pytest.raises(DtypeMismatchError, match=r"must come from one tokenizer: .*/a/\S+ has tokenizer .*/b/\S+ has"):
        Roxxel(spec).open()
    same = make(tmp_path / "c", 1000, 0, "uint16", tokenizer={"type": "huggingface", "sha256": "ab"})
    assert Roxxel([str(tmp_path / "a"), same.filepath]).num_tokens == 2 * same.num_tokens
