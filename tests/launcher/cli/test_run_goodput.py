"""`roxxel-launch status` shows a run's goodput totals across its attempts (roxxel_launch.cli.run_goodput).

End to end: a local job whose Trainer logs them (roxxel.train.callbacks.Goodput) is preempted
once, restarted by the supervisor and finishes; status then reads its metrics file and its
newest checkpoint's run record, written by real Orbax saves. A job on the simulated cluster
whose checkpoint_dir is on the GCS emulator; and the one line for what cannot be read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch.backends.base import BackendError, JobState, JobStatus
from roxxel_launch.backends.local import backend as L
from roxxel_launch.cli import cli
from roxxel_launch.cli import run_goodput as R
from roxxel_launch.goodput_read import GoodputReading, from_checkpoints, from_metrics_file
from roxxel_launch.goodput_totals import GoodputTotals

from support.k8s_fake_server import FakeKubernetes, use_cluster
from support.paths import REPO
from support.specs import spec_dict

TIMEOUT = 300

PROGRAM = textwrap.dedent(
    """
    import os
    import sys

    sys.path.insert(0, {tests!r})
    from support.lm import loss_fn, make_dataset, make_model

    from roxxel import Curriculum, Phase
    from roxxel.train import Cadence, Checkpointer, Logger, Trainer
    from roxxel.train.callbacks import Callback, Goodput

    out = os.environ["OUT_DIR"]  # as ROXXEL_OUTPUT_DIR names RUN_DIR/outputs under a container runtime
    os.makedirs(out, exist_ok=True)
    marker = os.path.join(out, "preempted-once")


    class PreemptOnce(Callback):
        def on_batch_end(self, step, loss):
            if step == 5 and not os.path.exists(marker):
                open(marker, "w").close()
                trainer.checkpointer.request_preemption()  # as a SIGTERM would: save step 5, exit 42


    cur = Curriculum(make_dataset(sys.argv[1]), [Phase(steps=10, global_batch_size=2, seq_len=16)], chunk_tokens=256)
    model, optimizer = make_model()
    cadence = Cadence(log_every=2, save_interval_steps=4)
    checkpointer = Checkpointer(
        os.environ["ROXXEL_CHECKPOINT_DIR"], model, optimizer, cadence=cadence, fingerprint=cur.describe(),
        run_name=os.environ["ROXXEL_RUN_NAME"],
    )
    trainer = Trainer(
        model, optimizer, cur, loss_fn, checkpointer=checkpointer, logger=Logger(out, total_steps=cur.total_steps),
        cadence=cadence, callbacks=[Goodput(out), PreemptOnce()],
    )
    trainer.run()
    """
)


def _cli(root, *args, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JOB", "TPU_"))}
    env.update({L.ROOT_ENV: str(root), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"})
    return subprocess.run(
        [sys.executable, "-m", "roxxel_launch.cli", *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.slow
def test_status_shows_the_goodput_totals_of_a_local_run_preempted_once(tmp_path):
    root, checkpoints = tmp_path / "runs", tmp_path / "ckpt"
    outputs = root / "gp" / "outputs"
    program = tmp_path / "train.py"
    program.write_text(PROGRAM.format(tests=str(REPO / "tests")))
    spec = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": "gp",
        "image": "local",
        "command": [sys.executable, str(program), str(tmp_path / "data")],
        "accelerator": {"cpu": {"hosts": 1}},
        "checkpoint_dir": str(checkpoints),
        "env": {"OUT_DIR": str(outputs)},
        "termination_grace_period": 10,
    }
    (tmp_path / "gp.yaml").write_text(yaml.safe_dump(spec))
    submitted = _cli(root, "submit", "--local", tmp_path / "gp.yaml", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert (outputs / "preempted-once").exists()

    shown = _cli(root, "status", "gp", "--local")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    goodput = next(line for line in lines if line.startswith("goodput:"))
    assert "at step 10, 2 attempts" in goodput and "% of " in goodput and "(productive " in goodput, goodput
    badput = next(line for line in lines if line.startswith("badput:"))
    assert "restart " in badput or "compile " in badput, badput

    as_json = json.loads(_cli(root, "status", "gp", "--local", "--json").stdout)
    totals = as_json["goodput"]
    assert (totals["step"], totals["attempts"], totals["source"]) == (10, 2, str(outputs / "roxxel_metrics.csv"))
    assert 0 < totals["share"] < 1 and totals["badput_s"]["restart"] > 0 and totals["badput_s"]["compile"] > 0
    assert totals["total_s"] == pytest.approx(totals["productive_s"] + sum(totals["badput_s"].values()))
    assert "goodput_error" not in as_json

    # the newest checkpoint's run record (real Orbax) holds the same run's totals
    record = from_checkpoints(str(checkpoints))
    assert record is not None and record.step == 10 and record.attempts == 2
    assert record.source == str(checkpoints / "10" / "run" / "metadata")
    assert from_metrics_file(str(outputs)).total_s >= record.total_s


@pytest.mark.slow
def test_status_of_a_cluster_job_reads_its_gs_checkpoint_dir(tmp_path, monkeypatch, gcs_emulator):
    from google.cloud import storage

    from support.gcs_emulator import TEST_BUCKET

    checkpoint_dir = f"gs://{TEST_BUCKET}/status/lm"
    spec = spec_dict(namespace="team-a", accelerator={"cpu": {"hosts": 2}}, checkpoint_dir=checkpoint_dir)
    (tmp_path / "lm.yaml").write_text(yaml.safe_dump(spec))
    with FakeKubernetes(namespace="team-a") as server:
        use_cluster(server, tmp_path, monkeypatch)
        assert CliRunner().invoke(cli, ["submit", str(tmp_path / "lm.yaml")]).exit_code == 0
        shown = CliRunner().invoke(cli, ["status", "lm"]).output
        assert "goodput:    not read: no Google credentials to read " + checkpoint_dir in shown, shown

        for key, value in gcs_emulator.items():
            monkeypatch.setenv(key, value)
        record = {"step": 40, "metrics": {**_TOTALS, "badput_restart_s": 30.0}, "saved_at": "2026-01-02T00:00:00+00:00"}
        storage.Client().bucket(TEST_BUCKET).blob("status/lm/40/run/metadata").upload_from_string(json.dumps(record))
        shown = CliRunner().invoke(cli, ["status", "lm"]).output
        assert "goodput:    25.0% of 2m 00s (productive 30s), at step 40, 2 attempts\n" in shown, shown
        assert "badput:     restart 30s\n" in shown
        as_json = json.loads(CliRunner().invoke(cli, ["status", "lm", "--json"]).output)
        assert as_json["goodput"]["source"] == f"{checkpoint_dir}/40/run/metadata"


_TOTALS = {"goodput": 0.25, "goodput_total_s": 120.0, "goodput_productive_s": 30.0, "goodput_attempts": 2}


class _Cluster:
    """A backend that has a stored spec (the Kubernetes backend's ``stored_spec``)."""

    def __init__(self, answer):
        self.answer = answer

    def stored_spec(self, name):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _job(**fields) -> JobStatus:
    return JobStatus(name="lm", state=JobState.RUNNING, processes=2, **fields)


class _Spec:
    def __init__(self, checkpoint_dir):
        self.checkpoint_dir = checkpoint_dir


def test_a_cluster_job_whose_checkpoints_are_on_its_volumes_says_so_in_one_line():
    reading = R.job_goodput(_Cluster(_Spec("/mnt/ckpt/lm")), _job())
    assert reading.problem.startswith("checkpoint_dir /mnt/ckpt/lm is on the job's volumes, not on this machine")
    assert R.goodput_lines(reading) == [f"goodput:    not read: {reading.problem}"]
    assert R.job_goodput(_Cluster(_Spec(None)), _job()) == GoodputReading()
    assert R.job_goodput(_Cluster(None), _job()) == GoodputReading()  # no stored spec
    assert R.job_goodput(object(), _job()) == GoodputReading()  # a backend that stores none
    refused = R.job_goodput(_Cluster(BackendError("JobSet lm: its annotation is not a valid job spec")), _job())
    assert refused.problem == "JobSet lm: its annotation is not a valid job spec"


def test_a_local_run_whose_spec_cannot_be_read_says_so_in_one_line(tmp_path):
    reading = R.job_goodput(None, _job(run_dir=str(tmp_path)))
    assert reading.problem.startswith(f"the run's spec in {tmp_path} cannot be read (")
    assert "\n" not in R.goodput_lines(reading)[0]


def test_a_local_runs_relative_checkpoint_dir_is_the_workers_working_directorys(tmp_path):
    (tmp_path / "work" / "ckpt" / "6" / "run").mkdir(parents=True)
    (tmp_path / "work" / "ckpt" / "6" / "run" / "metadata").write_text(json.dumps({"step": 6, "metrics": _TOTALS}))
    run_dir = tmp_path / "runs" / "lm"
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(json.dumps({"name": "lm", "checkpoint_dir": "ckpt"}))
    (run_dir / "launch.json").write_text(json.dumps({"cwd": str(tmp_path / "work")}))
    totals = R.job_goodput(None, _job(run_dir=str(run_dir))).totals
    assert totals is not None and totals.step == 6


def test_status_json_has_the_totals_or_null_and_the_reason():
    totals = GoodputTotals.from_metrics(_TOTALS, 3, "record")
    assert R.goodput_json(GoodputReading(totals)) == {"goodput": totals.as_json()}
    assert R.goodput_json(GoodputReading()) == {"goodput": None}
    assert R.goodput_json(GoodputReading(problem="why")) == {"goodput": None, "goodput_error": "why"}
    assert R.goodput_lines(GoodputReading()) == []
