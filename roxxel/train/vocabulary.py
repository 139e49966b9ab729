"""Token ids the model can embed: the data's vocabulary against every ``nnx.Embed`` of the model.

An id at or above an embedding table's ``num_embeddings`` is out of range; JAX's gather
does not fail on it (it fills NaN, or clamps), so the loss turns NaN a few steps in and the
NaN guard would point at the learning rate. Checked once before the first step instead.
"""

from __future__ import annotations

from flax import nnx

from roxxel.exit_codes import ConfigurationError


class VocabularyError(ConfigurationError, ValueError):
    """The data holds token ids that an embedding table of the model cannot look up.
    A configuration error: ``roxxel-worker`` exits 78 and the job is not restarted."""


def check_embeddings(model: nnx.Module, vocab_size: int | None, where: str) -> None:
    """Refuse a model with an embedding table smaller than the data's vocabulary.

    The largest ``nnx.Embed`` table is taken as the token embedding (position and segment
    tables are sized by the sequence length, not the vocabulary). A token table smaller than
    a position table that is itself large enough is therefore not caught here (the NaN guard's
    message names the cause then).

    Args:
        model: the model to train.
        vocab_size: the number of token ids the data uses (ids ``0..vocab_size-1``), from the
            datasets' manifests; ``None`` (undeclared, or float data) checks nothing.
        where: the data, named in the message (e.g. a dataset path).

    Raises:
        VocabularyError: names the table, both sizes and the fix.
    """
    if vocab_size is None:
        return
    tables = [
        (module.num_embeddings, ".".join(map(str, path)) or type(model).__name__)
        for path, module in nnx.iter_modules(model)
        if isinstance(module, nnx.Embed)
    ]
    if not tables:
        return
    # The token table is taken to be the largest: position and segment tables are Embeds too,
    # sized by the sequence length, and must not be held against the vocabulary.
    size, name = max(tables)
    if size < vocab_size:
        raise VocabularyError(
            f"the data ({where}) has token ids up to {vocab_size - 1} (vocab_size {vocab_size}), but the model's "
            f"largest embedding table, {name}, has num_embeddings={size}: ids {size} and above cannot be looked up "
            f"(the loss would turn NaN). Give the model a vocabulary of at least {vocab_size}, or pack the data with "
            "the model's tokenizer"
        )
