"""The ``roxxel`` command: ``pack``, ``info``, ``verify`` and ``cat``."""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time

import click

from roxxel._version import __version__
from roxxel.format.dataset_writer import DEFAULT_SHARD_SIZE
from roxxel.format.errors import RoxxelFormatError
from roxxel.wording import count

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


def parse_size(text: str) -> int:
    """``"256MiB"`` → 268435456. Units: B, k/KB (1000), KiB (1024), M/MB, MiB, G/GB, GiB.

    Raises:
        click.BadParameter: not a positive size.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS or float(m.group(1)) <= 0:
        raise click.BadParameter(f"{text!r} is not a size like 256MiB, 1GB or 1000000")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def _fail(err: Exception) -> None:
    # Errors the library words for Python callers (append=True) carry the flags' wording too.
    click.echo(f"roxxel: error: {getattr(err, 'cli_message', None) or err}", err=True)
    sys.exit(1)


class _LazyPlot(click.Command):
    """``roxxel plot``, imported only when run: it needs JAX and matplotlib, the rest of ``roxxel`` does not."""

    def __init__(self) -> None:
        super().__init__("plot", help="Plot RUN_DIR's metrics (roxxel_metrics.csv) as a PNG.")

    @staticmethod
    def _real() -> click.Command:
        from roxxel.train.plot import plot_command

        return plot_command

    def make_context(self, info_name, args, parent=None, **extra):
        return self._real().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context):
        return self._real().invoke(ctx)


class _NegativeIndexCommand(click.Command):
    """A command whose integer argument may be negative: ``roxxel cat ds -1``.

    Click reads ``-1`` as an unknown option; a bare negative integer is moved after ``--``
    (where click takes it as an argument), the other arguments keep their order.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" not in args:
            negative = [a for a in args if re.fullmatch(r"-\d+", a)]
            if negative:
                args = [a for a in args if a not in negative] + ["--"] + negative
        return super().parse_args(ctx, args)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="roxxel")
def main() -> None:
    """Roxxel: pack text into token shards, inspect and verify datasets."""


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Dataset directory to create.")
@click.option(
    "--tokenizer",
    default="bytes",
    show_default=True,
    help="'bytes' (byte-level: 256 ids + EOS) or a Hugging Face tokenizer.json file.",
)
@click.option(
    "--shard-size",
    default=str(DEFAULT_SHARD_SIZE),
    show_default=True,
    help="Roll over to a new shard past this size (e.g. 256MiB).",
)
@click.option(
    "--include", multiple=True, metavar="GLOB", help="Only files whose name matches (repeatable), e.g. '*.py'."
)
@click.option(
    "--exclude",
    multiple=True,
    metavar="GLOB",
    help="Skip files whose path matches (repeatable), e.g. '*/site-packages/*'.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "text", "jsonl", "parquet"]),
    default="auto",
    show_default=True,
    help="auto: .jsonl/.ndjson lines, .parquet rows, any other file is one document.",
)
@click.option("--text-field", default="text", show_default=True, help="JSONL key / Parquet column holding the text.")
@click.option("--append", is_flag=True, help="Add to an existing dataset instead of refusing.")
@click.option(
    "--wait-lock",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait this long for another pack/append into the same dataset to finish (default: fail at once).",
)
@click.option(
    "--include-binary",
    is_flag=True,
    help="Pack files with binary content (a NUL byte in the first 8 KiB) too; by default they are skipped.",
)
@click.option("--eos-id", type=int, default=None, help="End-of-document id, when the tokenizer has no standard one.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Processes that read and tokenize input files (0: one per CPU). The output is the same for any value.",
)
def pack(
    inputs,
    output,
    tokenizer,
    shard_size,
    include,
    exclude,
    fmt,
    text_field,
    append,
    wait_lock,
    include_binary,
    eos_id,
    progress,
    jobs,
) -> None:
    """Pack INPUTS (files, directories, globs, or - for stdin) into a dataset at --output.

    Each text file is one document; each JSONL line / Parquet row is one document. Every
    document ends with the EOS token. .gz, .bz2, .xz and .zst inputs are decompressed, whole
    or refused when cut short (x.jsonl.gz is JSONL); a null or non-text field is refused with
    its line or row; files with binary content are skipped and counted unless --include-binary.
    Inputs are read in the order given, directories in sorted order, so document k is the
    k-th input document.
    """
    from tqdm import tqdm

    from roxxel.pack import pack as run_pack

    signal.signal(signal.SIGTERM, _raise_terminated)  # as Ctrl-C: the writer aborts and the pool's workers stop
    size = parse_size(shard_size)
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(unit=" docs", disable=not show, dynamic_ncols=True, file=sys.stderr)
    totals = {"documents": 0, "tokens": 0, "bytes": 0}
    skipped: list[str] = []
    t0 = time.perf_counter()

    def on_progress(docs: int, tokens: int, nbytes: int) -> None:
        if _sigterm_received.is_set():  # the handler's exception can be lost (below): raise it again here
            raise Terminated()
        totals["documents"] += docs
        totals["tokens"] += tokens
        totals["bytes"] += nbytes
        elapsed = max(time.perf_counter() - t0, 1e-9)
        bar.set_postfix_str(f"{totals['tokens'] / elapsed / 1e6:.1f}M tok/s", refresh=False)
        bar.update(docs)

    try:
        manifest = run_pack(
            list(inputs),
            output,
            tokenizer=tokenizer,
            shard_size=size,
            include=include,
            exclude=exclude,
            fmt=fmt,
            text_field=text_field,
            append=append,
            eos_id=eos_id,
            on_progress=on_progress,
            lock_timeout=wait_lock,
            include_binary=include_binary,
            on_skip=skipped.append,
            jobs=jobs,
        )
    except (OSError, ValueError, ImportError) as e:
        bar.close()
        _fail(e)
    except KeyboardInterrupt as e:  # the writer has aborted: no new dataset, an appended one as it was
        bar.close()
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        click.echo(f"roxxel pack: {how}; {output} is as it was before (nothing packed was kept)", err=True)
        sys.exit(128 + (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT))  # as a shell reports it
    bar.close()
    if _sigterm_received.is_set():  # arrived as the pack finished: it is complete, and says so
        click.echo(f"roxxel pack: terminated (SIGTERM) as the pack finished; {output} is complete", err=True)
        sys.exit(128 + signal.SIGTERM)
    elapsed = time.perf_counter() - t0
    click.echo(
        f"packed {count(totals['documents'], 'document')}, {count(totals['tokens'], 'token')} into {output} "
        f"({totals['bytes'] / elapsed / 1e6:.1f} MB/s); the dataset holds {count(manifest.num_documents, 'document')}, "
        f"{count(manifest.num_tokens, 'token')} in {count(len(manifest.shards), 'shard')}"
    )
    if skipped:
        click.echo(
            f"skipped {count(len(skipped), 'binary file')} (e.g. {skipped[0]}); pass --include-binary to pack them, "
            "or --exclude to leave them out quietly"
        )


class Terminated(KeyboardInterrupt):
    """SIGTERM (Kubernetes, ``timeout``, a job scheduler), raised where Ctrl-C would be, to run the same clean-up."""


_sigterm_received = threading.Event()


def _raise_terminated(signum: int, frame: object) -> None:
    """Raise :class:`Terminated`, and remember it: an exception raised in a signal handler is
    lost when the signal lands in code whose exceptions Python ignores (an at-fork hook such
    as logging's, while the pool starts its workers), and the pack went on to exit 0."""
    _sigterm_received.set()
    raise Terminated()


@main.command()
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info(path, as_json) -> None:
    """Summarise the dataset at PATH: shards, tokens, documents, dtype, bytes."""
    from roxxel.data.dataset import Dataset
    from roxxel.format.layout import shard_dtype

    try:
        ds = Dataset(path).open()
        summary = ds.info()
    except (OSError, RoxxelFormatError) as e:
        _fail(e)
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    tok = summary["tokenizer"]
    count = "tokens" if shard_dtype(summary["dtype"]).ids else "values"  # float data: arrays of values, no ids
    rows = [
        ("path", path),
        ("shards", f"{summary['shards']:,}"),
        (count, f"{summary['tokens']:,}"),
        ("documents", f"{summary['documents']:,}"),
        ("dtype", summary["dtype"]),
        ("vocab size", summary["vocab_size"] if summary["vocab_size"] is not None else "-"),
        ("EOS id", summary["eos_id"] if summary["eos_id"] is not None else "-"),
        ("tokenizer", tok.get("name") or tok.get("type") if tok else "-"),
        ("bytes", f"{summary['bytes']:,} ({_human(summary['bytes'])})"),
        ("format", "original ROXXEL02 (read-only)" if summary["legacy"] else "rox v1"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")


@main.command()
@click.argument("path")
def verify(path) -> None:
    """Recompute every shard's checksum; exit 1 naming the first damaged file."""
    from roxxel.data.dataset import Dataset

    done = {"shards": 0, "bytes": 0}

    def progress(shard_path: str, nbytes: int) -> None:
        done["shards"] += 1
        done["bytes"] += nbytes

    try:
        Dataset(path).verify(progress=progress)
    except (OSError, RoxxelFormatError) as e:
        _fail(e)
    click.echo(f"OK: {count(done['shards'], 'shard')}, {_human(done['bytes'])} verified")


@main.command(cls=_NegativeIndexCommand)
@click.argument("path")
@click.argument("index", type=int)
@click.option("--tokenizer", default=None, help="tokenizer.json to decode with (byte-level datasets need none).")
@click.option("--ids", is_flag=True, help="Print the token ids instead of decoding them.")
def cat(path, index, tokenizer, ids) -> None:
    """Write document INDEX of the dataset at PATH to stdout (decoded, EOS removed; a float array's values).

    INDEX counts from 0; a negative one from the end (-1: the last document).
    """
    from roxxel.data.dataset import Dataset
    from roxxel.format.layout import shard_dtype
    from roxxel.tokenizers import ByteTokenizer, check_identity, load_tokenizer, packing_tokenizer

    try:
        ds = Dataset(path).open()
        tokens = ds[index]
        row = shard_dtype(ds.dtype)
        if not row.decodes:  # an array, not text: its values, one line
            if tokenizer is not None:
                raise ValueError(
                    f"{path} holds {ds.dtype.name} arrays, not tokens: nothing to decode; drop --tokenizer"
                )
            click.echo(" ".join(str(v) for v in tokens))  # numpy's shortest repr in the stored dtype
            return
        if ids:
            click.echo(" ".join(map(str, tokens.tolist())))
            return
        kind = (ds.tokenizer or {}).get("type")
        written_as_bytes = not ds.tokenizer and row.bytes_without_tokenizer  # e.g. by the original write()
        if (tokenizer is None and kind == "bytes") or (written_as_bytes and tokenizer in (None, "bytes")):
            text = ByteTokenizer().decode_bytes(tokens)
        else:
            # The dataset's EOS id serves a tokenizer.json without a standard EOS token (packed with --eos-id).
            if tokenizer is not None:
                try:
                    tok = load_tokenizer(tokenizer, eos_id=None if tokenizer == "bytes" else ds.eos_id)
                except ValueError:  # the EOS id does not fit it: another tokenizer, which check_identity names
                    tok = load_tokenizer(tokenizer)
                check_identity(tok, ds.tokenizer, path)
            else:
                tok = packing_tokenizer(path, ds.tokenizer, ds.eos_id)
            text = tok.decode(tokens).encode("utf-8", "surrogateescape")
        # The document's exact bytes; on a terminal, a last newline so the prompt starts on a line of its own.
        newline = b"\n" if sys.stdout.isatty() and not text.endswith(b"\n") else b""
        sys.stdout.buffer.write(text + newline)
    except (OSError, ValueError, IndexError, ImportError) as e:  # ImportError: --tokenizer without `tokenizers`
        _fail(e)


main.add_command(_LazyPlot())

if __name__ == "__main__":
    main()
