"""Where ``roxxel-launch status`` finds a run's goodput totals, and how it reads them: no JAX,
no Orbax, a bounded wait, and a one-line reason instead of a traceback.

Two places hold them (see :mod:`.goodput_totals`):

- the run's metrics file, ``<output_dir>/roxxel_metrics.csv`` (the Logger's wide CSV:
  ``step,wall_time,<metric>,...``, one row per logged window): its last row with
  ``goodput_total_s``, the newest totals;
- the newest checkpoint of ``checkpoint_dir``: ``<checkpoint_dir>/<step>/run/metadata``,
  the step's run record (``roxxel.train.checkpoint.record``), which Orbax's JSON handler
  writes as plain JSON: its ``metrics`` are the window metrics the step was saved with, its
  ``saved_at`` the save's time. A local directory is read as files; ``gs://bucket/prefix``
  through ``google-cloud-storage`` (credentials as ``gcloud auth application-default
  login`` leaves them; ``STORAGE_EMULATOR_HOST`` points it at an emulator).

The newer of the two (by step; the metrics file on a tie) is shown.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from roxxel_launch.goodput_totals import TOTAL_S, GoodputTotals

METRICS_CSV = "roxxel_metrics.csv"
"""The Logger's metrics file (``roxxel.train.metrics_file.METRICS_CSV``)."""
RUN_RECORD = "run/metadata"
"""A step's run record under its directory: the ``run`` item (``roxxel.train.checkpoint.record.RUN_ITEM``)
as Orbax's ``JsonCheckpointHandler`` names its file."""
TAIL_BYTES = 256 * 1024
"""Bytes at the end of a metrics file read first for its newest totals (hundreds of rows)."""
STEPS_TRIED = 3
"""The newest steps whose record is looked for (a step still being written has none yet)."""
TIMEOUT_S = 10.0
"""Seconds the object store may take, retries included, before status gives up on it."""


class GoodputUnreadable(Exception):
    """A place that may hold the totals could not be read; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class GoodputReading:
    """What status found. ``totals`` None and ``problem`` "": nothing reported yet.

    Attributes:
        totals: the newest totals, or None.
        problem: why they could not be read (one line per place, joined by "; "), or "".
    """

    totals: GoodputTotals | None = None
    problem: str = ""


def read_goodput(checkpoint_dir: str | None, output_dir: str | None) -> GoodputReading:
    """The newest goodput totals of a run whose checkpoints are in ``checkpoint_dir`` (a local
    path or ``gs://bucket/prefix``) and whose metrics file is in ``output_dir`` (local);
    either may be None. Never raises for what it finds (or cannot reach) there."""
    found: list[GoodputTotals] = []
    problems: list[str] = []
    for read, where in ((from_metrics_file, output_dir), (from_checkpoints, checkpoint_dir)):
        if not where:
            continue
        try:
            totals = read(where)
        except GoodputUnreadable as err:
            problems.append(str(err))
            continue
        if totals is not None:
            found.append(totals)
    if found:
        return GoodputReading(max(found, key=lambda t: t.step))  # a tie keeps the metrics file's
    return GoodputReading(problem="; ".join(problems))


# ----------------------------------------------------------------------------- metrics file


def from_metrics_file(output_dir: str) -> GoodputTotals | None:
    """The totals of the last row of ``output_dir``'s metrics file that has them; None when
    there is no such file or row.

    Raises:
        GoodputUnreadable: the file cannot be opened or is not a metrics file.
    """
    path = os.path.join(output_dir, METRICS_CSV)
    try:
        header, row = _last_row_with(path, TOTAL_S)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise GoodputUnreadable(f"{path}: {_reason(err)}") from err
    if header[:2] != ["step", "wall_time"]:
        raise GoodputUnreadable(f"{path} is not a roxxel metrics file (its header starts {header[:2]})")
    if row is None:
        return None
    values = {name: cell for name, cell in zip(header[2:], row[2:]) if cell}
    try:
        step, when = int(row[0]), _iso(float(row[1]))
    except ValueError as err:
        raise GoodputUnreadable(f"{path}, row {row[:2]}: {err}") from err
    return GoodputTotals.from_metrics(values, step, path, when)


def _last_row_with(path: str, column: str) -> tuple[list[str], list[str] | None]:
    """(header, the last whole row with a value in ``column``, or None).

    The rows are looked for in the file's last :data:`TAIL_BYTES` first (the newest: a long
    run's file holds 100k rows, tens of MB), then, when none there has the value, in all of it.
    A last line without its newline is a row still being written, and left out.
    """
    with open(path, "rb") as f:
        header = _parse(f.readline())
        if column not in header:
            return header, None
        index = header.index(column)
        start, size = f.tell(), os.fstat(f.fileno()).st_size
        tail = max(start, size - TAIL_BYTES)
        row = _last_with(_rows_from(f, tail, cut=tail > start), index)
        if row is None and tail > start:
            row = _last_with(_rows_from(f, start, cut=False), index)
    return header, row


def _rows_from(f: BinaryIO, offset: int, *, cut: bool) -> Iterator[list[str]]:
    """The whole rows from byte ``offset`` on (``cut``: the first line began before it)."""
    f.seek(offset)
    if cut:
        f.readline()
    yield from csv.reader(raw.decode("utf-8") for raw in f if raw.endswith(b"\n"))


def _last_with(rows: Iterator[list[str]], index: int) -> list[str] | None:
    last = None
    for row in rows:
        if index < len(row) and row[index]:
            last = row
    return last


def _parse(raw: bytes) -> list[str]:
    return next(csv.reader([raw.decode("utf-8")]), [])


def _iso(unix_seconds: float) -> str:
    return datetime.datetime.fromtimestamp(unix_seconds, datetime.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------- checkpoints


def from_checkpoints(checkpoint_dir: str) -> GoodputTotals | None:
    """The totals in the run record of the newest step of ``checkpoint_dir`` that has one;
    None when there is no step yet, or its record holds none (no Goodput callback).

    Raises:
        GoodputUnreadable: the directory or the object store cannot be read.
    """
    store: _Store = _GcsStore(checkpoint_dir) if checkpoint_dir.startswith("gs://") else _LocalStore(checkpoint_dir)
    damaged = ""
    for step in sorted(store.steps(), reverse=True)[:STEPS_TRIED]:
        text = store.record(step)
        if text is None:
            continue
        try:
            record = json.loads(text)
        except ValueError as err:  # the next older step may be whole
            damaged = f"{store.name(step)} is not JSON ({err})"
            continue
        if not isinstance(record, dict):
            damaged = f"{store.name(step)} is not a JSON object"
            continue
        return _totals_of(record, step, store.name(step))
    if damaged:
        raise GoodputUnreadable(damaged)
    return None


def _totals_of(record: dict[str, Any], step: int, source: str) -> GoodputTotals | None:
    metrics = record.get("metrics")
    if not isinstance(metrics, dict):
        return None
    saved = record.get("step")
    return GoodputTotals.from_metrics(
        metrics, saved if isinstance(saved, int) else step, source, record.get("saved_at") or None
    )


class _Store:
    """A checkpoint directory's step names and run records."""

    def steps(self) -> list[int]:
        raise NotImplementedError

    def record(self, step: int) -> str | None:
        """The step's run record, or None when it has none (yet)."""
        raise NotImplementedError

    def name(self, step: int) -> str:
        raise NotImplementedError


class _LocalStore(_Store):
    def __init__(self, directory: str) -> None:
        self.directory = directory

    def steps(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []  # no save yet
        except OSError as err:
            raise GoodputUnreadable(f"{self.directory}: {_reason(err)}") from err
        # A step being written is <step>.orbax-checkpoint-tmp-*: only whole names are steps.
        return [int(n) for n in names if n.isdigit()]

    def record(self, step: int) -> str | None:
        path = self.name(step)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as err:
            raise GoodputUnreadable(f"{path}: {_reason(err)}") from err

    def name(self, step: int) -> str:
        return os.path.join(self.directory, str(step), RUN_RECORD)


class _GcsStore(_Store):
    """``gs://bucket/prefix`` through google-cloud-storage, each call bounded by :data:`TIMEOUT_S`."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.bucket_name, _, prefix = self.url[len("gs://") :].partition("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self._bucket: Any = None

    def _call(self, what: str, call):
        """``call()``, its failures as :class:`GoodputUnreadable` naming ``what`` and the fix."""
        try:
            from google.api_core import exceptions
            from google.auth.exceptions import DefaultCredentialsError
        except ImportError as err:
            raise GoodputUnreadable(f"reading {self.url} needs google-cloud-storage ({err})") from err
        try:
            return call()
        except DefaultCredentialsError as err:
            raise GoodputUnreadable(
                f"no Google credentials to read {self.url} (gcloud auth application-default login)"
            ) from err
        except (exceptions.Forbidden, exceptions.Unauthorized) as err:
            raise GoodputUnreadable(
                f"{what}: permission denied (needs storage.objects.list and get on gs://{self.bucket_name})"
            ) from err
        except exceptions.NotFound as err:
            raise GoodputUnreadable(f"{what}: not found ({_reason(err)})") from err
        except (exceptions.GoogleAPIError, OSError, ValueError) as err:
            raise GoodputUnreadable(f"{what}: object storage not reachable ({_reason(err)})") from err

    def _bounded(self) -> dict[str, Any]:
        from google.cloud.storage.retry import DEFAULT_RETRY

        return {"retry": DEFAULT_RETRY.with_timeout(TIMEOUT_S), "timeout": TIMEOUT_S}

    def _open(self) -> Any:
        if self._bucket is None:
            if not credentials_at_hand():
                raise GoodputUnreadable(
                    f"no Google credentials to read {self.url} (gcloud auth application-default login)"
                )
            try:
                from google.cloud import storage
            except ImportError as err:  # a dependency of roxxel's base install; said, not raised
                raise GoodputUnreadable(f"reading {self.url} needs google-cloud-storage ({err})") from err
            self._bucket = self._call(self.url, lambda: storage.Client().bucket(self.bucket_name))
        return self._bucket

    def steps(self) -> list[int]:
        bucket = self._open()

        def listed() -> list[str]:
            pages = bucket.list_blobs(prefix=self.prefix, delimiter="/", **self._bounded())
            for _ in pages:  # the prefixes come with the pages
                pass
            return list(pages.prefixes)

        names = [p[len(self.prefix) :].rstrip("/") for p in self._call(self.url, listed)]
        return [int(n) for n in names if n.isdigit()]

    def record(self, step: int) -> str | None:
        from google.api_core import exceptions

        blob = self._open().blob(f"{self.prefix}{step}/{RUN_RECORD}")

        def read() -> str | None:
            try:
                return blob.download_as_bytes(**self._bounded()).decode("utf-8", errors="replace")
            except exceptions.NotFound:
                return None

        return self._call(self.name(step), read)

    def name(self, step: int) -> str:
        return f"{self.url}/{step}/{RUN_RECORD}"


GCE_PRODUCT_NAME_FILE = "/sys/class/dmi/id/product_name"
"""Where Linux shows the SMBIOS product name: "Google Compute Engine" on Google's VMs (as
google-auth's ``detect_gce_residency_linux`` reads it)."""


def credentials_at_hand(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether google-auth's Application Default Credentials can come without a network probe.

    google-auth looks in this order (``google.auth.default``): ``GOOGLE_APPLICATION_CREDENTIALS``,
    gcloud's ``application_default_credentials.json`` (in ``$CLOUDSDK_CONFIG`` or
    ``~/.config/gcloud``), then the GCE metadata server, which it first pings (3 tries of 3 s
    off Google Cloud) before reading the SMBIOS product name. Here the product name is read
    first (a Google Compute Engine VM, a GKE node or pod), so a workstation without
    credentials hears "no credentials" at once instead of after the pings. An emulator
    (``STORAGE_EMULATOR_HOST``) or a metadata server named in ``GCE_METADATA_HOST`` counts too.
    """
    if any(environ.get(k) for k in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "GCE_METADATA_HOST")):
        return True
    config = environ.get("CLOUDSDK_CONFIG") or os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    if os.path.exists(os.path.join(config, "application_default_credentials.json")):
        return True
    try:
        with open(GCE_PRODUCT_NAME_FILE, encoding="utf-8") as f:
            return f.read().startswith("Google")
    except OSError:
        return False


def _reason(err: BaseException) -> str:
    """An error's words on one line (an OSError's strerror, else its text)."""
    text = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return " ".join(str(text).split())
