"""The streamer: resume anywhere, exact epochs, blending, curriculum, outputs, prefetch."""

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data.documents import document_features
from roxxel.data.prefetch import Prefetcher
from roxxel.data.source import ShuffledTokens


def make(path, n_tokens, base=0, eos=None, doc_len=97):
    """A dataset whose token t is (base + t) mod 60000: any token tells where it came from."""
    ids = (base + np.arange(n_tokens, dtype=np.int64)) % 60000
    docs = [ids[i : i + doc_len] for i in range(0, n_tokens, doc_len)]
    Roxxel(str(path)).write(docs, vocab_size=65536, eos_id=eos, dtype="uint16")
    return Roxxel(str(path))


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    return {
        "self": make(root / "a", 20_011),
        "code": make(root / "b", 3_001, base=30_000),
        "math": make(root / "c", 1_500, base=50_000),  # small: runs out first
    }


def curriculum(datasets, chunk=64, repeat=False, batch_rows="independent"):
    phases = [
        Phase(steps=7, global_batch_size=8, seq_len=32, weights={"primary": 2, "code": 1, "math": 1}),
        {"steps": 5, "batch_size": 4, "seq_len": 64, "weights": {"primary": 1, "math": 3}},
        Phase(global_batch_size=6, seq_len=48, weights={"primary": 1, "code": 2}),
    ]
    return Curriculum(
        {"primary": datasets["self"], "code": datasets["code"], "math": datasets["math"]},
        phases,
        chunk_tokens=chunk,
        repeat=repeat,
        batch_rows=batch_rows,
    )


def all_batches(c, seed=3, **kw):
    return list(c.stream(seed=seed, to_device=False, prefetch_size=0, **kw))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), data=st.data())
def test_resume_at_any_step_equals_uninterrupted(datasets, seed, data):
    c = curriculum(datasets)
    full = all_batches(c, seed)
    assert len(full) == c.total_steps
    s = data.draw(st.integers(0, c.total_steps - 1))
    n = data.draw(st.integers(1, c.total_steps - s))
    resumed = list(c.stream(s, s + n, seed=seed, to_device=False, prefetch_size=2))
    assert len(resumed) == n
    for got, want in zip(resumed, full[s : s + n]):
        assert np.array_equal(got, want)


def test_phases_change_shapes_at_step_boundaries(datasets):
    c = curriculum(datasets)
    shapes = [b.shape for b in all_batches(c)]
    assert shapes[:7] == [(8, 32)] * 7 and shapes[7:12] == [(4, 64)] * 5 and set(shapes[12:]) == {(6, 48)}
    streams = list(c.phase_streams(start_step=9))
    assert [(p.index, len(s)) for p, s in streams] == [(1, 3), (2, c.total_steps - 12)]
    for _, s in streams:
        s.close()


@pytest.mark.parametrize("batch_rows", ["independent", "consecutive"])
def test_rows_come_from_the_weighted_datasets(datasets, batch_rows):
    """Every row is a run of consecutive ids of one dataset; the mix follows the phase weights."""
    c = curriculum(datasets, batch_rows=batch_rows)
    owner = lambda row: 0 if row[0] < 30_000 else (1 if row[0] < 50_000 else 2)
    counts = np.zeros((3, 3), int)
    for step, batch in enumerate(all_batches(c)):
        phase = c.phase_at(step).index
        for row in batch.astype(np.int64):
            # Runs of consecutive ids, broken only where the row crosses into another chunk.
            assert np.count_nonzero(np.diff(row) != 1) <= -(-len(row) // 64), row
            counts[phase, owner(row)] += 1
    assert abs(counts[0, 0] - 2 * counts[0, 1]) <= 3 and abs(counts[0, 1] - counts[0, 2]) <= 2
    assert counts[1, 1] == 0 and counts[2, 2] == 0  # weight 0: never drawn
    # The last phase runs until the data runs out: "code" gives every whole row it has left; with
    # independent rows, but for the rests of phase 0's 8 lanes shorter than a 48-token row.
    code_left = c.plan.sizes[1] - c.dataset_positions(12)["code"]
    lost = 0 if batch_rows == "consecutive" else 8
    assert code_left // 48 - lost <= counts[2, 1] <= code_left // 48


def test_exhausted_dataset_is_dropped_and_weights_renormalised(tmp_path):
    a = make(tmp_path / "a", 10_000)
    b = make(tmp_path / "b", 640, base=30_000)  # 640 tokens = 20 rows of 32
    c = Curriculum(
        {"primary": a, "b": b},
        [Phase(global_batch_size=4, seq_len=32, weights={"primary": 1, "b": 1})],
        chunk_tokens=32,
    )
    owners = [(row[0] >= 30_000) for batch in all_batches(c) for row in batch]
    assert sum(owners) == 20  # b gives exactly its 20 rows, then only "self" is left
    last_b = max(i for i, o in enumerate(owners) if o)
    assert last_b < 45 and not any(owners[last_b + 1 :])
    assert len(owners) == c.total_steps * 4 and c.total_steps == (20 + 10_000 // 32) // 4


def test_every_chunk_exactly_once_per_epoch_on_odd_size(tmp_path):
    ds = make(tmp_path / "odd", 7 * 128 + 50)  # 7 chunks of 128, and a tail
    c = Curriculum(ds, [Phase(steps=7, global_batch_size=1, seq_len=128)], chunk_tokens=128, repeat=True)
    for epoch_seed in (0, 1):
        rows = [b[0].astype(np.int64) for b in all_batches(c, seed=epoch_seed)]
        starts = sorted(int(r[0]) for r in rows)
        assert starts == [k * 128 for k in range(7)]
        assert all(np.array_equal(r, np.arange(r[0], r[0] + 128)) for r in rows)
    # The next epoch is another order of the same chunks.
    c2 = Curriculum(ds, [Phase(steps=14, global_batch_size=1, seq_len=128)], chunk_tokens=128, repeat=True)
    rows = [int(b[0, 0]) for b in all_batches(c2)]
    assert sorted(rows[7:]) == sorted(rows[:7]) and rows[7:] != rows[:7]


def test_shuffle_needs_no_index(tmp_path):
    ds = make(tmp_path / "x", 5000)
    src = ShuffledTokens(ds, seed=1, chunk_tokens=10)
    perm = src.permutation(0)
    assert not [v for v in vars(perm).values() if isinstance(v, np.ndarray) and v.size >= src.num_chunks]


def test_epochs_resolve_to_steps(datasets):
    c = Curriculum(datasets["self"], [Phase(epochs=2, global_batch_size=4, seq_len=50)], chunk_tokens=100, repeat=True)
    assert c.total_steps == (2 * (20_011 // 100 * 100)) // 200
    assert len(all_batches(c)) == c.total_steps
    with pytest.raises(ValueError, match="can give only 100 steps there; pass repeat=True"):  # 2 epochs need repeat
        Curriculum(datasets["self"], [Phase(epochs=2, global_batch_size=4, seq_len=50)], chunk_tokens=100)


def test_original_stream_api(datasets):
    ds = datasets["self"]
    s = ds.stream(seq_len=32, batch_size=4, seed=7, prefetch_size=2)
    assert len(s) == ds.estimate_steps(32, 4)
    first = next(s)
    assert first.shape == (4, 32) and first.dtype == np.int32
    s.close()
    resumed = ds.stream(
        seq_len=32, batch_size=4, seed=7, start_step=12, completed_phases=[(10, 8, 16)], total_steps=3, to_device=False
    )
    assert len(resumed) == 3
    mixed = ds.stream(
        seq_len=16,
        batch_size=2,
        seed=1,
        mix_datasets={"code": datasets["code"]},
        weights={"self": 0.5, "code": 0.5},
        to_device=False,
        prefetch_size=0,
    )
    assert next(mixed).shape == (2, 16)
    with pytest.raises(ValueError, match="unknown datasets"):
        ds.stream(
            seq_len=16, batch_size=2, seed=1, mix_datasets={"code": datasets["code"]}, weights={"self": 1, "web": 1}
        )


def test_bad_inputs(datasets):
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        Phase(global_batch_size=0, seq_len=4, steps=1)
    with pytest.raises(ValueError, match="either steps or epochs"):
        Phase(global_batch_size=1, seq_len=4, steps=1, epochs=1)
    with pytest.raises(ValueError, match="only the last phase"):
        Curriculum(
            datasets["self"], [Phase(global_batch_size=1, seq_len=4), Phase(global_batch_size=1, seq_len=4, steps=2)]
        )
    with pytest.raises(ValueError, match="unknown phase keys"):
        Curriculum(datasets["self"], [{"steps": 1, "batch": 2, "seq_len": 3}])
    c = curriculum(datasets)
    with pytest.raises(ValueError, match="outside the curriculum"):
        c.stream(c.total_steps + 1)


def test_document_features():
    eos = 9
    tokens = np.array([[1, 2, eos, 3, 4, 5, eos, 6], [eos, 1, 1, 1, 1, 1, 1, 1]])
    f = document_features(tokens, eos)
    assert f["segment_ids"].tolist() == [[1, 1, 1, 2, 2, 2, 2, 3], [1, 2, 2, 2, 2, 2, 2, 2]]
    assert f["positions"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 0], [0, 0, 1, 2, 3, 4, 5, 6]]
    assert f["loss_mask"].tolist() == [[1, 1, 0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 1, 0]]
    assert all(v.dtype == np.int32 for v in f.values())


def test_documents_output(tmp_path):
    ds = make(tmp_path / "e", 4000, eos=59999, doc_len=40)
    c = Curriculum(ds, [Phase(steps=3, global_batch_size=2, seq_len=64)], chunk_tokens=128)
    batch = next(iter(c.stream(seed=0, outputs="documents", prefetch_size=0)))
    assert set(batch) == {"tokens", "segment_ids", "positions", "loss_mask"}
    assert batch["tokens"].shape == (2, 64)
    assert (np.asarray(batch["segment_ids"]) > 1).any()


def test_prefetch_keeps_order_and_reraises():
    def source():
        yield from range(5)
        raise RuntimeError("disk on fire")

    p = Prefetcher(source(), 2)
    assert [next(p) for _ in range(5)] == list(range(5))
    with pytest.raises(RuntimeError, match="disk on fire"):
        next(p)
    with pytest.raises(StopIteration):
        next(p)


@pytest.mark.parametrize("tick, threaded", [(1e-6, False), (1e-3, True)])
def test_the_prefetch_thread_starts_only_when_the_callers_step_leaves_time_to_overlap(
    datasets, monkeypatch, tick, threaded
):
    """A clock that advances ``tick`` per reading: every read and every caller's step lasts ``tick``."""
    import roxxel.data.stream as stream_module

    clock = iter(np.arange(1, 10**6) * tick)
    monkeypatch.setattr(stream_module.time, "perf_counter", lambda: float(next(clock)))
    want = list(curriculum(datasets).stream(seed=3, to_device=False, prefetch_size=0))
    with curriculum(datasets).stream(seed=3, to_device=False, prefetch_size=2) as s:
        got = [next(s) for _ in range(len(want))]
        assert (s._prefetch is not None) == threaded
    assert all(np.array_equal(a, b) for a, b in zip(got, want))  # the same batches, before and after the switch


def test_prefetch_close_stops_thread():
    produced = []
    gate = threading.Event()

    def endless():
        i = 0
        while True:
            produced.append(i)
            gate.set()
            yield i
            i += 1

    p = Prefetcher(endless(), 3)
    gate.wait(5)
    assert next(p) == 0
    p.close()
    assert not p.alive
    n = len(produced)
    assert n <= 6
