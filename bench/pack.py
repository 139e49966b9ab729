"""Pack throughput: ``roxxel pack`` of many files, byte-level against a bare read + write, BPE against the tokenizer.

Input: the ``.py`` files of the Python standard library (real text on every machine), found by
each pack itself (the directory walk is part of packing). Baselines, measured in the same
run on a warm page cache, in interleaved rounds (order rotated each round):
  * plain read      - open and read every file (the floor for any packer);
  * read + write    - read every file (the list given) and write its bytes widened to uint16
                      with a 2-byte separator after each, i.e. the pack's token bytes (its header,
                      index and checksums add 0.05%), with no checksum, hash, fsync or rename:
                      what packing costs in bare I/O (the target's base);
  * walk + read + write - the same, finding the files itself as the pack does (with the
                      pack's own directory walk): the fair base for a pack of a directory;
  * read + write + fsync - read + write, then one fsync of the file: the bare cost of bytes
                      that survive a crash, which a pack (atomic, durable) cannot go below.
Every method writes a fresh file (or dataset) each time, removed outside the timed part, so
none pays for truncating the last one. Roxxel is measured with ``--jobs 1`` (a reader thread,
the writing thread, a checksum thread) and with ``--jobs`` one per CPU (which byte-level packing
of text files ignores: the same threads; the row shows that asking for a pool costs nothing).
Each figure is the rate over a window of at least ``--seconds`` of timed work; MB/s counts
input bytes. A second table gives the process CPU time per pass (all threads): on a shared
machine the wall-clock ratio follows it. Integrity features stay on: block checksums, the
shard's SHA-256, fsync and atomic renames.

Everything is measured in two places (``--places``):
  * memory - a tmpfs (``/dev/shm``): writing is a copy into memory and an fsync costs
    nothing, so the table shows what the software costs against the bare copy. The
    target is read here: pack >= 0.8x read + write.
  * disk - the temporary directory. A pack makes its shards durable before it names them,
    so it cannot end before the disk has taken every byte; ``read + write + fsync`` is that
    floor, and the disk's write speed sets how far it lies below a bare read + write (whose
    bytes are still in the page cache when its window ends).

A BPE table follows (``--tables``): ``roxxel pack --tokenizer tokenizer.json`` of a spread sample of
the same files (``--bpe-mb``, UTF-8 ones: a BPE pack refuses others), written to the first place,
against the tokenizer's own batch encoding of the same texts:
  * read + encode_batch - read every file, decode it as UTF-8 and encode the texts 64 at a time
                      with ``Tokenizer.encode_batch_fast`` (what ``roxxel pack`` calls, with its
                      batch size), keeping the ids: the floor for any packer with this
                      tokenizer, so the ratio is what packing costs beyond encoding.
The tokenizer is a byte-level BPE (GPT-2's pre-tokenization, ``<|endoftext|>`` as EOS, as the LM
example's ``prepare.py`` trains) of ``--vocab`` ids trained in the bench on the sample, or
``--tokenizer PATH``. Its CPU table counts the pool's processes too (``--jobs``).

``--compare-tree DIR`` measures the pack rows of another checkout of Roxxel (a git worktree of
an older commit, with its compiled extension copied in) beside this one's, interleaved in the
same rounds: each tree's rows run in a process of their own, ``python bench/pack.py --serve``
with ``PYTHONPATH`` set to the tree (this tree's rows too, so both pay the same), one process per
row. A last table gives, for each pair, this tree's rate and CPU time against the other's: the
ratio of the medians and the median of the per-round ratios (the two rows ran in the same
round, so load from other processes hits both alike); the target is >= 0.95x.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import IO, Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _measure import Runner, interleaved, load_average, median, record  # noqa: E402
from _table import print_samples  # noqa: E402

from roxxel.pack import iter_input_files, pack  # noqa: E402

INCLUDE, EXCLUDE = ["*.py"], ["*/site-packages/*"]
EOS = "<|endoftext|>"
BPE_BATCH = 64  # texts per encode_batch call, as roxxel pack's tokenized batches
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

Pass = Callable[[int], tuple[float, float]]  # k -> (wall seconds, CPU seconds) of its timed part


def timed_window(run: Pass, window: float, nbytes: int, cpu: list[float]) -> float:
    """Call ``run(k)`` (k = 0, 1, ...) until its timed total reaches ``window`` seconds; bytes per second.

    ``run`` returns the seconds its timed part took (cleanup outside it is not counted) and
    the CPU seconds of that part; the mean CPU per call is appended to ``cpu``.
    """
    spent, used, k = 0.0, 0.0, 0
    while spent < window:
        wall, proc = run(k)
        spent, used, k = spent + wall, used + proc, k + 1
    cpu.append(used / k)
    return k * nbytes / spent


def runner(run: Pass, nbytes: int, cpu: list[float]) -> Runner:
    """A method of the table: ``run``'s passes over a window (see :func:`timed_window`)."""
    return lambda window: timed_window(run, window, nbytes, cpu)


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its children that ended (a pack's pool)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and the children that ended in it) of ``fn()``."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    fn()
    return time.perf_counter() - t0, cpu_seconds() - c0


def walk(top: str) -> list[str]:
    """The files a pack of ``top`` takes, found by the pack's own walk (so neither side gains from it)."""
    return list(iter_input_files([top], INCLUDE, EXCLUDE))


def pack_pass(work: str, name: str, inputs: list[str], tokenizer: str, jobs: int, walked: bool) -> Pass:
    """One ``roxxel pack`` into a fresh dataset under ``work`` per call, removed outside the timed part."""

    def run(k: int) -> tuple[float, float]:
        out = os.path.join(work, f"ds-{name}-{k}")
        globs: dict[str, Any] = dict(include=INCLUDE, exclude=EXCLUDE) if walked else {}
        spent = timed(lambda: pack(inputs, out, tokenizer=tokenizer, jobs=jobs, **globs))
        shutil.rmtree(out)
        return spent

    return run


class Worker:
    """A ``bench/pack.py --serve`` process importing Roxxel from ``tree``: it times pack windows on request."""

    def __init__(self, tree: str):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.roxxel = self._ask({"hello": True})["roxxel"]
        if not self.roxxel.startswith(os.path.abspath(tree) + os.sep):
            raise RuntimeError(f"the worker for {tree} imported Roxxel from {self.roxxel}: is roxxel/ there?")

    def _ask(self, request: dict) -> dict:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the pack worker ended (exit {self.proc.wait()}); its error is above")
        return json.loads(line)

    def runner(self, nbytes: int, cpu: list[float], job: dict) -> Runner:
        """A method of the table: the worker times a window of ``job``'s pack; its CPU per pass goes to ``cpu``."""

        def run(window: float) -> float:
            answer = self._ask(dict(job, window=window, nbytes=nbytes))
            cpu.append(answer["cpu"])
            return answer["rate"]

        return run

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def serve(stdin: IO[str], stdout: IO[str]) -> None:
    """The worker's loop: one JSON request a line (a pack's arguments and a window), one JSON answer."""
    import roxxel

    for line in stdin:
        request = json.loads(line)
        if request.get("hello"):
            answer: dict = {"roxxel": os.path.abspath(roxxel.__file__)}
        else:
            cpu: list[float] = []
            run = pack_pass(
                request["work"],
                request["name"],
                request["inputs"],
                request["tokenizer"],
                request["jobs"],
                request["walked"],
            )
            answer = {"rate": timed_window(run, request["window"], request["nbytes"], cpu), "cpu": cpu[0]}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


class PackRows:
    """The ``roxxel pack`` rows of one table: in this process, or (``--compare-tree``) each in a
    worker process of its own, for this tree and the other one, and the pairs to compare."""

    def __init__(self, args: argparse.Namespace):
        self.other = args.compare_tree
        self.label = tree_label(self.other) if self.other else ""
        self.workers: list[Worker] = []
        self.pairs: list[tuple[str, str]] = []  # (this tree's row, the other tree's row)

    def add(
        self,
        methods: dict[str, Runner],
        cpu: dict[str, list[float]],
        name: str,
        work: str,
        inputs: list[str],
        tokenizer: str,
        jobs: int,
        walked: bool,
        nbytes: int,
    ) -> None:
        """The row ``name``: ``roxxel pack`` of ``inputs`` (walked with the bench's globs if ``walked``)
        into ``work``, ``nbytes`` of input a pass; with ``--compare-tree``, the other tree's row too."""
        job = dict(work=work, inputs=inputs, tokenizer=tokenizer, jobs=jobs, walked=walked)
        if not self.other:
            cpu[name] = []
            methods[name] = runner(
                pack_pass(work, str(len(methods)), inputs, tokenizer, jobs, walked), nbytes, cpu[name]
            )
            return
        for row, tree in ((name, REPO), (f"{name} @{self.label}", self.other)):
            worker = Worker(tree)
            self.workers.append(worker)
            cpu[row] = []
            methods[row] = worker.runner(nbytes, cpu[row], dict(job, name=str(len(self.workers))))
        self.pairs.append((name, f"{name} @{self.label}"))

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


def tree_label(tree: str) -> str:
    """The other tree's short commit (its directory's name if it is no git checkout)."""
    try:
        return subprocess.run(
            ["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        return os.path.basename(os.path.abspath(tree))


def compare(title: str, samples: dict[str, list[float]], cpu: dict[str, list[float]], rows: PackRows) -> None:
    """This tree's pack rows against the other tree's: rate and CPU, medians and per-round ratios; the targets."""
    if not rows.pairs:
        return
    width = max(len(a) for a, _ in rows.pairs)
    print(f"{title}: this tree against @{rows.label}  [ratio of medians; median of per-round ratios]")
    head = (
        f"{'method':<{width}}  {'MB/s':>8}  {'@' + rows.label:>10}  {'ratio':>6}  {'per-round':>9}"
        f"  {'CPU ms':>8}  {'@' + rows.label:>10}  {'ratio':>6}  {'per-round':>9}"
    )
    print(head)
    print("-" * len(head))
    for this, other in rows.pairs:
        rate = median(samples[this]) / median(samples[other])
        rate_r = median([a / b for a, b in zip(samples[this], samples[other])])
        used = median(cpu[this]) / median(cpu[other])
        used_r = median([a / b for a, b in zip(cpu[this], cpu[other])])
        print(
            f"{this:<{width}}  {median(samples[this]) / 1e6:>8.2f}  {median(samples[other]) / 1e6:>10.2f}  {rate:>5.3f}x"
            f"  {rate_r:>8.3f}x  {median(cpu[this]) * 1e3:>8.1f}  {median(cpu[other]) * 1e3:>10.1f}  {used:>5.3f}x"
            f"  {used_r:>8.3f}x"
        )
        record(f"{title}, {this} vs @{rows.label}", f"{rate_r:.3f}x", ">= 0.95x (per-round)", rate_r >= 0.95)
    print("(rate: higher is better; CPU: lower is better)")
    print()


PLACES = {"memory": "/dev/shm", "disk": tempfile.gettempdir()}


def measure(place: str, top: str, files: list[str], total: int, args: argparse.Namespace) -> None:
    """The tables and targets of one place (see the module docstring), writing under ``top``."""
    jobs = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="roxxel-bench-", dir=top)
    stdlib = sysconfig.get_paths()["stdlib"]
    separator = np.uint16(256).tobytes()

    def plain_read(_k: int) -> tuple[float, float]:
        def run():
            for f in files:
                with open(f, "rb") as fh:
                    fh.read()

        return timed(run)

    def read_write(sync: bool = False, find: bool = False):
        def run(k: int) -> tuple[float, float]:
            path = os.path.join(work, f"flat-{sync:d}{find:d}-{k}.bin")

            def copy():
                with open(path, "wb") as out:
                    for f in walk(stdlib) if find else files:
                        with open(f, "rb") as fh:
                            out.write(np.frombuffer(fh.read(), np.uint8).astype(np.uint16).tobytes())
                        out.write(separator)
                    if sync:
                        out.flush()
                        os.fsync(out.fileno())

            spent = timed(copy)
            os.remove(path)
            return spent

        return run

    durable = place != "memory"  # on a tmpfs an fsync is a no-op: the row would repeat read + write
    passes: dict[str, Pass] = {
        "plain read": plain_read,
        "read + write": read_write(),
        "walk + read + write": read_write(find=True),
    }
    if durable:
        passes["read + write + fsync"] = read_write(sync=True)
    cpu: dict[str, list[float]] = {n: [] for n in passes}
    methods = {n: runner(fn, total, cpu[n]) for n, fn in passes.items()}
    rows = PackRows(args)
    try:
        for n_jobs in [1, jobs] if jobs > 1 else [1]:
            rows.add(methods, cpu, f"roxxel pack --jobs {n_jobs}", work, [stdlib], "bytes", n_jobs, True, total)
        plain_read(0)  # warm the page cache for every method alike
        samples = interleaved(methods, args.rounds, args.seconds)
    finally:
        rows.close()
        shutil.rmtree(work, ignore_errors=True)
    title = f"pack to {place} ({top}): {len(files)} files, {total / 1e6:.1f} MB of stdlib .py, byte-level tokens"
    bases = ["read + write", "walk + read + write"] + (["read + write + fsync"] if durable else [])
    print_samples(title, samples, "MB/s", bases, scale=1e-6, note=f"{args.seconds:g} s windows; {load_average()}")
    print()
    print_samples(
        f"process CPU time per pass (all threads), {place}", cpu, "CPU ms", bases[:2], scale=1e3, higher_is_better=False
    )
    print()
    compare(f"byte-level pack ({place})", samples, cpu, rows)
    m = {n: median(v) for n, v in samples.items()}
    best = max(v for n, v in m.items() if n.startswith("roxxel") and "@" not in n)
    if durable:
        record(
            f"pack vs read + write ({place}: disk-bound)", f"{best / m['read + write']:.2f}x", "(for reference)", None
        )
        record(
            f"pack vs read + write + fsync ({place}: the floor)",
            f"{best / m['read + write + fsync']:.2f}x",
            "(for reference)",
            None,
        )
    else:
        record(
            f"pack vs read + write ({place})",
            f"{best / m['read + write']:.2f}x",
            ">= 0.8x",
            best >= 0.8 * m["read + write"],
        )
        record(
            f"pack vs walk + read + write ({place})", f"{best / m['walk + read + write']:.2f}x", "(for reference)", None
        )


def bpe_sample(files: list[str], megabytes: float) -> list[str]:
    """Every k-th of ``files`` (k for about ``megabytes`` in all) whose bytes are UTF-8 text without NUL."""
    total = sum(os.path.getsize(f) for f in files)
    step = max(1, math.ceil(total / (megabytes * 1e6)))
    sample = []
    for f in files[::step]:
        with open(f, "rb") as fh:
            data = fh.read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if b"\0" not in data[:8192]:
            sample.append(f)
    return sample


def train_bpe(files: list[str], path: str, vocab_size: int) -> None:
    """A byte-level BPE of ``vocab_size`` ids trained on ``files``, saved to ``path`` (as the LM example's prepare.py)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train(files, trainer)
    tok.save(path)


def measure_bpe(place: str, top: str, files: list[str], args: argparse.Namespace) -> None:
    """The BPE table (see the module docstring), writing under ``top``."""
    from tokenizers import Tokenizer

    jobs = os.cpu_count() or 1
    sample = bpe_sample(files, args.bpe_mb)
    total = sum(os.path.getsize(f) for f in sample)
    work = tempfile.mkdtemp(prefix="roxxel-bench-", dir=top)
    rows = PackRows(args)
    try:
        if args.tokenizer:
            path, made = args.tokenizer, f"{args.tokenizer}"
        else:
            path = os.path.join(work, "tokenizer.json")
            train_bpe(sample, path, args.vocab)
            made = f"byte-level BPE of {args.vocab} ids trained on the sample"
        tok = Tokenizer.from_file(path)
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)

        def read_encode(_k: int) -> tuple[float, float]:
            def run():
                texts = []
                for f in sample:
                    with open(f, "rb") as fh:
                        texts.append(fh.read().decode("utf-8"))
                    if len(texts) == BPE_BATCH:
                        [e.ids for e in encode(texts, add_special_tokens=False)]
                        texts = []
                if texts:
                    [e.ids for e in encode(texts, add_special_tokens=False)]

            return timed(run)

        cpu: dict[str, list[float]] = {"read + encode_batch": []}
        methods: dict[str, Runner] = {
            "read + encode_batch": lambda w: timed_window(read_encode, w, total, cpu["read + encode_batch"])
        }
        for n_jobs in [1, jobs] if jobs > 1 else [1]:
            rows.add(methods, cpu, f"roxxel pack --jobs {n_jobs}", work, sample, path, n_jobs, False, total)
        read_encode(0)  # warm the page cache and the tokenizer's threads for every method alike
        samples = interleaved(methods, args.rounds, args.seconds)
    finally:
        rows.close()
        shutil.rmtree(work, ignore_errors=True)
    title = f"BPE pack to {place} ({top}): {len(sample)} files, {total / 1e6:.1f} MB of stdlib .py; {made}"
    base = ["read + encode_batch"]
    print_samples(title, samples, "MB/s", base, scale=1e-6, note=f"{args.seconds:g} s windows; {load_average()}")
    print()
    print_samples(
        f"CPU time per pass (all threads and pool processes), BPE, {place}",
        cpu,
        "CPU ms",
        base,
        scale=1e3,
        higher_is_better=False,
    )
    print()
    compare(f"BPE pack ({place})", samples, cpu, rows)
    m = {n: median(v) for n, v in samples.items()}
    best = max(v for n, v in m.items() if n.startswith("roxxel") and "@" not in n)
    record(
        f"BPE pack vs read + encode_batch ({place})", f"{best / m['read + encode_batch']:.2f}x", "(for reference)", None
    )


def main() -> None:
    if sys.argv[1:] == ["--serve"]:  # a --compare-tree worker (see Worker)
        serve(sys.stdin, sys.stdout)
        return
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=2.0, help="timed work per figure (default 2 s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument(
        "--places",
        nargs="+",
        choices=list(PLACES),
        default=list(PLACES),
        help="where the outputs are written (default: both; the BPE table uses the first)",
    )
    p.add_argument(
        "--tables", nargs="+", choices=["bytes", "bpe"], default=["bytes", "bpe"], help="which tables (default: both)"
    )
    p.add_argument("--tokenizer", metavar="PATH", help="a tokenizer.json for the BPE table (default: trained here)")
    p.add_argument("--vocab", type=int, default=4096, help="ids of the BPE trained here (default 4096)")
    p.add_argument("--bpe-mb", type=float, default=3.0, help="MB of the files the BPE table packs (default 3)")
    p.add_argument(
        "--compare-tree",
        metavar="DIR",
        help="another Roxxel checkout (e.g. a git worktree of an older commit): its pack rows beside this tree's",
    )
    args = p.parse_args()
    if args.compare_tree and not os.path.isdir(os.path.join(args.compare_tree, "roxxel")):
        p.error(f"--compare-tree {args.compare_tree}: no roxxel/ package there")
    files = walk(sysconfig.get_paths()["stdlib"])
    total = sum(os.path.getsize(f) for f in files)
    print(f"machine: {load_average()} at start\n")
    places = [
        place
        for place in args.places
        if os.path.isdir(PLACES[place]) and shutil.disk_usage(PLACES[place]).free >= 8 * total
    ]
    for place in args.places:
        if place not in places:
            print(f"{place}: skipped, {PLACES[place]} is missing or has less than {8 * total / 1e6:.0f} MB free\n")
        elif "bytes" in args.tables:
            measure(place, PLACES[place], files, total, args)
    if "bpe" in args.tables and places:
        measure_bpe(places[0], PLACES[places[0]], files, args)


if __name__ == "__main__":
    main()
