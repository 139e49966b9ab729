"""A phase that cannot deliver its steps is refused up front; step/position arithmetic never wraps."""

import numpy as np
import pytest

from roxxel.exit_codes import ConfigurationError

from roxxel import Curriculum, Phase, Roxxel


@pytest.fixture
def ds(tmp_path):
    Roxxel(str(tmp_path / "d")).write([np.arange(1000) % 250] * 91, vocab_size=257, eos_id=256, dtype="uint16")
    return Roxxel(str(tmp_path / "d"))  # 91,091 tokens


def test_phase_asking_more_steps_than_the_data_gives_is_an_error(ds):
    can = (91_091 // 1024 * 1024) // (4 * 128)
    with pytest.raises(
        ValueError,
        match=rf"phase 0 asks for 2000 steps .* can give only {can} steps there; "
        "pass repeat=True .* at most",
    ) as err:
        Curriculum(ds, [Phase(steps=2000, global_batch_size=4, seq_len=128)], chunk_tokens=1024)
    # Every attempt would hit it: a configuration error (roxxel-worker exits 78, no gang restart).
    assert isinstance(err.value, ConfigurationError)
    assert (
        Curriculum(
            ds, [Phase(steps=2000, global_batch_size=4, seq_len=128)], chunk_tokens=1024, repeat=True
        ).total_steps
        == 2000
    )
    assert (
        Curriculum(ds, [Phase(global_batch_size=4, seq_len=128)], chunk_tokens=1024).total_steps == can
    )  # "until it runs out"


def test_a_later_phase_cut_short_is_an_error(ds):
    with pytest.raises(ValueError, match="phase 1 asks for 500 steps"):
        Curriculum(
            ds,
            [Phase(steps=10, global_batch_size=4, seq_len=128), Phase(steps=500, global_batch_size=8, seq_len=256)],
            chunk_tokens=1024,
        )


def test_data_shorter_than_one_row_is_an_error(tmp_path):
    Roxxel(str(tmp_path / "s")).write([np.arange(100)], vocab_size=257, eos_id=256, dtype="uint16")
    with pytest.raises(ValueError, match="can give only 0 steps there; use data of at least one row"):
        Curriculum(Roxxel(str(tmp_path / "s")), [Phase(global_batch_size=2, seq_len=2048)])


def test_a_start_step_beyond_64_bit_positions_is_refused_not_wrapped(ds):
    c = Curriculum(ds, [Phase(global_batch_size=1, seq_len=1024)], chunk_tokens=1024, repeat=True)
    with pytest.raises(ValueError, match="beyond the 2\\*\\*62 tokens"):
        c.stream(2**55, 2**55 + 1, seed=0, to_device=False, prefetch_size=0)  # position 2**65 would wrap in int64
    with pytest.raises(ValueError, match="beyond the 2\\*\\*62"):
        c.dataset_positions(2**60)
    ok = next(iter(c.stream(2**40, 2**40 + 1, seed=0, to_device=False, prefetch_size=0)))
    assert ok.shape == (1, 1024) and ok.max() <= 256
