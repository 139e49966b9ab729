"""The main job end to end: the LM example as a 2-worker local pod, preempted at a random
step by SIGTERM, restarted in place by the rendered JobSet's preemption rule, ends with
exactly the parameters of an uninterrupted run. Where network namespaces can run (root), the
uninterrupted run is the pod across hosts (`--netns`: each worker on its own network host,
reached by its pod's name) and the preempted one runs on loopback: one run checks both."""

import json
import os
import random
import signal
import subprocess
import sys

import numpy as np
import psutil
import pytest
import yaml

from roxxel_launch.backends.local import netns
from support.paths import REPO
from support.wait import wait_for

ROOT = str(REPO)
LAUNCH = [sys.executable, "-m", "roxxel_launch.cli"]
STEPS = ("16", "8")


def write_spec(tmp_path, name: str, params: str) -> str:
    spec = yaml.safe_load(open(os.path.join(ROOT, "examples/lm/job.yaml")))
    spec["name"] = name
    spec["checkpoint_dir"] = str(tmp_path / name / "checkpoints")
    spec["command"] = [
        "python",
        "examples/lm/train.py",
        "--steps",
        *STEPS,
        "--batch",
        "8",
        "4",
        "--width",
        "64",
        "--log-every",
        "1",
        "--eval-every",
        "1000",
        "--checkpoint-every",
        "1000",
        "--run-dir",
        str(tmp_path / name / "logs"),
        "--save-params",
        params,
    ]
    # Every program into the job's compilation cache (CHECKPOINT_DIR/compilation-cache by
    # default), however fast it compiles: the test counts the train step's entries.
    spec["env"] = {**(spec.get("env") or {}), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def train_step_programs(tmp_path, name: str) -> list[str]:
    """The train step's entries in the job's persistent compilation cache (JAX names them
    ``jit_<function>-<key>-cache``)."""
    cache = tmp_path / name / "checkpoints" / "compilation-cache"
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("jit_train_step-")) if cache.is_dir() else []


def launch(tmp_path, *args, check=None, timeout=600):
    env = dict(os.environ, ROXXEL_LOCAL_ROOT=str(tmp_path / "local"))
    out = subprocess.run(LAUNCH + list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check is not None:
        assert out.returncode == check, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def worker_log(tmp_path, name, i=0):
    path = tmp_path / "local" / name / f"worker-{i}.log"
    return path.read_text() if path.exists() else ""


@pytest.mark.slow
def test_preempted_at_a_random_step_then_resumed_equals_uninterrupted(tmp_path, lm_data):
    data = str(lm_data)
    total = sum(map(int, STEPS))

    # The uninterrupted run, each worker on its own network host where that can run.
    ref = write_spec(tmp_path, "ref", str(tmp_path / "ref.npz"))
    across_hosts = netns.unavailable_reason() is None
    launch(tmp_path, "submit", ref, "--local", "--data-dir", data, *(["--netns"] if across_hosts else []), check=0)
    if across_hosts:
        record = json.loads((tmp_path / "local" / "ref" / "status.json").read_text())["attempts"][0]
        assert record["coordinator_address"] == "ref-slice-0-0.ref:8476"  # the manifest's name for process 0
        assert [h["hostname"] for h in record["hosts"]] == ["ref-slice-0-0", "ref-slice-0-1"]

    # The same job, preempted: SIGTERM to one worker's process at a random step.
    job = write_spec(tmp_path, "job", str(tmp_path / "job.npz"))
    launch(tmp_path, "submit", job, "--local", "--detach", "--data-dir", data, check=0)
    # The processes agree on a sync step some steps after the notice (as the coordination service
    # relays it); one that falls on the last step ends the run normally (nothing left to restart),
    # so the notice comes in the first half.
    at = random.Random().randint(2, total // 2)
    wait_for(
        lambda: f"step {at}/{total}" in worker_log(tmp_path, "job"),
        300,
        lambda: f"step {at}/{total} in the log:\n{worker_log(tmp_path, 'job')[-3000:]}",
    )
    status = json.loads((tmp_path / "local" / "job" / "status.json").read_text())
    cache = tmp_path / "job" / "checkpoints" / "compilation-cache"
    compiled_in_attempt_1 = {n: (cache / n).stat().st_mtime_ns for n in train_step_programs(tmp_path, "job")}
    assert len(compiled_in_attempt_1) == 1, compiled_in_attempt_1  # phase 1's step, before the notice
    victim = psutil.Process(status["pids"][1]).children()[0]  # worker 1's training program
    victim.send_signal(signal.SIGTERM)
    # Exit 42 fails the child Job (podFailurePolicy) and the JobSet's preemption rule
    # restarts the gang in place, without counting against max_restarts.
    done = launch(tmp_path, "wait", "job", "--local")
    assert done.returncode == 0, done.stdout + done.stderr + worker_log(tmp_path, "job")[-3000:]
    status = json.loads((tmp_path / "local" / "job" / "status.json").read_text())
    assert (status["restarts"], status["restarts_counted"]) == (1, 0)
    assert status["attempts"][0]["decision"]["rule"] == "preemption"
    saved = [int(n) for n in os.listdir(tmp_path / "job" / "checkpoints") if n.isdigit()]
    preempted = [n for n in saved if at <= n < total]
    assert len(preempted) == 1, (at, saved)  # both processes saved one agreed step
    assert f"training steps {preempted[0]}..{total}" in worker_log(tmp_path, "job")  # restored at the saved step
    # The job's compilation cache (CHECKPOINT_DIR/compilation-cache) outlived attempt 1: the
    # train step it compiled before the notice is still there, unwritten since. Resumed in the
    # first phase, the resumed attempt compiled no train step of that phase again: one program
    # per phase, as the uninterrupted run. (Resumed in the second phase it compiles that
    # phase's step anew: the step compiled after the first phase's steps is another program
    # than the one compiled from restored state, a Trainer matter noted in the issues.)
    assert len(train_step_programs(tmp_path, "ref")) == len(STEPS), train_step_programs(tmp_path, "ref")
    after = train_step_programs(tmp_path, "job")
    cache = tmp_path / "job" / "checkpoints" / "compilation-cache"
    assert {n: (cache / n).stat().st_mtime_ns for n in compiled_in_attempt_1 if n in after} == compiled_in_attempt_1
    if preempted[0] < int(STEPS[0]):
        assert len(after) == len(STEPS), after
    want, got = np.load(tmp_path / "ref.npz"), np.load(tmp_path / "job.npz")
    assert sorted(want.files) == sorted(got.files)
    for k in want.files:
        assert np.array_equal(want[k], got[k]), k
