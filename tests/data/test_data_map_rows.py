"""Rows read straight from the shards' memory maps (roxxel.data.map_rows, roxxel/format/_mapread.c).

The streamer's fast path must deliver exactly what the pread path delivers, check every block
before its tokens leave (on the checking thread or inline), and turn a file cut short under
the map into the pread path's one-line error instead of a SIGBUS. Real shards, real maps,
real truncation (in child processes, so that a missed SIGBUS fails the test instead of
killing the test worker).
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from roxxel import Curriculum, Phase, Roxxel
from roxxel.data import map_rows
from roxxel.data import reader as reader_module
from roxxel.format import BlockChecksumError, mapread, open_shard
from support.shards import overwrite_token

native = pytest.mark.skipif(mapread.WHY_NOT is not None, reason=str(mapread.WHY_NOT))


def make(path, n_tokens, dtype="uint16", shard_tokens=None, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 60_000, n_tokens)
    docs = [ids[i : i + 1500] for i in range(0, n_tokens, 1500)]
    itemsize = np.dtype(dtype).itemsize
    Roxxel(str(path)).write(
        docs,
        vocab_size=65536,
        dtype=dtype,
        max_shard_bytes=None if shard_tokens is None else itemsize * shard_tokens,
    )
    return Roxxel(str(path))


@pytest.fixture
def spy(monkeypatch):
    """Counts the rows read from the maps (so a test fails if the fast path silently stopped applying)."""
    count = [0]
    real = mapread.gather

    def gather(out, sources, stored):
        count[0] += out.shape[0]
        return real(out, sources, stored)

    monkeypatch.setattr(mapread, "gather", gather)
    return count


def batches(curriculum, steps, dtype=np.int32, lo=None, hi=None):
    s = curriculum.stream(seed=3, to_device=False, prefetch_size=0, dtype=dtype)
    if lo is None:
        return [next(s).copy() for _ in range(steps)]
    return [s.reader.rows(step, lo, hi, dtype) for step in range(steps)]


def test_the_native_reader_is_built_where_ci_runs():
    """.ci/run sets ROXXEL_REQUIRE_MAPREAD=1: a build that lost the extension fails here, not silently slower."""
    if os.environ.get("ROXXEL_REQUIRE_MAPREAD") != "1":
        pytest.skip("ROXXEL_REQUIRE_MAPREAD is not set (only CI requires the native reader)")
    assert mapread.WHY_NOT is None
    assert mapread.crc32c_ready()


@native
@pytest.mark.parametrize(
    "stored,out", [("uint16", np.int32), ("uint16", np.int64), ("uint16", np.uint16), ("uint32", np.int32)]
)
def test_batches_from_the_maps_equal_those_read_with_pread(tmp_path, monkeypatch, spy, stored, out):
    a = make(tmp_path / "a", 400_000, stored, shard_tokens=90_000, seed=1)
    b = make(tmp_path / "b", 150_000, stored, shard_tokens=40_000, seed=2)

    def curriculum():
        return Curriculum(
            {"a": Roxxel(a.filepath), "b": Roxxel(b.filepath)},
            [
                Phase(steps=30, global_batch_size=8, seq_len=512, weights={"a": 0.7, "b": 0.3}),
                Phase(steps=40, global_batch_size=4, seq_len=1024, weights={"a": 0.2, "b": 0.8}),
            ],
        )

    mapped = batches(curriculum(), 70, out)
    part = batches(curriculum(), 70, out, 1, 3)  # a process's rows of each global batch
    assert spy[0] > 0.8 * sum(len(x) for x in mapped + part)  # rows that join pieces (a dataset's end) use pread
    monkeypatch.setattr(mapread, "can_gather", lambda *a: False)
    assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(mapped, batches(curriculum(), 70, out)))
    assert all(np.array_equal(x, y) for x, y in zip(part, batches(curriculum(), 70, out, 1, 3)))


@native
@pytest.mark.parametrize("inline", [0, 10**9], ids=["checking-thread", "inline"])
def test_a_damaged_block_stops_the_stream_before_its_rows_leave(tmp_path, monkeypatch, spy, inline):
    monkeypatch.setattr(map_rows, "_INLINE_BLOCKS", inline)
    d = make(tmp_path / "d", 600_000)
    c = Curriculum(Roxxel(d.filepath), [Phase(global_batch_size=8, seq_len=512)])
    clean = batches(c, 140)
    s = open_shard(d.shard_paths[0])
    token = 300_123
    overwrite_token(d.shard_paths[0], token, b"\xff\xfe")
    block = 2 * token // s._blocks.block_bytes
    stream = Curriculum(Roxxel(d.filepath), [Phase(global_batch_size=8, seq_len=512)]).stream(
        seed=3, to_device=False, prefetch_size=0
    )
    delivered = []
    with pytest.raises(BlockChecksumError, match=rf"token block {block} "):
        for _ in range(140):
            delivered.append(next(stream).copy())
    assert spy[0] > 0
    assert len(delivered) < 140 and all(np.array_equal(x, y) for x, y in zip(delivered, clean))
    assert (np.concatenate(delivered) != 0xFEFF).all()  # the damaged token never left


@native
def test_two_passes_check_every_block_the_pread_path_checks(tmp_path, monkeypatch, spy):
    d = make(tmp_path / "p", 300_000)

    def checked_after_two_passes():
        ds = Roxxel(d.filepath)
        c = Curriculum(ds, [Phase(global_batch_size=8, seq_len=512)], repeat=True)
        stream = c.stream(0, 10**9, seed=3, to_device=False, prefetch_size=0)
        for _ in range(2 * 300_000 // (8 * 512)):
            next(stream)
        return ds.shard_table.shard(0).block_checks.checked.copy()

    mapped = checked_after_two_passes()
    assert spy[0] > 0
    monkeypatch.setattr(mapread, "can_gather", lambda *a: False)
    read = checked_after_two_passes()
    assert read.sum() >= len(read) - 1 and (mapped | ~read).all()


CUT = """
import os, sys, numpy as np
from roxxel import Curriculum, Phase, Roxxel
from roxxel.format import mapread
assert mapread.WHY_NOT is None
ds = Roxxel(sys.argv[1], check_blocks=sys.argv[2] == "on")
s = Curriculum(ds, [Phase(global_batch_size=8, seq_len=512)], repeat=True).stream(0, 10**9, seed=3, to_device=False, prefetch_size=0)
next(s)
os.truncate(ds.shard_paths[0], 8192)
for _ in range(10_000):
    next(s)
print("no error")
"""


@native
@pytest.mark.parametrize("checks", ["on", "off"], ids=["checking-a-block", "gathering-a-row"])
def test_a_shard_cut_under_the_map_ends_in_an_error_naming_it_not_a_sigbus(tmp_path, checks):
    d = make(tmp_path / "c", 400_000)
    run = subprocess.run([sys.executable, "-c", CUT, d.filepath, checks], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, (run.returncode, run.stderr[-2000:])
    last = run.stderr.strip().splitlines()[-1]
    assert "TruncatedShardError" in last or "ShardChangedError" in last, last
    assert d.shard_paths[0] in last


MAPPED_FILE = """
import faulthandler, mmap, os, sys, numpy as np
from roxxel.format import mapread
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(b"\\1" * 65536)
m = mmap.mmap(os.open(path, os.O_RDONLY), 65536, prot=mmap.PROT_READ)
view = np.frombuffer(m, np.uint8)
out = np.empty((1, 16), np.int32)
"""  # a 64 KiB file mapped (a child's script starts with it; the file is argv[1])

FOREIGN = (
    MAPPED_FILE
    + """
faulthandler.enable()
assert mapread.gather(out, np.array([mapread.address(view)]), np.dtype("<u2"))[0] is None  # installs the guard
os.truncate(path, 0)
assert mapread.gather(out, np.array([mapread.address(view) + 4096]), np.dtype("<u2"))[0] == 0  # caught
print("caught", flush=True)
print(int(view[8192]))  # no guard here: the handler before ours (faulthandler) must see it
"""
)


@native
def test_a_sigbus_outside_the_native_reads_still_reaches_the_handler_before_it(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", FOREIGN, str(tmp_path / "f")], capture_output=True, text=True, timeout=60
    )
    assert run.stdout.splitlines() == ["caught"]
    assert run.returncode == -7 and "Fatal Python error: Bus error" in run.stderr, (run.returncode, run.stderr)


@native
def test_ids_beyond_the_vocabulary_are_caught_on_the_map_path(tmp_path, spy):
    Roxxel(str(tmp_path / "w")).write([np.full(50_000, 40_000, np.uint16)], dtype="uint16")
    c = Curriculum(Roxxel(str(tmp_path / "w")), [Phase(global_batch_size=2, seq_len=256)], vocab_size=30_000)
    with pytest.raises(ValueError, match="holds token id 40000, beyond the model.s vocab_size 30000"):
        next(c.stream(seed=0, to_device=False, prefetch_size=0))
    assert spy[0] > 0


@native
def test_a_forked_child_checks_the_blocks_its_parent_queued_itself(tmp_path, monkeypatch, spy):
    """After a fork the checking thread is the parent's: a job queued before the fork would never
    run in the child. The child's reader runs it itself (here: jobs queued to no thread, and
    stamped with another process's id, as the parent's are in the child)."""
    queued = []

    def never_run(job):  # as a child sees a job its parent's thread had begun: stamped by another process
        job._pid = -1
        job._work[0][:1].copy()  # (its sources stay as they were)
        queued.append(job)

    monkeypatch.setattr(map_rows, "_INLINE_BLOCKS", 0)
    monkeypatch.setattr(map_rows, "_submit", never_run)
    d = make(tmp_path / "k", 300_000)
    c = Curriculum(Roxxel(d.filepath), [Phase(global_batch_size=8, seq_len=512)])
    got = batches(c, 60)
    assert queued and any(job.finished for job in queued)
    monkeypatch.setattr(mapread, "can_gather", lambda *a: False)
    assert all(np.array_equal(x, y) for x, y in zip(got, batches(c, 60)))


@native
def test_rows_longer_than_a_block_have_every_block_they_cover_checked(tmp_path, spy):
    """A 98,304-token uint16 row covers four 64 KiB blocks: a damaged token in a middle one is refused
    (the map path once checked only the first and the last block of each row)."""
    d = make(tmp_path / "l", 1_000_000)
    path = d.shard_paths[0]
    s = open_shard(path)
    c = Curriculum(Roxxel(d.filepath), [Phase(steps=4, global_batch_size=2, seq_len=98_304)], chunk_tokens=98_304)
    stream = c.stream(seed=1, to_device=False, prefetch_size=0)
    starts = stream.reader._plan_ahead(0, 0, 2, c.resolved[0], None, 1).starts
    block = s._blocks.block_bytes
    middle = (2 * int(starts[0]) // block + 2) * block // 2  # the first token of the row's third block
    overwrite_token(path, middle, b"\xff\xfe")
    with pytest.raises(BlockChecksumError, match=rf"token block {2 * middle // block} "):
        next(c.stream(seed=1, to_device=False, prefetch_size=0))
    assert spy[0] == 0  # refused before any row was copied


@native
def test_asking_again_after_a_damaged_block_raises_again(tmp_path, spy):
    d = make(tmp_path / "r", 600_000)
    overwrite_token(d.shard_paths[0], 300_123, b"\xff\xfe")
    stream = Curriculum(Roxxel(d.filepath), [Phase(global_batch_size=8, seq_len=512)]).stream(
        seed=3, to_device=False, prefetch_size=0
    )
    for step in range(len(stream)):
        try:
            stream.local_rows(step)
        except BlockChecksumError:
            break
    else:
        pytest.fail("the damaged block was never reached")
    for later in (step, step + 1, step + 5):  # the same step and the ones after it, asked for again
        with pytest.raises(BlockChecksumError):
            stream.local_rows(later)


FAULTHANDLER_LATE = (
    MAPPED_FILE
    + """
assert mapread.gather(out, np.array([mapread.address(view)]), np.dtype("<u2"))[0] is None  # our handler first
faulthandler.enable()  # then faulthandler, whose "previous" is ours
assert mapread.gather(out, np.array([mapread.address(view)]), np.dtype("<u2"))[0] is None  # ours on top again
os.truncate(path, 0)
print(int(view[8192]))  # unguarded: must end the process, not bounce between the two handlers
"""
)


@native
def test_a_sigbus_ends_the_process_when_faulthandler_came_after_the_native_reader(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", FAULTHANDLER_LATE, str(tmp_path / "f")], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == -7, (run.returncode, run.stderr[-1000:])
    assert 1 <= run.stderr.count("Fatal Python error: Bus error") <= 2, run.stderr[-1000:]


@native
def test_the_maps_of_many_shards_hold_no_descriptors_beyond_max_open_shards(tmp_path, spy):
    d = make(tmp_path / "m", 400_000, shard_tokens=2_000)  # ~200 shards
    ds = Roxxel(d.filepath, max_open_shards=8)
    stream = Curriculum(ds, [Phase(global_batch_size=8, seq_len=256)]).stream(seed=3, to_device=False, prefetch_size=0)
    before = len(os.listdir("/proc/self/fd"))
    most = before
    for _ in range(120):
        next(stream)
        most = max(most, len(os.listdir("/proc/self/fd")))
    assert len(ds.shard_paths) > 150 and spy[0] > 0
    assert most - before <= 8 + 2, (before, most)


@native
def test_after_a_map_read_faults_the_plan_is_read_step_by_step(tmp_path, monkeypatch):
    """A plan of the map path holds up to 256 steps: after a fault its rows are read step by step
    with pread, never staged all at once."""
    d = make(tmp_path / "f", 2_000_000)
    monkeypatch.setattr(mapread, "gather", lambda *a: (0, None))
    staged = []
    real = reader_module.BatchReader._staged
    monkeypatch.setattr(reader_module.BatchReader, "_staged", lambda *a: staged.append(1) or real(*a))
    c = Curriculum(Roxxel(d.filepath), [Phase(global_batch_size=8, seq_len=512)])
    got = batches(c, 300)
    assert not staged  # every step read by itself
    monkeypatch.setattr(mapread, "can_gather", lambda *a: False)
    assert all(np.array_equal(x, y) for x, y in zip(got, batches(c, 300)))


RECOVERING_HANDLER = r"""
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static int recovered;
static void zero_page(int sig, siginfo_t *info, void *context) {  /* a zero page over the fault: the read retries */
  long page = sysconf(_SC_PAGESIZE);
  mmap((void *)((uintptr_t)info->si_addr & ~(uintptr_t)(page - 1)), page, PROT_READ,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  recovered++;
}
int install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = zero_page;
  action.sa_flags = SA_SIGINFO;
  return sigaction(SIGBUS, &action, NULL);
}
int count(void) { return recovered; }
"""

RECOVERING = """
import ctypes, mmap, os, sys, numpy as np
lib = ctypes.CDLL(sys.argv[1])
lib.install()  # the program's own handler, which recovers from SIGBUS, first
from roxxel.format import mapread
out, rows = np.empty((1, 16), np.int32), np.arange(16, dtype=np.uint16)
mapread.gather(out, np.array([mapread.address(rows)]), np.dtype("<u2"))  # ours on top, the program's behind it
for i in range(3):
    fd = os.open(sys.argv[2] + str(i), os.O_RDWR | os.O_CREAT)
    os.write(fd, b"\\1" * 8192)
    m = mmap.mmap(fd, 8192, access=mmap.ACCESS_READ)
    os.ftruncate(fd, 0)
    print(int(np.frombuffer(m, np.uint8)[4096 + 5]), lib.count(), flush=True)  # unguarded: the program's to handle
"""


@native
def test_every_sigbus_outside_the_native_reads_reaches_a_handler_that_recovers(tmp_path):
    """A program's own SIGBUS handler that recovers (maps a page and returns) gets every fault, not
    only the first (the native reader once ended the second with the default action)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the recovering handler")
    (tmp_path / "recover.c").write_text(RECOVERING_HANDLER)
    lib = tmp_path / "librecover.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "recover.c")], check=True, timeout=60)
    run = subprocess.run(
        [sys.executable, "-c", RECOVERING, str(lib), str(tmp_path / "cut")], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-1000:])
    assert run.stdout.split() == ["0", "1", "0", "2", "0", "3"], run.stdout


@pytest.mark.parametrize("every_row", [True, False], ids=["all-rows", "some-rows"])
@pytest.mark.parametrize("n", [1, 3, 8])
def test_dropping_what_a_place_covered_a_step_before_keeps_each_blocks_earliest_step(n, every_row):
    """A block job drops the keys the row at the same batch place covered a step before (the sort
    after is 8x smaller); every block and the earliest step that needs it stay what a plain pass
    over every row's blocks finds."""
    rng = np.random.default_rng(n)
    rows = np.arange(40 * n) if every_row else np.sort(rng.choice(40 * n, size=30 * n, replace=False))
    first = rng.integers(0, 12, len(rows))  # few blocks: places cover the same ones often
    last = first + rng.integers(0, 2, len(rows))
    keys, steps = map_rows._lane_keys(first, last, rows, n)
    want: dict[int, int] = {}
    for r, a, b in zip(rows.tolist(), first.tolist(), last.tolist()):
        for key in (a, b):
            want.setdefault(key, r // n)  # (rows increase: the first seen is the earliest step)
    got: dict[int, int] = {}
    for key, step in zip(keys.tolist(), steps.tolist()):
        got[key] = min(got.get(key, step), step)
    assert got == want and len(keys) < 2 * len(rows)
