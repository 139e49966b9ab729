"""``pack --jobs N`` reads and tokenizes files in worker processes, yet writes the dataset a serial
pack writes, byte for byte, and fails as a serial pack fails, leaving no dataset behind."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from roxxel.format import dataset_writer as writer_module  # its _now dates the manifest
from roxxel.pack import pack

ROXXEL = os.path.join(os.path.dirname(sys.executable), "roxxel")


@pytest.fixture
def tree(tmp_path):
    """150 inputs (three pool tasks): text of many sizes, UTF-8, JSONL, gzip, and binary files to skip."""
    root = tmp_path / "in"
    for i in range(150):
        d = root / f"d{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        if i % 37 == 5:
            (d / f"f{i:03d}.bin").write_bytes(b"\0\1\2" * (i + 1))
        elif i % 23 == 3:
            (d / f"f{i:03d}.jsonl").write_text(
                "".join(json.dumps({"text": f"line {k} of {i} ✓"}) + "\n" for k in range(i % 7))
            )
        elif i % 19 == 2:
            (d / f"f{i:03d}.txt.gz").write_bytes(gzip.compress(f"compressed {i}\n".encode() * i))
        else:
            (d / f"f{i:03d}.txt").write_text(f"file {i}: naïve café\n" * (i * 13 % 400))
    return root


def pack_with(tree, out, jobs, monkeypatch) -> tuple[dict[str, bytes], list[str]]:
    monkeypatch.setattr(
        writer_module, "_now", lambda: "2026-01-01T00:00:00+00:00"
    )  # the manifest records its creation time
    skipped: list[str] = []
    pack([str(tree)], str(out), shard_size=20_000, jobs=jobs, on_skip=skipped.append)
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out))}, skipped


def test_parallel_pack_writes_the_serial_pack_byte_for_byte(tree, tmp_path, monkeypatch):
    serial, skipped_serial = pack_with(tree, tmp_path / "serial", 1, monkeypatch)
    parallel, skipped_parallel = pack_with(tree, tmp_path / "parallel", 3, monkeypatch)
    assert len([n for n in serial if n.endswith(".rox")]) > 3, "the test should cover shard rollover"
    assert list(parallel) == list(serial)
    for name in serial:
        assert parallel[name] == serial[name], name
    assert skipped_parallel == skipped_serial and len(skipped_serial) == 4


@pytest.mark.parametrize(
    "bad_name,bad_bytes,message",
    [
        ("f075.jsonl", b'{"text": "ok"}\n{"body": "no text"}\n', ":2: the line has no field 'text' (it has 'body')"),
        ("f075.jsonl", b'{"text": "ok"}\n{not json\n', ":2: not valid JSON"),
    ],
)
def test_a_bad_input_fails_a_parallel_pack_as_a_serial_one_and_leaves_no_dataset(
    tree, tmp_path, bad_name, bad_bytes, message
):
    bad = tree / "d3" / bad_name  # in the middle of the inputs: a later pool task than the first
    bad.write_bytes(bad_bytes)
    errors = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}"
        r = subprocess.run(
            [ROXXEL, "pack", str(tree), "-o", str(out), "--jobs", jobs, "--shard-size", "20000"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1 and f"{bad}{message}" in r.stderr, r.stderr
        assert not os.path.exists(out)  # no shard, temporary file, marker or lock: not even the directory it made
        errors.append(r.stderr.strip().splitlines()[-1])
    assert errors[0] == errors[1]


def test_jobs_must_not_be_negative(tmp_path):
    with pytest.raises(ValueError, match="jobs must be a number of processes"):
        pack([__file__], str(tmp_path / "o"), jobs=-1)


def test_packing_the_same_inputs_again_later_gives_the_same_shards_and_fingerprint(tree, tmp_path, monkeypatch):
    """Found by a new user's pass: each shard recorded its creation time, which its SHA-256 covers, so
    a dataset packed again from the same inputs had another fingerprint and a resume refused it."""
    from roxxel import Roxxel

    outs = []
    for name, stamp in (("first", "2026-01-01T00:00:00+00:00"), ("later", "2026-06-30T12:34:56+00:00")):
        monkeypatch.setattr(writer_module, "_now", lambda stamp=stamp: stamp)
        pack([str(tree)], str(tmp_path / name), shard_size=20_000)
        outs.append(tmp_path / name)
    shards = sorted(n for n in os.listdir(outs[0]) if n.endswith(".rox"))
    assert len(shards) > 3 and shards == sorted(n for n in os.listdir(outs[1]) if n.endswith(".rox"))
    for n in shards:
        assert (outs[0] / n).read_bytes() == (outs[1] / n).read_bytes(), n
    assert Roxxel(str(outs[0])).fingerprint() == Roxxel(str(outs[1])).fingerprint()


def _slow_tree(root, files=120, lines=4000):
    """JSONL inputs enough for a pool of workers to take seconds over."""
    root.mkdir()
    line = json.dumps({"text": "a line of text to parse " * 8}) + "\n"
    for i in range(files):
        (root / f"f{i:03d}.jsonl").write_text(line * lines)
    return root


def _workers_of(proc, n):
    import psutil

    for _ in range(600):  # the pool's workers are started with the pack (up to 30 s on a loaded machine)
        kids = psutil.Process(proc.pid).children(recursive=True)
        if len(kids) >= n:
            return kids
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"the pack started no {n} workers: {proc.communicate()}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_pack_stopped_by_a_signal_leaves_no_worker_running(tmp_path, sig):
    """Found by a new user's pass: SIGTERM (what Kubernetes and `timeout` send) to `roxxel pack
    --jobs 2` ended the pack but left its two workers running, orphaned, for minutes. SIGTERM now
    cleans up as Ctrl-C does (exit 143); after SIGKILL, which runs nothing, the workers end too."""
    import psutil

    tree = _slow_tree(tmp_path / "in")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [ROXXEL, "pack", str(tree), "-o", str(out), "--jobs", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    kids = _workers_of(proc, 2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    gone, alive = psutil.wait_procs(kids, timeout=20)
    assert not alive, f"workers still running after {sig.name}: {alive}"
    if sig == signal.SIGTERM:
        assert proc.returncode == 143 and "terminated (SIGTERM)" in err and "as it was before" in err, err
        assert not out.exists()
    else:
        assert proc.returncode == -signal.SIGKILL
    with pytest.raises(Exception):  # nothing that opens as a dataset, whatever was left
        from roxxel import Roxxel

        Roxxel(str(out)).open()


def test_a_sigterm_whose_exception_python_swallowed_still_stops_the_pack(tmp_path, monkeypatch):
    """Seen in a CI run: SIGTERM landed while the pool forked its workers, inside logging's
    at-fork hook, where Python ignores exceptions ('Exception ignored in: _releaseLock'); the
    handler's Terminated was lost and the pack went on to exit 0. The handler also records the
    signal, and the pack stops at its next progress report as if the exception had come."""
    from click.testing import CliRunner

    import roxxel.cli as cli
    import roxxel.pack

    def pack_losing_the_exception(inputs, output, on_progress, **kwargs):
        try:
            cli._raise_terminated(signal.SIGTERM, None)  # as in an at-fork hook: raised, then ignored
        except cli.Terminated:
            pass
        on_progress(1, 10, 100)  # the pack goes on
        raise AssertionError("the pack was not stopped")

    monkeypatch.setattr(roxxel.pack, "pack", pack_losing_the_exception)
    monkeypatch.setattr(cli, "_sigterm_received", type(cli._sigterm_received)())
    previous = signal.getsignal(signal.SIGTERM)
    try:
        result = CliRunner().invoke(cli.main, ["pack", str(tmp_path), "-o", str(tmp_path / "out")])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.exit_code == 143, result.output
    assert "terminated (SIGTERM)" in result.output and "as it was before" in result.output


INTERRUPTED_START = """
import concurrent.futures.process as cfp
from roxxel.pack.tokenizing import start_pool
from roxxel.tokenizers import ByteTokenizer

spawn, spawned = cfp.ProcessPoolExecutor._spawn_process, []

def spawn_then_signal(pool):  # the second worker is forked, then the SIGTERM's exception lands
    spawn(pool)
    spawned.append(1)
    if len(spawned) == 2:
        raise KeyboardInterrupt

cfp.ProcessPoolExecutor._spawn_process = spawn_then_signal
try:
    start_pool(ByteTokenizer(), 2)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_a_pool_interrupted_while_its_workers_start_leaves_none_and_lets_the_process_exit(tmp_path):
    """Seen as a leftover of a loaded run of the SIGTERM test above: the signal landed while the
    pool forked its workers, before its manager thread ran; nothing told the workers to stop,
    and the packing process hung at exit joining them (multiprocessing joins its children).
    The pool's workers are now ended when its start is interrupted."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED_START], stdout=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        kids = psutil.Process(proc.pid).children(recursive=True)
        for p in [*kids, psutil.Process(proc.pid)]:
            p.kill()
        raise AssertionError("the process hung at exit, waiting for the pool's workers") from None
    assert out.split() == ["interrupted"] and proc.returncode == 0
