"""``roxxel pack``: turn text files, JSONL, Parquet or stdin into a dataset of shards.

Documents are read (and tokenized) on a background thread while the main thread writes
shards and a third thread hashes and checksums them, so packing keeps several cores busy;
a Hugging Face tokenizer further spreads each batch over all cores in Rust. Inputs are
visited in a fixed order (the order given; directories walked in sorted order), so
document k of the dataset is the k-th document of the inputs.

By concern: :mod:`~roxxel.pack.walk` (which files, in which order), :mod:`~roxxel.pack.inputs`
(one file's documents: decompression, formats, binary content), :mod:`~roxxel.pack.tokenizing`
(documents -> token batches, on a thread or a process pool), :mod:`~roxxel.pack.byte_path` (the
byte-level path: no tokenizer, no pool, reused buffers) and :mod:`~roxxel.pack.packing`
(:func:`pack`: picks the path and drives the dataset writer).
"""

from roxxel.pack.byte_path import Staged
from roxxel.pack.inputs import FORMATS, detect_format, is_binary, iter_documents, open_input, read_input
from roxxel.pack.packing import pack
from roxxel.pack.tokenizing import Batch
from roxxel.pack.walk import Matcher, is_dataset, iter_input_files

__all__ = [
    "FORMATS",
    "Batch",
    "Matcher",
    "Staged",
    "detect_format",
    "is_binary",
    "is_dataset",
    "iter_documents",
    "iter_input_files",
    "open_input",
    "pack",
    "read_input",
]
