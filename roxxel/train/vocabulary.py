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

    Args:
        model: the model to train; every ``nnx.Embed`` in it is checked.
        vocab_size: the number of token ids the data uses (ids ``0..vocab_size-1``), from the
            datasets' manifests; ``None`` (undeclared, or float data) checks nothing.
        where: the data, named in the message (e.g. a dataset path).

    Raises:
        VocabularyError: names the table, both sizes and the fix.
    """
    if vocab_size is None:
        return
    for path, module in nnx.iter_modules(model):
        if isinstance(module, nnx.Embed) and module.num_embeddings < vocab_size:
            name = ".".join(map(str, path)) or type(model).__name__
            raise VocabularyError(
                f"the data ({where}) has token ids up to {vocab_size - 1} (vocab_size {vocab_size}), but the model's "
                f"embedding {name} has num_embeddings={module.num_embeddings}: ids {module.num_embeddings} and above "
                f"cannot be looked up (the loss would turn NaN). Give the model a vocabulary of at least {vocab_size}, "
                "or pack the data with the model's tokenizer")
