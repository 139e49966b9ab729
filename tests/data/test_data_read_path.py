"""The batched read path: planned-ahead rows, gathers across shards, random access, damaged data mid-plan."""

import os

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data import reader as reader_module
from roxxel.format import BlockChecksumError, open_shard
from support.shards import overwrite_token


def make(path, n_tokens, shard_tokens=None):
    ids = (np.arange(n_tokens, dtype=np.int64) * 7919) % 60000
    docs = [ids[i : i + 1000] for i in range(0, n_tokens, 1000)]
    Roxxel(str(path)).write(
        docs, vocab_size=65536, dtype="uint16", max_shard_bytes=None if shard_tokens is None else 2 * shard_tokens
    )
    return Roxxel(str(path))


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make(tmp_path_factory.mktemp("rp") / "a", 300_000, shard_tokens=50_000)


def expected_rows(ds, stream, step):
    """Rows rebuilt token by token from the source's pieces (the slow, obvious way)."""
    reader = stream.reader
    phase = stream.curriculum.phase_at(step)
    first = stream.curriculum.rows_before(step)
    _, position, _ = stream.curriculum.plan.locate(np.arange(first, first + phase.batch_size))
    row, start, count = reader.sources[0].pieces(position, phase.seq_len)
    flat = np.concatenate([ds.read(int(a), int(a + n)) for a, n in zip(start, count)])
    return flat.reshape(phase.batch_size, phase.seq_len).astype(np.int32)


@pytest.mark.parametrize("chunk", [256, 512, 700])
def test_rows_equal_the_pieces_read_one_by_one_in_any_step_order(ds, chunk):
    c = Curriculum(
        ds,
        [Phase(steps=40, global_batch_size=8, seq_len=256), Phase(global_batch_size=4, seq_len=128)],
        chunk_tokens=chunk,
    )
    s = c.stream(seed=5, to_device=False, prefetch_size=0)
    order = np.random.default_rng(chunk).permutation(len(s))[:60]
    for step in order.tolist():  # random access: the plan of steps ahead is rebuilt as needed
        assert np.array_equal(s.local_rows(step), expected_rows(ds, s, step)), step


def test_a_process_sub_range_is_the_slice_of_the_global_batch(ds):
    c = Curriculum(ds, [Phase(steps=30, global_batch_size=8, seq_len=256)], chunk_tokens=1024)
    s = c.stream(seed=1, to_device=False, prefetch_size=0)
    for step in (0, 1, 29, 3):
        full = s.reader.rows(step, 0, 8)
        assert np.array_equal(s.reader.rows(step, 2, 6), full[2:6])


def test_rows_across_a_shard_boundary_are_gathered_whole(ds):
    out = np.empty((3, 100), np.int32)
    starts = np.array([49_950, 10, 99_990])  # the first and last cross into the next shard
    reader_module.gather_rows(ds, out, starts)
    for row, a in zip(out, starts):
        assert np.array_equal(row, ds.read(int(a), int(a) + 100))
    with pytest.raises(IndexError, match="outside the dataset"):
        reader_module.gather_rows(ds, out, np.array([0, 299_950, 5]))


def test_rows_that_follow_each_other_in_one_shard_are_one_read(ds, monkeypatch):
    """Runs break where the tokens jump, at a shard boundary and where the group (the step) changes."""
    edge = open_shard(ds.shard_paths[0]).num_tokens
    starts = np.array([0, 100, 200, 1000, 1100, edge - 100, edge])  # the row at edge - 100 ends the first shard
    groups = np.array([0, 0, 1, 1, 1, 2, 2])
    runs = reader_module.row_runs(ds, starts, 100, groups, 3)
    assert runs.bounds == [0, 1, 3, 5]
    assert runs.shards == [0, 0, 0, 0, 1] and runs.offsets == [0, 400, 2000, 2 * (edge - 100), 0]
    assert (runs.los, runs.his) == ([0, 0, 200, 0, 200], [400, 200, 600, 200, 400])
    calls = []
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or real(*a))
    for g in range(3):
        mine = starts[groups == g]
        out = reader_module.read_runs(ds, np.empty((len(mine), 100), ds.dtype), runs, g)
        for row, a in zip(out, mine):
            assert np.array_equal(row, ds.read(int(a), int(a) + 100))
    assert len(calls) == 5  # one pread per run, not per row
    assert (
        reader_module.row_runs(ds, np.array([edge - 50]), 100) is None
    )  # crosses into the next shard: gather_into reads it


def test_a_damaged_block_is_caught_in_a_planned_step(tmp_path):
    d = make(tmp_path / "b", 200_000)
    overwrite_token(d.shard_paths[0], 150_000)
    c = Curriculum(Roxxel(str(tmp_path / "b")), [Phase(global_batch_size=8, seq_len=256)], chunk_tokens=2048)
    with pytest.raises(BlockChecksumError, match="token block 4 "):
        list(c.stream(seed=0, to_device=False, prefetch_size=0))


def test_a_shard_cut_under_a_first_read_with_checks_on_is_an_error(tmp_path):
    """A run read for the first time (its blocks not yet checked) comes back short: an error, no SIGBUS, no batch."""
    from roxxel.format import TruncatedShardError

    d = make(tmp_path / "c", 200_000)
    d.read(0, 10)  # the shard is open (its header read) before it is cut
    os.truncate(d.shard_paths[0], 4096 + 2 * 1000)
    with pytest.raises(TruncatedShardError, match="truncated after opening"):
        reader_module.gather_rows(d, np.empty((2, 256), np.int32), np.array([150_000, 10]))


def test_a_narrow_batch_dtype_does_not_hide_ids_beyond_the_vocabulary(tmp_path):
    """ids >= 32768 wrap negative in int16: the vocabulary check runs on the stored ids, before the cast."""
    Roxxel(str(tmp_path / "w")).write([np.full(5000, 40_000, np.uint16)], dtype="uint16")  # no declared vocabulary
    for chunk in (4096, 100):  # planned rows, and rows cut into pieces
        c = Curriculum(
            Roxxel(str(tmp_path / "w")),
            [Phase(global_batch_size=2, seq_len=256)],
            chunk_tokens=chunk,
            vocab_size=30_000,
        )
        with pytest.raises(ValueError, match="holds token id 40000, beyond the model.s vocab_size 30000"):
            next(c.stream(seed=0, to_device=False, prefetch_size=0, dtype=np.int16))


def test_a_shard_truncated_while_streaming_is_an_error_not_a_crash(tmp_path):
    """A file cut short under a reader raises, it cannot SIGBUS: the stream reads from the maps, whose
    fault (caught by the native reader) sends the step to pread, which names the shard."""
    from roxxel.format import TruncatedShardError

    d = make(tmp_path / "t", 100_000)
    c = Curriculum(
        Roxxel(str(tmp_path / "t"), check_blocks=False), [Phase(global_batch_size=4, seq_len=1024)], chunk_tokens=4096
    )
    s = c.stream(seed=0, to_device=False, prefetch_size=0)
    next(s)
    os.truncate(d.shard_paths[0], 4096 + 2 * 1000)  # header + the first 1000 tokens survive
    with pytest.raises(TruncatedShardError, match="truncated after opening"):
        for _ in s:
            pass


def test_a_batch_over_more_shards_than_stay_open_reads_every_row_from_its_own_shard(ds):
    one_open = Roxxel(ds.filepath, max_open_shards=1)
    starts = np.array([10, 60_000, 120_000, 170_000, 260_000])  # five shards
    out = np.empty((5, 300), np.int32)
    reader_module.gather_rows(one_open, out, starts)
    for row, a in zip(out, starts):
        assert np.array_equal(row, ds.read(int(a), int(a) + 300))


def test_streams_read_on_several_threads_at_once_get_their_own_batches(ds):
    """gather_rows's scratch buffers are per thread: concurrent prefetch threads never share one."""
    import threading

    c = Curriculum(ds, [Phase(steps=40, global_batch_size=8, seq_len=256)], chunk_tokens=1024)
    want = {seed: list(c.stream(seed=seed, to_device=False, prefetch_size=0)) for seed in (1, 2, 3)}
    got = {}
    threads = [
        threading.Thread(
            target=lambda s=seed: got.__setitem__(s, list(c.stream(seed=s, to_device=False, prefetch_size=2)))
        )
        for seed in want
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for seed, batches in want.items():
        assert len(got[seed]) == len(batches) and all(np.array_equal(a, b) for a, b in zip(got[seed], batches))


@pytest.mark.parametrize(
    "damaged", [65_600, 70_000, 97_000, 130_000], ids=["head-edge", "in-run", "tail-edge", "a-later-block"]
)
def test_a_run_over_parts_of_blocks_checks_them_whole_in_one_read(tmp_path, damaged, monkeypatch):
    """A run covering unchecked blocks only in part reads their rest with it (one preadv, no
    second read of the block) and checks them whole: a damaged token anywhere in those blocks
    is refused, also outside the run; a block the run does not reach stays unchecked."""
    import roxxel.format.blocks as blocks

    d = make(tmp_path / "e", 200_000)
    overwrite_token(d.shard_paths[0], damaged)  # blocks of 32,768 uint16 tokens: block 2 is 65,536..98,303
    ds = Roxxel(str(tmp_path / "e"))
    starts = 66_000 + 300 * np.arange(8)  # one run, tokens 66,000..68,400: inside block 2 only
    runs = reader_module.row_runs(ds, starts, 300)
    calls, rereads = [], []
    real = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or real(*a))
    real_block_read = blocks._pread
    monkeypatch.setattr(blocks, "_pread", lambda fd, n, *a: rereads.append(n) or real_block_read(fd, n, *a))
    out = np.empty((8, 300), ds.dtype)
    if damaged < 98_304:
        with pytest.raises(BlockChecksumError, match=f"{ds.shard_paths[0]}: token block 2 "):
            reader_module.read_runs(ds, out, runs)
        return
    reader_module.read_runs(ds, out, runs)
    assert len(calls) == 1 and rereads == [4 * 7]  # one preadv; the only other read is the checksum table's
    assert np.array_equal(out.reshape(-1), Roxxel(str(tmp_path / "e"), check_blocks=False).read(66_000, 68_400))
    checked = ds.shard_table.shard(0).block_checks.checked
    assert checked[2] and not checked[3] and not checked[1]


def test_runs_over_many_blocks_and_the_short_last_block_read_the_same_tokens(tmp_path):
    """Runs whose edges cut blocks at random places, including the shard's last (shorter) block,
    give the tokens a plain read gives, and leave every block they touch checked."""
    make(tmp_path / "m", 170_000)  # 5 full blocks and a short last one
    plain = Roxxel(str(tmp_path / "m"), check_blocks=False)
    rng = np.random.default_rng(3)
    for length in (1, 999, 40_000):
        ds = Roxxel(str(tmp_path / "m"))
        for a in rng.integers(0, 170_000 - length, 12).tolist() + [170_000 - length]:
            out = np.empty((1, length), ds.dtype)
            reader_module.read_runs(ds, out, reader_module.row_runs(ds, np.array([a]), length))
            assert np.array_equal(out[0], plain.read(a, a + length)), (length, a)
            blk = ds.shard_table.shard(0).block_checks
            assert blk.checked[a * 2 // blk.block_bytes : -(-(a + length) * 2 // blk.block_bytes)].all()


def _shard_fds(ds) -> int:
    """Descriptors of this process open on ``ds``'s shards."""
    paths = {os.path.realpath(p) for p in ds.shard_paths}
    return sum(os.path.realpath(os.path.join("/proc/self/fd", fd)) in paths for fd in os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("mapped", [True, False], ids=["maps", "pread"])
def test_streaming_over_more_shards_than_stay_open_parses_each_once_and_checks_each_block_once(ds, monkeypatch, mapped):
    """Every plan spans all 6 shards and 2 stay open: a closed shard keeps its header, its checked
    blocks and its map. Before, the LRU dropped it whole: each plan parsed ~all shards again and
    checked their blocks anew (8x slower over 477 shards in bench/stream.py)."""
    from roxxel.data import shard_table as table_module
    from roxxel.format import blocks as blocks_module
    from roxxel.format import mapread

    parsed, checksums = [], []
    real_open, real_settle, real_crc = table_module.open_shard, blocks_module.BlockChecks.settle, mapread.crc32c
    monkeypatch.setattr(table_module, "open_shard", lambda p: parsed.append(p) or real_open(p))
    monkeypatch.setattr(
        blocks_module.BlockChecks, "settle", lambda self, fd, b, a: checksums.append(b) or real_settle(self, fd, b, a)
    )
    monkeypatch.setattr(mapread, "crc32c", lambda *a: checksums.append(a) or real_crc(*a))
    before = _shard_fds(ds)  # (the module's dataset holds descriptors of the same files)
    few = Roxxel(ds.filepath, max_open_shards=2, mapped_bytes=(4 << 30) if mapped else 0)
    phases = [Phase(global_batch_size=8, seq_len=256)]
    s = Curriculum(few, phases, repeat=True).stream(0, 10**6, seed=3, to_device=False, prefetch_size=0)
    epoch = few.num_tokens // (8 * 256)
    batches = [next(s) for _ in range(epoch + 2)]
    assert checksums and all(sh.block_checks.unchecked == 0 for sh in few.shard_table.known())
    checksums.clear()
    batches += [next(s) for _ in range(epoch)]  # the second epoch: every block already checked
    assert checksums == []
    assert sorted(parsed) == sorted(few.shard_paths)  # each shard parsed once
    assert _shard_fds(few) - before <= 2
    reference = Curriculum(Roxxel(ds.filepath), phases, repeat=True).stream(
        0, 10**6, seed=3, to_device=False, prefetch_size=0
    )
    for batch in batches:
        assert np.array_equal(batch, next(reference))


def test_shards_beyond_those_known_are_closed_whole_and_read_again(ds, monkeypatch):
    """Past ``KNOWN_SHARDS`` (each known shard keeps a map: vm.max_map_count bounds them) the least
    recently used shard is forgotten whole; asked for again, it is parsed again and reads right."""
    from roxxel.data import shard_table as table_module

    monkeypatch.setattr(table_module, "KNOWN_SHARDS", 3)
    starts = [10, 60_000, 120_000, 170_000, 260_000, 20, 61_000]
    want = [ds.read(a, a + 300) for a in starts]
    before = _shard_fds(ds)  # (the module's dataset holds descriptors of the same files)
    few = Roxxel(ds.filepath, max_open_shards=2).open()
    for a, rows in zip(starts, want):
        assert np.array_equal(few.read(a, a + 300), rows)
        assert (
            len(list(few.shard_table.known())) <= 3 and _shard_fds(few) - before <= 2 * 2
        )  # (a read's view map holds a second)


@pytest.mark.parametrize("checks", ["zlib-crc32", "no-native-crc32c"])
def test_map_reads_of_shards_with_blocks_to_check_with_pread_stay_within_max_open_shards(tmp_path, monkeypatch, checks):
    """A known shard's blocks checked with pread (the first 1.1 shards' zlib CRC-32, or no native
    CRC-32C) reopen its descriptor: that shard is put back under the LRU first. (A helper's review
    found 13 of 20 shards' descriptors open with max_open_shards=2.)"""
    from roxxel.format import blocks as blocks_module
    from roxxel.format import mapread

    if checks == "zlib-crc32":
        monkeypatch.setattr(blocks_module, "DEFAULT_ALGORITHM", "crc32")
    ids = (np.arange(2_000_000, dtype=np.int64) * 7919) % 60000  # 20 shards of 3 blocks: plans leave some unchecked
    Roxxel(str(tmp_path / "a")).write(
        [ids[i : i + 1000] for i in range(0, len(ids), 1000)], vocab_size=65536, dtype="uint16", max_shard_bytes=200_000
    )
    if checks == "no-native-crc32c":
        monkeypatch.setattr(mapread, "_crc_ready", False)
    few = Roxxel(str(tmp_path / "a"), max_open_shards=2)
    s = Curriculum(few, [Phase(global_batch_size=8, seq_len=256)], repeat=True).stream(
        0, 10**6, seed=3, to_device=False, prefetch_size=0
    )
    most = 0
    for _ in range(60):
        next(s)
        most = max(most, _shard_fds(few))
    assert few.num_shards > 10 and most <= 2
