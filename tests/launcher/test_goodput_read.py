"""Where status finds a run's goodput totals and how it reads them (roxxel_launch.goodput_read):
run records and metrics files written here in the layout the Trainer writes (the real layout is
checked end to end in test_run_goodput.py), a local directory and gs:// on the GCS emulator,
and one line for each place that cannot be read."""

from __future__ import annotations

import json
import socket

import pytest

from roxxel.train.checkpoint.record import RUN_ITEM
from roxxel.train.metrics_file import METRICS_CSV, MetricsCsv
from roxxel_launch import goodput_read as G

TOTALS = {"goodput": 0.5, "goodput_total_s": 20.0, "goodput_productive_s": 10.0, "goodput_attempts": 2}


def _record(directory, step, metrics=TOTALS, **fields):
    path = directory / str(step) / "run" / "metadata"
    path.parent.mkdir(parents=True)
    record = {"format": 1, "step": step, "metrics": metrics, "saved_at": "2026-01-01T00:00:00+00:00", **fields}
    path.write_text(json.dumps(record))
    return path


def test_the_names_are_the_trainers():
    assert G.METRICS_CSV == METRICS_CSV and G.RUN_RECORD.split("/")[0] == RUN_ITEM


def test_the_newest_step_with_a_record_is_read(tmp_path):
    _record(tmp_path, 4, {**TOTALS, "goodput_total_s": 8.0})
    newest = _record(tmp_path, 12)
    (tmp_path / "16.orbax-checkpoint-tmp-1733").mkdir()  # a step being written: not a step yet
    (tmp_path / "20" / "state").mkdir(parents=True)  # a step whose record is not written yet
    (tmp_path / "roxxel_run.json").write_text("{}")
    totals = G.from_checkpoints(str(tmp_path))
    assert totals is not None
    assert (totals.step, totals.total_s, totals.attempts) == (12, 20.0, 2)
    assert (totals.source, totals.as_of) == (str(newest), "2026-01-01T00:00:00+00:00")


def test_no_step_or_no_goodput_is_nothing_to_say(tmp_path):
    assert G.from_checkpoints(str(tmp_path / "not-yet")) is None
    assert G.from_checkpoints(str(tmp_path)) is None
    _record(tmp_path, 3, {"loss": 1.0})  # a run without the Goodput callback
    assert G.from_checkpoints(str(tmp_path)) is None
    assert G.read_goodput(str(tmp_path), str(tmp_path)) == G.GoodputReading()


def test_a_damaged_newest_record_falls_back_to_the_step_before(tmp_path):
    _record(tmp_path, 2)
    _record(tmp_path, 5).write_text('{"step": 5, "metr')
    assert G.from_checkpoints(str(tmp_path)).step == 2
    (tmp_path / "2" / "run" / "metadata").write_text("[1, 2]")
    with pytest.raises(G.GoodputUnreadable, match=r"2/run/metadata is not a JSON object"):
        G.from_checkpoints(str(tmp_path))


def test_a_directory_that_cannot_be_listed_is_one_line(tmp_path):
    not_a_dir = tmp_path / "ckpt"
    not_a_dir.write_text("")
    reading = G.read_goodput(str(not_a_dir), None)
    assert reading == G.GoodputReading(problem=f"{not_a_dir}: Not a directory")


def test_the_metrics_files_last_row_with_totals_is_read(tmp_path):
    metrics = MetricsCsv(str(tmp_path / METRICS_CSV))  # the Logger's writer
    metrics.write(10, 1767225600.0, {"loss": 2.0, **TOTALS})
    metrics.write(20, 1767225660.0, {"loss": 1.5, **TOTALS, "goodput_total_s": 30.0, "badput_restart_s": 4.0})
    metrics.write(20, 1767225661.0, {"eval_loss": 1.7})  # an evaluation's row: no totals
    metrics.close()
    totals = G.from_metrics_file(str(tmp_path))
    assert (totals.step, totals.total_s, dict(totals.badput_s)) == (20, 30.0, {"restart": 4.0})
    assert (totals.source, totals.as_of) == (str(tmp_path / METRICS_CSV), "2026-01-01T00:01:00+00:00")
    assert G.from_metrics_file(str(tmp_path / "elsewhere")) is None


def test_a_file_that_is_no_metrics_file_is_one_line(tmp_path):
    (tmp_path / METRICS_CSV).write_text("a,b\n1,2\n")
    with pytest.raises(G.GoodputUnreadable, match="is not a roxxel metrics file"):
        G.from_metrics_file(str(tmp_path))
    (tmp_path / METRICS_CSV).write_text("step,wall_time,goodput_total_s,goodput_productive_s\nten,1.0,2.0,1.0\n")
    with pytest.raises(G.GoodputUnreadable, match=r"row \['ten', '1.0'\]: invalid literal"):
        G.from_metrics_file(str(tmp_path))


def test_the_newest_rows_are_read_first_and_a_row_being_written_is_left_out(tmp_path, monkeypatch):
    header = "step,wall_time,loss,goodput_total_s,goodput_productive_s\n"
    rows = [f"{step},1767225600.0,1.0,{step}.0,1.0\n" for step in range(1, 200)]
    evals = [f"{step},1767225600.0,0.5,,\n" for step in range(200, 400)]  # no totals in the tail
    (tmp_path / METRICS_CSV).write_text(header + "".join(rows + evals) + "400,1767225600.0,0.4,400.")
    monkeypatch.setattr(G, "TAIL_BYTES", 1000)  # the tail holds evaluation rows only: read it all
    assert G.from_metrics_file(str(tmp_path)).step == 199
    (tmp_path / METRICS_CSV).write_text(header + "".join(rows) + "200,1767225600.0,0.4,20")  # torn
    assert G.from_metrics_file(str(tmp_path)).step == 199


def test_the_newer_place_wins_and_a_tie_goes_to_the_metrics_file(tmp_path):
    checkpoints, outputs = tmp_path / "ckpt", tmp_path / "out"
    outputs.mkdir()
    _record(checkpoints, 8)
    (outputs / METRICS_CSV).write_text("step,wall_time,goodput_total_s,goodput_productive_s\n6,1767225600.0,9.0,3.0\n")
    assert G.read_goodput(str(checkpoints), str(outputs)).totals.step == 8
    _record(checkpoints, 4)
    (outputs / METRICS_CSV).write_text("step,wall_time,goodput_total_s,goodput_productive_s\n8,1767225600.0,21.0,3.0\n")
    assert G.read_goodput(str(checkpoints), str(outputs)).totals.total_s == 21.0
    # found in one place, unreadable in the other: the totals, no complaint
    (outputs / METRICS_CSV).write_text("x\n")
    assert G.read_goodput(str(checkpoints), str(outputs)) == G.GoodputReading(G.from_checkpoints(str(checkpoints)))


def test_credentials_at_hand_needs_no_network(tmp_path, monkeypatch):
    home = {"HOME": str(tmp_path), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}
    monkeypatch.setattr(G, "GCE_PRODUCT_NAME_FILE", str(tmp_path / "product_name"))
    assert not G.credentials_at_hand(home)
    assert G.credentials_at_hand({**home, "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"})
    (tmp_path / "gcloud").mkdir()
    (tmp_path / "gcloud" / "application_default_credentials.json").write_text("{}")
    assert G.credentials_at_hand(home)
    (tmp_path / "gcloud" / "application_default_credentials.json").unlink()
    (tmp_path / "product_name").write_text("Google Compute Engine\n")
    assert G.credentials_at_hand(home)


def test_gs_without_credentials_is_one_line_at_once(tmp_path, monkeypatch):
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "GCE_METADATA_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    monkeypatch.setattr(G, "GCE_PRODUCT_NAME_FILE", str(tmp_path / "product_name"))
    reading = G.read_goodput("gs://bucket/run", None)
    assert reading.problem == "no Google credentials to read gs://bucket/run (gcloud auth application-default login)"
    # credentials named but missing: google-auth's own refusal, in the same words
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    assert G.read_goodput("gs://bucket/run", None).problem == reading.problem


def test_gs_that_cannot_be_reached_is_one_line_within_the_bound(monkeypatch):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(G, "TIMEOUT_S", 0.5)
    reading = G.read_goodput("gs://bucket/run", None)
    assert reading.totals is None
    assert reading.problem.startswith("gs://bucket/run: object storage not reachable (")


def test_gs_records_are_read_from_object_storage(gcs_emulator, monkeypatch):
    from google.cloud import storage

    from support.gcs_emulator import TEST_BUCKET

    for key, value in gcs_emulator.items():
        monkeypatch.setenv(key, value)
    bucket = storage.Client().bucket(TEST_BUCKET)
    for step, total in ((3, 12.0), (7, 30.0)):
        record = {
            "step": step,
            "metrics": {**TOTALS, "goodput_total_s": total},
            "saved_at": "2026-01-02T00:00:00+00:00",
        }
        bucket.blob(f"runs/lm/{step}/run/metadata").upload_from_string(json.dumps(record))
    bucket.blob("runs/lm/9/state/manifest.ocdbt").upload_from_string("x")  # no record yet
    bucket.blob("runs/lm/roxxel_run.json").upload_from_string("{}")
    totals = G.read_goodput(f"gs://{TEST_BUCKET}/runs/lm/", None).totals
    assert totals is not None and (totals.step, totals.total_s) == (7, 30.0)
    assert totals.source == f"gs://{TEST_BUCKET}/runs/lm/7/run/metadata"
    assert G.read_goodput(f"gs://{TEST_BUCKET}/runs/none", None) == G.GoodputReading()
    missing = G.read_goodput("gs://no-such-bucket-here/run", None)
    assert missing.totals is None and missing.problem.startswith("gs://no-such-bucket-here/run: not found"), missing


def test_gs_without_google_cloud_storage_is_one_line(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def without_storage(name, *args, **kwargs):
        if name.startswith("google.cloud") or name.startswith("google.api_core"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setattr(builtins, "__import__", without_storage)
    reading = G.read_goodput("gs://bucket/run", None)
    assert reading.problem.startswith("reading gs://bucket/run needs google-cloud-storage (No module named")
