"""Tokenizers for packing: byte-level (built in) and Hugging Face ``tokenizers`` JSON files.

Each tokenizer reports ``vocab_size``, ``eos_id`` and an ``identity`` dict that is stored in
every shard and manifest, so a dataset records exactly which tokenizer produced it.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Iterable, Sequence

import numpy as np

from roxxel.format.errors import for_cli

log = logging.getLogger("roxxel.tokenizers")

# Token names that mark the end of a document in common Hugging Face tokenizers.
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "<|end|>", "[EOS]", "<|eot_id|>")


class ByteTokenizer:
    """Byte-level tokens: ids 0-255 are the bytes of the UTF-8 (or raw) text, id 256 is EOS.

    ``encode`` returns a ``uint8`` array (a zero-copy view of the bytes); ``decode`` drops EOS.
    """

    vocab_size = 257
    eos_id = 256
    identity = {"type": "bytes", "vocab_size": 257, "eos_id": 256}

    def encode(self, text: str | bytes) -> np.ndarray:
        """Bytes of ``text`` (UTF-8 for a str) as a ``uint8`` array, no EOS."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return np.frombuffer(data, np.uint8)

    def encode_batch(self, texts: Sequence[str | bytes]) -> list[np.ndarray]:
        """``encode`` of each text."""
        return [self.encode(t) for t in texts]

    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """Bytes of the tokens, EOS removed.

        Raises:
            ValueError: an id is neither a byte nor EOS.
        """
        arr = np.asarray(ids)
        arr = arr[arr != self.eos_id]
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(f"byte tokens must be in [0, 256], got {int(arr.max())}")
        return arr.astype(np.uint8).tobytes()

    def decode(self, ids) -> str:
        """Text of the tokens (invalid UTF-8 shows as U+FFFD), EOS removed."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


class EosInTextError(ValueError):
    """A document's text encodes to the tokenizer's EOS id (``index``: the text's in the batch)."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index

    def __reduce__(self):  # raised in a pool worker: pickled back with its index and wording
        return (type(self), (str(self), self.index), self.__dict__)


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer`` (from a ``tokenizer.json`` file or an instance).

    Args:
        tokenizer: path to ``tokenizer.json`` or a ``tokenizers.Tokenizer``.
        eos_id: the end-of-document id; found by name (``<|endoftext|>``, ``</s>``, ...) when omitted.

    Raises:
        ImportError: the ``tokenizers`` package is missing (``pip install roxxel[tokenizers]``).
        ValueError: no EOS token could be found and none was given.
    """

    def __init__(self, tokenizer: Any, eos_id: int | None = None):
        try:
            from tokenizers import Tokenizer
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "reading tokenizer.json needs the 'tokenizers' package: pip install 'roxxel[tokenizers]'"
            ) from e
        name = None
        if isinstance(tokenizer, (str, os.PathLike)):
            name = os.path.basename(os.fspath(tokenizer))
            if not os.path.exists(tokenizer):
                hint = (
                    " (the built-in byte-level tokenizer is called 'bytes')"
                    if name in ("byte", "bytes", "utf8")
                    else ""
                )
                raise FileNotFoundError(f"tokenizer file not found: {tokenizer}{hint}")
            try:
                tokenizer = Tokenizer.from_file(os.fspath(tokenizer))
            except Exception as e:  # the library raises a bare Exception for a malformed file
                raise ValueError(
                    f"{tokenizer} is not a Hugging Face tokenizer.json ({e}); pass a tokenizer.json file or 'bytes'"
                ) from None
        else:  # a copy: the settings turned off below are not the caller's to lose
            tokenizer = Tokenizer.from_str(tokenizer.to_str())
        # An encoder only: documents are packed whole, and only the EOS we add ends one.
        turned_off = [part for part in ("truncation", "padding") if getattr(tokenizer, part) is not None]
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tok = tokenizer
        self._configure()
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        if eos_id is None:
            eos_id = next((i for t in EOS_CANDIDATES if (i := tokenizer.token_to_id(t)) is not None), None)
        if eos_id is None:
            problem = (
                f"tokenizer {name or tokenizer!r} has none of the usual end-of-document tokens "
                f"({', '.join(EOS_CANDIDATES)})"
            )
            raise for_cli(
                ValueError(f"{problem}; give its id with eos_id=N"), f"{problem}; give its id with --eos-id N"
            )
        if not 0 <= int(eos_id) < self.vocab_size:
            problem = f"EOS id {eos_id} is outside the vocabulary of tokenizer {name or tokenizer!r} (ids 0 to {self.vocab_size - 1})"
            raise for_cli(ValueError(f"{problem}; pass an eos_id inside it"), f"{problem}; pass an --eos-id inside it")
        self.eos_id = int(eos_id)
        self.name = name or "the tokenizer"
        # The JSON as used: truncation and padding off (a file without them hashes as before).
        digest = hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()
        self.identity = {
            "type": "huggingface",
            "name": name,
            "sha256": digest,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
        }
        if turned_off:
            self.identity["turned_off"] = turned_off
            log.warning("%s sets %s: turned off, documents are packed whole", self.name, " and ".join(turned_off))

    def _configure(self) -> None:
        """Encode special tokens' text as text: ``tokenizers`` matches special tokens in raw text even
        with ``add_special_tokens=False``, so a document quoting ``<|endoftext|>`` would get the
        EOS id in its middle. Not part of ``tokenizer.json``, so set again after unpickling."""
        self._tok.encode_special_tokens = True

    def __setstate__(self, state: dict) -> None:  # a pool worker started by forkserver gets a pickled copy
        self.__dict__.update(state)
        self._configure()

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (``uint32``): no special tokens added (BOS, CLS: the post-processor's),
        none matched in the text (it is encoded as text), never truncated or padded.

        Raises:
            EosInTextError: the text still encodes to the EOS id (see :meth:`encode_batch`).
        """
        ids = np.asarray(self._tok.encode(text, add_special_tokens=False).ids, np.uint32)
        if ids.size and (ids == self.eos_id).any():
            raise self._eos_in_text(0)
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Encode several texts at once (the Rust library spreads them over all cores), as :meth:`encode`.

        Raises:
            EosInTextError: a text encodes to the EOS id, which would end its document early: the
                EOS token is not marked special (an added token with ``"special": false``, a
                vocabulary entry, or an ``eos_id`` given for an ordinary token). ``index`` is the text's.
        """
        # encode_batch_fast (tokenizers >= 0.20) skips the character offsets: ~15% quicker.
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        arrays = [np.asarray(e.ids, np.uint32) for e in encode(list(texts), add_special_tokens=False)]
        eos = self.eos_id
        for k, a in enumerate(arrays):  # ~1 us a document, beside the encoding's ~1 us a token
            if a.size and (a == eos).any():
                raise self._eos_in_text(k)
        return arrays

    def _eos_in_text(self, index: int) -> EosInTextError:
        token = self._tok.id_to_token(self.eos_id)
        problem = (
            f"its text encodes to {token!r} (id {self.eos_id}), the end-of-document id of {self.name}, which "
            "would split it in two"
        )
        fix = f'mark {token!r} special ("special": true in the added_tokens of its tokenizer.json)'
        err = EosInTextError(f"{problem}; {fix}, or pass an eos_id that text cannot produce", index)
        return for_cli(err, f"{problem}; {fix}, or pass an --eos-id that text cannot produce")  # type: ignore[return-value]

    def decode(self, ids) -> str:
        """Text of the tokens, EOS removed."""
        ids = [int(i) for i in np.asarray(ids) if i != self.eos_id]
        return self._tok.decode(ids)


def check_identity(tok: ByteTokenizer | HFTokenizer, identity: dict | None, dataset: str) -> None:
    """Check that ``tok`` is the tokenizer that packed ``dataset``, whose recorded ``identity``
    (``Roxxel.tokenizer``: type, and for a Hugging Face tokenizer the SHA-256 of its JSON) is given.

    Decoding with another tokenizer gives text that can look plausible and is wrong.

    Raises:
        ValueError: another tokenizer (names both), or a dataset that records none.
    """
    if not identity:
        raise ValueError(
            f"{dataset} records no tokenizer (arrays, or packed without one): nothing to decode its ids with"
        )
    if not _same_tokenizer(tok, identity):

        def name(i: dict) -> str:
            return (
                "the byte-level tokenizer"
                if i.get("type") == "bytes"
                else f"tokenizer {i.get('name')!r} (SHA-256 {str(i.get('sha256'))[:12]}...)"
            )

        raise ValueError(
            f"{dataset} was packed with {name(identity)}, not {name(tok.identity)}: its text would "
            "decode wrong; use the tokenizer.json it was packed with"
        )


def _same_tokenizer(tok: ByteTokenizer | HFTokenizer, identity: dict) -> bool:
    """Whether ``tok`` is the tokenizer of the recorded ``identity``: its type, and its JSON's SHA-256."""
    return identity.get("type") == tok.identity["type"] and identity.get("sha256") == tok.identity.get("sha256")


def packing_tokenizer(dataset: str, identity: dict | None, eos_id: int | None = None) -> ByteTokenizer | HFTokenizer:
    """The tokenizer that packed ``dataset`` (a dataset directory or a shard), from the ``identity``
    it records (``Roxxel.tokenizer``); ``eos_id`` is the dataset's (``Roxxel.eos_id``), for a
    tokenizer without a standard end-of-document token (packed with ``--eos-id``).

    Byte-level data needs no file. A Hugging Face tokenizer is looked for by the file name its
    identity records, in the dataset's directory and then in the one above (where
    ``examples/lm/prepare.py`` keeps the one its datasets share), and taken only if its
    SHA-256 is the recorded one: another tokenizer would decode into wrong text.

    Raises:
        ValueError: the dataset records no tokenizer, or no file there is that tokenizer (says
            where it looked; the command line's wording names ``--tokenizer`` and ``--ids``).
        ImportError: a Hugging Face tokenizer without the ``tokenizers`` package.
    """
    if not identity:
        problem = f"{dataset} records no tokenizer (its ids were written without one)"
        raise for_cli(
            ValueError(f"{problem}; load the tokenizer that made them"),
            f"{problem}; pass --tokenizer PATH (the tokenizer.json that made them), or --ids",
        )
    if identity.get("type") == "bytes":
        return ByteTokenizer()
    name = identity.get("name")
    if not name:
        problem = f"{dataset} records no tokenizer file name"
        raise for_cli(
            ValueError(f"{problem}; load the tokenizer.json it was packed with"),
            f"{problem}; pass --tokenizer PATH (its tokenizer.json), or --ids",
        )
    top = dataset if os.path.isdir(dataset) else os.path.dirname(dataset) or "."
    places = [os.path.join(d, name) for d in (top, os.path.normpath(os.path.join(top, os.pardir)))]  # as given
    for candidate in places:
        if os.path.isfile(candidate):
            tok = load_tokenizer(candidate, eos_id=eos_id)
            if _same_tokenizer(tok, identity):
                return tok
    problem = (
        f"{dataset} was packed with the tokenizer {name!r} (SHA-256 {str(identity.get('sha256'))[:12]}...), "
        f"and neither {' nor '.join(places)} is it (another tokenizer would decode wrong)"
    )
    raise for_cli(
        ValueError(f"{problem}; put that tokenizer.json there, or load it yourself"),
        f"{problem}; pass --tokenizer PATH (that tokenizer.json), or --ids",
    )


def load_tokenizer(spec: Any, eos_id: int | None = None) -> ByteTokenizer | HFTokenizer:
    """``"bytes"`` → :class:`ByteTokenizer`; a path or a ``tokenizers.Tokenizer`` → :class:`HFTokenizer`.

    A tokenizer already of these classes is returned as is.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: an ``eos_id`` other than 256 for ``"bytes"`` (its EOS id is fixed: another
            would be ignored), or one outside a Hugging Face tokenizer's vocabulary.
        TypeError: anything else.
    """
    if isinstance(spec, (ByteTokenizer, HFTokenizer)):
        return spec
    if spec == "bytes":
        if eos_id is not None and eos_id != ByteTokenizer.eos_id:
            problem = f"the byte-level tokenizer's EOS id is always {ByteTokenizer.eos_id}, not {eos_id}"
            raise for_cli(
                ValueError(f"{problem}; leave eos_id out, or pass a tokenizer.json"),
                f"{problem}; leave --eos-id out, or pass --tokenizer tokenizer.json",
            )
        return ByteTokenizer()
    if isinstance(spec, (str, os.PathLike)) or hasattr(spec, "encode_batch"):
        return HFTokenizer(spec, eos_id=eos_id)
    raise TypeError(
        f"tokenizer must be 'bytes', a path to tokenizer.json or a tokenizers.Tokenizer, got {type(spec).__name__}"
    )
