"""The main job's rendered pods run as containers of the worker image
(``roxxel-launch submit --local --runtime podman``, and ``--runtime docker`` where its daemon
answers: the ``runtime`` fixture; the container tier).

No Kubernetes API server can run here: the local backend runs the rendered JobSet's pods as
the kubelet would (their env, command, securityContext, emptyDirs, hostnames and DNS names;
see roxxel_launch.backends.local.containers) and applies the JobSet's policies itself. The
check: the LM example on 2 pods, one container SIGTERMed as the kubelet stops a pod (to its
PID 1) at a step, both save the agreed step and exit 42, the JobSet's preemption rule
restarts the gang in place, and the final parameters equal, bit for bit, those of the same
job run as processes; nothing of the run is left in the engine afterwards. (podman's
`kube play` referee below runs on podman only.)
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from roxxel import exit_codes
from roxxel_launch.backends.local import containers
from support.container_job import TOTAL, launch, log, podman, status, write_spec
from support.image import IMAGE, PODMAN, engine, podman_env
from support.paths import REPO
from support.wait import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def process_run(lm_data, tmp_path_factory) -> str:
    """The final parameters of the same job run as processes: what every runtime's must equal."""
    tmp_path = tmp_path_factory.mktemp("processes")
    reference, params = write_spec(tmp_path, "proc")
    launch(tmp_path, "submit", reference, "--local", "--data-dir", str(lm_data))
    return params


def test_sigterm_to_a_container_ends_in_an_agreed_save_and_a_resume_bitwise_equal_to_processes(
    runtime, lm_data, process_run, tmp_path
):
    job, params = write_spec(tmp_path, "ctr")
    launch(tmp_path, "submit", job, "--local", "--runtime", runtime, "--detach", "--data-dir", str(lm_data))
    run_label = f"{containers.RUN_LABEL}={containers.run_id(tmp_path / 'local' / 'ctr')}"
    wait_for(
        lambda: f"step 3/{TOTAL}" in log(tmp_path, "ctr"),
        400,
        lambda: f"step 3/{TOTAL} in worker 0's log:\n{log(tmp_path, 'ctr')[-3000:]}",
    )
    names = podman("ps", "--filter", f"label={run_label}", "--format", "{{.Names}}", runtime=runtime).split()
    victim = next(n for n in names if n.endswith("-1"))
    # The kubelet's stop: SIGTERM to the container's PID 1 (roxxel-worker under the pod's command).
    inspect = "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}"
    assert podman("inspect", "--format", inspect, victim, runtime=runtime).split() == ["10001:10001", "true"]
    killed = engine(runtime, "kill", "--signal", "TERM", victim)
    assert killed.returncode == 0, killed.stderr
    wait_for(
        lambda: status(tmp_path, "ctr").get("state") in ("Succeeded", "Failed", "Preempted"),
        600,
        lambda: f"the job to end: {status(tmp_path, 'ctr')}\n{log(tmp_path, 'ctr')[-3000:]}",
    )

    record = status(tmp_path, "ctr")
    assert (record["state"], record["restarts"]) == ("Succeeded", 1), record
    first, second = record["attempts"]
    attempt_1 = "\n".join(
        f"worker {i}:\n" + log(tmp_path, "ctr", i).split("===== roxxel-launch: attempt 2")[0][-2500:] for i in (0, 1)
    )
    assert first["outcome"] == "preempted" and exit_codes.PREEMPTED_EXIT_CODE in first["exit_codes"], (
        f"{json.dumps(first)}\n{attempt_1}"
    )
    assert first["coordinator_address"] == "ctr-slice-0-0.ctr:8476"  # the manifest's DNS name, not an alias
    assert "forwarding SIGTERM" in log(tmp_path, "ctr", 1).split("=====")[2]
    assert first["decision"]["rule"] == "preemption" and record["restarts_counted"] == 0, record
    saved = [int(n) for n in os.listdir(tmp_path / "ctr" / "checkpoints") if n.isdigit() and int(n) < TOTAL]
    assert len(saved) == 1 and saved[0] >= 3, saved  # both processes saved one agreed step (and the last)
    resumed = log(tmp_path, "ctr").split("===== roxxel-launch: attempt 2")[1]
    assert f"restored step {saved[0]}" in resumed and f"training steps {saved[0]}..{TOTAL}" in resumed, resumed[:3000]
    assert "(not drawn:" not in log(tmp_path, "ctr")  # the image has the tokenizer's package: a sample
    # What a process run leaves, on this machine: metrics and TensorBoard events in the run's
    # outputs directory, and the last lines name it (before: the pod's tmpfs $HOME, gone).
    outputs = tmp_path / "local" / "ctr" / "outputs"
    assert (outputs / "roxxel_metrics.csv").is_file() and any((outputs / "tensorboard").iterdir())
    last = log(tmp_path, "ctr").splitlines()[-5:]
    board = next(line for line in last if line.startswith("TensorBoard"))
    assert f"--logdir {outputs / 'tensorboard'}" in board, last
    assert any(line.startswith("loss plot: ") and str(outputs) in line for line in last), last
    want, got = np.load(process_run), np.load(params)
    assert sorted(want.files) == sorted(got.files)
    for key in want.files:
        assert np.array_equal(want[key], got[key]), key
    # Every container and network of the run is gone.
    assert not podman("ps", "--all", "--quiet", "--filter", f"label={run_label}", runtime=runtime).split()
    assert not podman("network", "ls", "--quiet", "--filter", f"label={run_label}", runtime=runtime).split()


def test_an_image_that_is_not_built_is_named_before_anything_starts(runtime, tmp_path):
    job, _ = write_spec(tmp_path, "noimage", image="localhost/roxxel-test/not-built:cpu")
    started = time.monotonic()
    out = launch(tmp_path, "submit", job, "--local", "--runtime", runtime, "--data-dir", str(tmp_path), check=None)
    assert out.returncode != 0 and f"not-built:cpu' is not in {runtime}'s local store" in out.stderr, out.stderr
    assert "roxxel-launch image build" in out.stderr and not (tmp_path / "local" / "noimage").exists()
    assert time.monotonic() - started < 60


# ----------------------------------------------------------------------------- podman kube play as referee

PROBE = r"""
import json, os, socket, sys
writable = []
for path in ["/", "/home/roxxel", "/opt/venv", *sys.argv[1:]]:
    try:
        with open(os.path.join(path, ".probe"), "w"):
            pass
        os.unlink(os.path.join(path, ".probe"))
        writable.append(path)
    except OSError:
        pass
print(json.dumps({"env": dict(os.environ), "ids": [os.getuid(), os.getgid(), sorted(os.getgroups())],
                  "hostname": socket.gethostname(), "cwd": os.getcwd(), "writable": writable}), flush=True)
sys.exit(42)
"""
# podman 4.3's kube play fails to read a Pod whose command holds this script as it is ("did not
# find expected '-' indicator"): both runs get it base64-encoded.
PROBE_ARGS = ["-c", f"import base64; exec(base64.b64decode({base64.b64encode(PROBE.encode()).decode()!r}))"]


def _as_controllers_make_it(pod) -> dict:
    """The Pod the JobSet and Job controllers would create from the rendered template, for
    `podman kube play`: the labels and annotations they add (restart attempt 0), and the
    JOB_COMPLETION_INDEX env entry the Job controller injects into an Indexed Job's pods
    (a fieldRef to the completion-index annotation). What kube play cannot take is changed and
    said here: no container ports (the pod runs with --network none), imagePullPolicy Never
    (nothing to pull from), the command replaced by the probe."""
    spec = json.loads(json.dumps(pod.spec))
    (container,) = spec["containers"]
    container.update(
        command=["python", *PROBE_ARGS, *(m["mountPath"] for m in container["volumeMounts"])], imagePullPolicy="Never"
    )
    container.pop("args", None)
    container.pop("ports", None)
    container["env"].insert(
        0,
        {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        },
    )
    annotations = {**pod.annotations, "jobset.sigs.k8s.io/restart-attempt": "0"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": spec,
        "metadata": {
            "name": pod.name,
            "labels": {**pod.labels, "jobset.sigs.k8s.io/restart-attempt": "0"},
            "annotations": annotations,
        },
    }


def test_podman_kube_play_reads_the_rendered_pod_as_the_container_runtime_runs_it(worker_image, tmp_path):
    """An independent reading of the pod template: podman's `kube play` runs the Pod the
    controllers would create from the rendered JobSet (process 1's), and the container
    runtime runs the same pod its own way; both run a probe that reports the environment,
    user and groups, hostname, working directory and writable places, then exits 42.
    Everything the manifest sets must agree: a disagreement is a bug on one side. Two were
    found, both kube play's (podman 4.3), and are checked against the Kubernetes rule
    instead: it does not expand $(VAR) or reduce $$ in env values, and its /dev/shm emptyDir
    is not writable by the pod's user. (kube play needs catatonit for its pause image;
    without it the test skips.)"""
    import shutil

    from roxxel_launch.backends import rendered_pods
    from roxxel_launch.backends.local.pods import LocalSettings
    from roxxel_launch.backends.process_plan import rendered_objects
    from roxxel_launch.spec import spec_from_dict

    if shutil.which("catatonit") is None:
        pytest.skip("podman kube play needs catatonit for its pause image (apt-get install catatonit)")
    data = yaml.safe_load((REPO / "examples/lm/job.yaml").read_text())
    data.update(image=IMAGE, checkpoint_dir=str(tmp_path / "ckpt"), env={"PROBE_REF": "$(JOBSET_NAME)-x"})
    data.pop("data")
    pod = rendered_pods.manifest_pods(rendered_objects(spec_from_dict(data)))[1]
    name = f"rxl-referee-{containers.run_id(tmp_path)}"
    play = tmp_path / "pod.yaml"
    play.write_text(yaml.safe_dump(_as_controllers_make_it(pod)))
    settings = LocalSettings(python=sys.executable, run_dir=tmp_path)
    env = containers.container_env(pod, settings, restart_attempt=0, pod_ip="127.0.0.1", base_env={})
    mounts = [m["mountPath"] for m in pod.container("worker")["volumeMounts"]]
    try:
        played = subprocess.run(
            [PODMAN, "kube", "play", "--network", "none", str(play)],
            capture_output=True,
            text=True,
            timeout=180,
            env=podman_env(),
        )
        assert played.returncode == 0, played.stderr
        theirs_name = f"{pod.name}-worker"
        subprocess.run([PODMAN, "wait", theirs_name], capture_output=True, timeout=120, env=podman_env())
        theirs = json.loads(podman("logs", theirs_name))
        their_code = podman("inspect", "--format", "{{.State.ExitCode}}", theirs_name).strip()
        ours_run = subprocess.run(
            [
                PODMAN,
                "run",
                "--name",
                name,
                "--network",
                "none",
                "--hostname",
                pod.name,
                *containers.container_options(pod, settings, env),
                "--entrypoint",
                "python",
                IMAGE,
                *PROBE_ARGS,
                *mounts,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env=podman_env(),
        )
        ours = json.loads(ours_run.stdout)
    finally:
        subprocess.run([PODMAN, "kube", "down", str(play)], capture_output=True, timeout=120, env=podman_env())
        subprocess.run([PODMAN, "rm", "--force", "--ignore", name], capture_output=True, timeout=120, env=podman_env())
    assert (their_code, ours_run.returncode) == ("42", 42)
    # podman 4.3's kube play does not implement the kubelet's $(VAR) expansion and $$ escape in
    # env values (found by this test: it passes "$$(JOBSET_NAME)-x" through as written), so
    # values with a "$" are compared with the Kubernetes rule instead: "$$(VAR_NAME)" gives
    # the literal "$(VAR_NAME)" (Kubernetes API reference, EnvVar.value). The renderer escapes
    # a spec value's $(VAR) that way, so PROBE_REF must come back as the user wrote it.
    entries = pod.container("worker")["env"] + [{"name": "JOB_COMPLETION_INDEX"}]
    plain = [e["name"] for e in entries if "$" not in e.get("value", "")]
    assert {k: theirs["env"].get(k) for k in plain} == {k: ours["env"].get(k) for k in plain}
    assert ours["env"]["PROBE_REF"] == "$(JOBSET_NAME)-x" and theirs["env"]["JOB_COMPLETION_INDEX"] == "1"
    for key in ("ids", "hostname", "cwd"):
        assert theirs[key] == ours[key], key
    # kube play mounts the Memory emptyDir at /dev/shm owned by root and not writable by the
    # pod's user (found by this test); an emptyDir is world-writable on a kubelet, as ours is.
    assert [w for w in theirs["writable"] if w != "/dev/shm"] == [w for w in ours["writable"] if w != "/dev/shm"]
    assert ours["ids"] == [10001, 10001, [10001]] and ours["hostname"] == pod.name
    assert sorted(ours["writable"]) == sorted(mounts), ours["writable"]  # every mount, nothing of the root
