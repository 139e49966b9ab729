"""The contract of `roxxel pack` (issue 49): what goes in comes back out. Randomly generated
documents (any Unicode, special-token look-alikes, empty, long, binary-looking) go through every
input path on the byte-level tokenizer (text files, JSONL, Parquet, standard input, each
compressed as .gz, .bz2, .xz and .zst) in one pack, and document k of the dataset is input
document k, byte for byte, and there are as many of them."""

import bz2
import gzip
import io
import json
import lzma
import os
import sys
import tempfile
from unittest import mock

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roxxel import Roxxel
from roxxel.cli import main
from roxxel.pack import byte_path, iter_documents, pack, read_input

zstandard = pytest.importorskip("zstandard")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

COMPRESS = {
    "": lambda b: b,
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zst": lambda b: zstandard.ZstdCompressor().compress(b),
}
LOOK_ALIKES = ["<|endoftext|>", "</s>", "<s>", "<eos>", "[EOS]", "<|eot_id|>", "<|im_start|>user\n", "\x00", "\ufeff"]

texts = st.one_of(
    st.text(max_size=60),  # any Unicode but lone surrogates, which no UTF-8 text holds
    st.sampled_from(["", *LOOK_ALIKES]),
    st.lists(st.one_of(st.sampled_from(LOOK_ALIKES), st.text(max_size=8)), max_size=6).map("".join),
    st.text(st.characters(max_codepoint=0x20), max_size=40),  # control characters, NUL: binary-looking
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=6), st.integers(500, 6000)),  # long
)
raw = st.one_of(texts.map(str.encode), st.binary(max_size=80))  # a text file's bytes: need not be UTF-8


@st.composite
def inputs(draw):
    """A pack's inputs, (kind, suffix, documents) each (a text file or stdin holds one document),
    and the format: ``auto``, or ``jsonl`` for every input, stdin too."""
    fmt = draw(st.sampled_from(["auto", "auto", "jsonl"]))
    parts = []
    for _ in range(draw(st.integers(1, 7))):
        kind = "jsonl" if fmt == "jsonl" else draw(st.sampled_from(["text", "jsonl", "parquet"]))
        suffix = "" if kind == "parquet" else draw(st.sampled_from(list(COMPRESS)))
        docs = [draw(raw)] if kind == "text" else draw(st.lists(texts, max_size=5))
        parts.append((kind, suffix, docs))
    if draw(st.booleans()):  # standard input, somewhere among the files
        stdin = ("-jsonl", "", draw(st.lists(texts, max_size=5))) if fmt == "jsonl" else ("-text", "", [draw(raw)])
        parts.insert(draw(st.integers(0, len(parts))), stdin)
    return parts, fmt


def jsonl(docs, ascii_only):
    """One line per document, with blank lines among them (not documents)."""
    return "".join(
        json.dumps({"id": i, "text": d}, ensure_ascii=ascii_only) + "\n" + "\n" * (i % 2) for i, d in enumerate(docs)
    ).encode()


def write_inputs(parts, d):
    """The input paths, what stdin holds, and the documents in input order (as bytes)."""
    paths, stdin, expected = [], b"", []
    for i, (kind, suffix, docs) in enumerate(parts):
        expected += [doc if isinstance(doc, bytes) else doc.encode() for doc in docs]
        if kind.startswith("-"):
            paths.append("-")
            stdin = docs[0] if kind == "-text" else jsonl(docs, i % 2 == 0)
            continue
        path = os.path.join(d, f"in{i:02d}.{'txt' if kind == 'text' else kind}{suffix}")
        paths.append(path)
        if kind == "parquet":
            pq.write_table(pa.table({"text": pa.array(docs, pa.string())}), path, row_group_size=2)
            continue
        content = docs[0] if kind == "text" else jsonl(docs, i % 2 == 0)
        if suffix:  # one, two or three frames (members, streams), as `cat a.gz b.gz` or a parallel compressor writes
            cuts = [len(content) * j // (i % 3 + 1) for j in range(i % 3 + 2)]
            content = b"".join(COMPRESS[suffix](content[a:b]) for a, b in zip(cuts, cuts[1:]))
        with open(path, "wb") as f:
            f.write(content)
    return paths, stdin, expected


def packed(directory):
    ds = Roxxel(directory)
    docs = [ds[k] for k in range(len(ds))]
    assert all(len(doc) and doc[-1] == 256 for doc in docs)  # each ends with the byte tokenizer's EOS
    return [bytes(doc[:-1].astype(np.uint8)) for doc in docs]


def pack_stdin(paths, out, stdin, **kwargs):
    stream = io.TextIOWrapper(io.BytesIO(stdin))
    with mock.patch.object(sys, "stdin", stream):
        return pack(paths, out, include_binary=True, **kwargs)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    drawn=inputs(), batch=st.sampled_from([64, 4096, byte_path.BATCH_BYTES]), shard=st.sampled_from([1, 2048, 1 << 28])
)
def test_every_input_path_gives_back_its_documents(drawn, batch, shard):
    """Small batches and shards put documents across batch and shard boundaries."""
    parts, fmt = drawn
    with tempfile.TemporaryDirectory() as d, mock.patch.object(byte_path, "BATCH_BYTES", batch):
        paths, stdin, expected = write_inputs(parts, d)
        out = os.path.join(d, "out")
        if not expected:
            with pytest.raises(ValueError, match="the inputs hold no documents"):
                pack_stdin(paths, out, stdin, shard_size=shard, fmt=fmt)
            assert not os.path.exists(out)
            return
        manifest = pack_stdin(paths, out, stdin, shard_size=shard, fmt=fmt)
        assert manifest.num_documents == len(expected)
        assert packed(out) == expected


def test_a_parallel_pack_and_roxxel_cat_give_back_the_same_documents(tmp_path):
    """The pool path (--jobs 2: compressed files go to worker processes) and `roxxel cat`, on a
    fixed sample of every kind, with a document larger than a batch."""
    long = "長い文書 <|endoftext|> " * (byte_path.BATCH_BYTES // 20)
    docs = ["", "plain", "<|endoftext|>", "a </s> b <s>", "tab\there\x00nul", "🙂 émoji\r\nCRLF", long]
    parts = [("text", s, [d.encode()]) for s, d in zip(COMPRESS, docs)]
    parts += [("jsonl", s, docs) for s in COMPRESS] + [("parquet", "", docs)]
    (tmp_path / "in").mkdir()
    paths, _, expected = write_inputs(parts, str(tmp_path / "in"))
    pack(
        paths, str(tmp_path / "parallel"), jobs=2, include_binary=True
    )  # no stdin: that is read in this process, with no pool
    assert packed(str(tmp_path / "parallel")) == expected
    paths, stdin, expected = write_inputs([*parts, ("-text", "", [long.encode()])], str(tmp_path / "in"))
    pack_stdin(paths, str(tmp_path / "serial"), stdin)
    assert packed(str(tmp_path / "serial")) == expected
    for k in (2, 5, len(expected) - 1):
        r = CliRunner().invoke(main, ["cat", str(tmp_path / "serial"), str(k)], catch_exceptions=False)
        assert r.exit_code == 0 and r.stdout_bytes == expected[k], r.output


@settings(max_examples=60, deadline=None)
@given(
    content=st.one_of(raw, st.binary(min_size=1, max_size=3000)),
    suffix=st.sampled_from([s for s in COMPRESS if s]),
    frames=st.integers(1, 3),
    where=st.floats(0, 1, exclude_max=True),
)
def test_a_compressed_input_cut_anywhere_but_between_frames_is_refused(content, suffix, frames, where):
    """What is not refused is read whole: a cut inside a frame (a .zst one was read as its prefix),
    or at 0 bytes (an empty .zst or .gz was read as no text)."""
    cuts = [len(content) * j // frames for j in range(frames + 1)]
    blobs = [COMPRESS[suffix](content[a:b]) for a, b in zip(cuts, cuts[1:])]
    data = b"".join(blobs)
    boundaries = {sum(map(len, blobs[:j])) for j in range(1, frames + 1)}
    cut = int(len(data) * where)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"x.txt{suffix}")
        with open(path, "wb") as f:
            f.write(data)
        assert read_input(path) == content
        with open(path, "wb") as f:
            f.write(data[:cut])
        if cut in boundaries:  # whole frames: a complete file, of fewer frames
            assert content.startswith(read_input(path))
        else:
            with pytest.raises(ValueError, match=f"^{path}: not a complete .* file"):
                read_input(path)


@settings(max_examples=40, deadline=None)
@given(cells=st.lists(st.one_of(st.none(), texts), max_size=12), group=st.integers(1, 5))
def test_parquet_rows_are_documents_and_a_null_is_refused_with_its_row(cells, group):
    """A null cell was dropped: row k was no longer document k."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.parquet")
        pq.write_table(pa.table({"text": pa.array(cells, pa.string())}), path, row_group_size=group)
        if None in cells:
            with pytest.raises(ValueError, match=rf"^{path}: row {cells.index(None)} \(counting from 0\) of column"):
                list(iter_documents(path))
        else:
            assert list(iter_documents(path)) == cells
