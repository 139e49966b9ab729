"""The original Roxxel's names keep working, implemented once in roxxel.compat on top of the core."""

import numpy as np

import roxxel
from roxxel.compat import DEFAULT_PATH, Roxxel
from roxxel.data import Dataset


def test_the_originals_public_names_import_from_roxxel():
    from roxxel import Checkpointer, Curriculum, Logger, Phase, Trainer  # noqa: F401  (lazy names resolve)

    assert roxxel.Roxxel is Roxxel and issubclass(Roxxel, Dataset)
    assert {"Roxxel", "Curriculum", "Trainer", "Checkpointer", "Logger"} <= set(dir(roxxel))


def test_default_path_is_the_originals():
    assert DEFAULT_PATH == "./stream_reservoir.rox"
    assert Roxxel().filepath == DEFAULT_PATH


def test_the_core_dataset_carries_no_original_api():
    for name in ("stream", "write", "estimate_steps"):
        assert not hasattr(Dataset, name) and hasattr(Roxxel, name)


def test_write_then_stream_through_the_original_api(tmp_path):
    path = str(tmp_path / "ds")
    Roxxel(path).write([np.arange(1, 40)] * 20, vocab_size=64, eos_id=0)
    ds = Roxxel(path)
    steps = ds.estimate_steps(seq_len=8, batch_size=2, chunk_tokens=64)
    with ds.stream(seq_len=8, batch_size=2, seed=1, chunk_tokens=64, to_device=False) as stream:
        batches = list(stream)
    assert len(batches) == steps > 0 and np.asarray(batches[0]).shape == (2, 8)
    assert repr(Dataset(path)).startswith("Dataset(") and repr(ds).startswith("Roxxel(")
