"""The local backend: `roxxel-launch submit --local` runs a job spec's workers as processes.

End-to-end through the CLI (a subprocess per command) with small specs written here; the
programs the workers run are tests/support/workers/local_allreduce.py (real jax.distributed) and
tests/support/workers/local_program.py (no JAX, fast). PIDs are checked after every stop: no worker (nor
the training program it started) may be left behind.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import yaml

from roxxel import distributed
from roxxel_launch.backends.local import backend as L
from roxxel_launch.backends.base import BackendError, JobExistsError, JobNotFoundError, JobState
from roxxel_launch.spec import spec_from_dict

from support.paths import WORKERS
from support.wait import wait_for as _wait_for

ALLREDUCE = WORKERS / "local_allreduce.py"
PROGRAM = WORKERS / "local_program.py"
TIMEOUT = 120  # seconds for one CLI run (JAX's own timeouts are lower)


# ----------------------------------------------------------------------------- helpers


def _spec(name: str, hosts: int, command: list[str], **extra) -> dict:
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": name,
        "image": "local",  # never pulled by the local backend
        "command": command,
        "accelerator": {"cpu": {"hosts": hosts}},
        "termination_grace_period": 2,
    }
    data.update(extra)
    return data


def _write_spec(tmp_path: pathlib.Path, data: dict) -> pathlib.Path:
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _program_spec(tmp_path, name, hosts, mode, **extra) -> pathlib.Path:
    env = {"LOCAL_TEST_MODE": mode, **extra.pop("env", {})}
    return _write_spec(
        tmp_path,
        _spec(name, hosts, [sys.executable, str(PROGRAM)], env=env, checkpoint_dir=str(tmp_path / "ckpt"), **extra),
    )


@pytest.fixture
def root(tmp_path, monkeypatch) -> pathlib.Path:
    path = tmp_path / "runs"
    monkeypatch.setenv(L.ROOT_ENV, str(path))
    return path


def _env(root: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JOB", "TPU_"))}
    env.update({L.ROOT_ENV: str(root), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"})
    return env


def _cli(root, *args, cwd=None, timeout=TIMEOUT) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-m", "roxxel_launch.cli", *map(str, args)],
            env=_env(root),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"{err}\n{_what_the_runs_show(root)}") from None


def _what_the_runs_show(root: pathlib.Path) -> str:
    """Every run's status and worker logs (their last 40 lines), and the workers still alive:
    what a command that overran its timeout left to go on."""
    out = []
    for path in sorted(root.glob("*/status.json")) + sorted(root.glob("*/worker-*.log")):
        lines = path.read_text(errors="replace").splitlines()[-40:]
        out.append(f"--- {path.relative_to(root)}\n" + "\n".join(lines))
    alive = [
        f"{p.pid} {' '.join(p.cmdline())[:200]}"
        for p in psutil.process_iter()
        if _alive(p.pid) and any(str(root) in part for part in _environ_values(p))
    ]
    return "\n".join(out + ["--- processes of these runs still alive:", *alive])


def _environ_values(process: psutil.Process) -> list[str]:
    try:
        return list(process.environ().values())
    except (psutil.Error, OSError):
        return []


def _popen_cli(root, *args, cwd=None) -> subprocess.Popen:
    # Its own session, like a shell's foreground job: killpg() on it then acts like a
    # terminal's Ctrl-C (it reaches the CLI's process group, not the workers' groups).
    return subprocess.Popen(
        [sys.executable, "-m", "roxxel_launch.cli", *map(str, args)],
        env=_env(root),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _status(root, name) -> dict:
    return json.loads((root / name / "status.json").read_text())


def _all_worker_pids(root, name) -> set[int]:
    return {pid for attempt in _status(root, name)["attempts"] for pid in attempt["pids"]}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _assert_all_gone(pids, timeout: float = 5.0) -> None:
    """Every pid is gone (zombies waiting for a reaper count as gone)."""
    deadline = time.monotonic() + timeout
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, f"processes left behind: {alive}"


def _program_pids(tmp_path, prefix="pid-") -> set[int]:
    return {int(p.read_text()) for p in (tmp_path / "ckpt").glob(f"{prefix}*")}


# ----------------------------------------------------------------------------- the environment


def test_worker_env_is_the_rendered_pod_on_this_machine(tmp_path):
    spec = spec_from_dict(
        _spec(
            "envjob",
            3,
            ["train"],
            env={"MY_FLAG": "1"},
            checkpoint_dir="gs://bucket/ckpt",
            run_name="run-a",
            data={"pvc": {"claim": "shards"}},
        )
    )
    base = {
        "PATH": "/bin",
        "ROXXEL_PROCESS_ID": "9",
        "JOBSET_NAME": "stale",
        "TPU_WORKER_ID": "4",
        "XLA_FLAGS": "--xla_foo=1 --xla_force_host_platform_device_count=8",
        "ROXXEL_INIT_TIMEOUT": "7",
    }
    procs = L.worker_processes(spec, tmp_path, data_dir="/tmp/d", devices_per_worker=2, base_env=base)
    argv, env = procs[2]
    assert argv[1:] == ["--", "train"]
    assert (env["JOBSET_NAME"], env["JOB_COMPLETION_INDEX"]) == ("envjob", "2")  # the manifest's, not inherited
    assert "ROXXEL_PROCESS_ID" not in env and "TPU_WORKER_ID" not in env  # launcher-owned, not inherited
    assert (env["ROXXEL_RUN_NAME"], env["ROXXEL_CHECKPOINT_DIR"], env["ROXXEL_DATA_DIR"]) == (
        "run-a",
        "gs://bucket/ckpt",
        "/tmp/d",
    )  # the data volume's /data is the local directory
    assert env["MY_FLAG"] == "1" and env["ROXXEL_INIT_TIMEOUT"] == "7"
    # The launcher's own Python comes first, as the image's does in a pod.
    assert env["PATH"] == os.pathsep.join([os.path.dirname(sys.executable), "/bin"])
    assert env["JAX_PLATFORMS"] == "cpu"
    assert env["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=2"
    assert distributed.detect(env) == distributed.Detected("envjob-slice-0-0.envjob:8476", 3, 2, "jobset")

    plain = L.worker_processes(
        spec_from_dict(_spec("envjob", 1, ["train"], env={"JAX_PLATFORMS": "cuda"})), tmp_path, base_env={}
    )[0][1]
    assert plain["JAX_PLATFORMS"] == "cuda"  # set by the spec: kept
    assert "ROXXEL_CHECKPOINT_DIR" not in plain and "ROXXEL_DATA_DIR" not in plain and "XLA_FLAGS" not in plain


def test_data_dir_rule(tmp_path):
    with_data = spec_from_dict(_spec("d", 1, ["x"], data={"nfs": {"server": "10.0.0.2", "path": "/vol"}}))
    without = spec_from_dict(_spec("d", 1, ["x"]))
    (tmp_path / "shards").mkdir()
    with pytest.raises(BackendError, match="--data-dir"):
        L.resolve_data_dir(with_data, None, environ={})
    assert L.resolve_data_dir(with_data, "shards", environ={}, cwd=str(tmp_path)) == str(tmp_path / "shards")
    assert L.resolve_data_dir(with_data, None, environ={L.DATA_DIR_ENV: str(tmp_path / "shards")}) == str(
        tmp_path / "shards"
    )
    assert L.resolve_data_dir(without, None, environ={}) is None
    with pytest.raises(BackendError, match="does not exist"):
        L.resolve_data_dir(without, "missing", environ={}, cwd=str(tmp_path))


def test_invalid_spec_or_missing_data_dir_starts_nothing(tmp_path, root):
    bad = _write_spec(tmp_path, _spec("bad", 2, []))  # empty command
    result = _cli(root, "submit", "--local", bad)
    assert result.returncode == 1 and "command" in result.stderr
    data = _write_spec(tmp_path, _spec("needsdata", 2, ["x"], data={"pvc": {"claim": "shards"}}))
    result = _cli(root, "submit", "--local", data)
    assert result.returncode == 1 and "--data-dir" in result.stderr
    assert not root.exists() or not any(root.iterdir())
    result = _cli(root, "submit", "--local", "--dry-run", "--data-dir", tmp_path, data)
    assert result.returncode == 0 and "would start 2 local workers" in result.stdout
    assert not root.exists() or not any(root.iterdir())


# ----------------------------------------------------------------------------- jax.distributed


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [2, 4])
def test_submit_local_runs_a_jax_distributed_allreduce(tmp_path, root, hosts):
    spec = _write_spec(tmp_path, _spec(f"allreduce{hosts}", hosts, [sys.executable, str(ALLREDUCE)]))
    result = _cli(root, "submit", "--local", "--devices-per-worker", 2, spec, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    total = hosts * (hosts + 1) // 2
    assert f"[worker 0] allreduce sum={total} processes={hosts} local_devices=2" in result.stdout
    assert "[worker 1]" not in result.stdout  # only rank 0 is streamed
    run = root / f"allreduce{hosts}"
    for i in range(hosts):
        log = (run / f"worker-{i}.log").read_text()
        assert log.startswith(L.ATTEMPT_HEADER) and f"process {i} of {hosts}" in log
        assert "exited with 0" in log
    status = _status(root, f"allreduce{hosts}")
    assert (status["state"], status["exit_code"], status["restarts"]) == ("Succeeded", 0, 0)
    assert json.loads((run / "spec.json").read_text())["accelerator"] == {"cpu": {"hosts": hosts}}
    _assert_all_gone(_all_worker_pids(root, f"allreduce{hosts}"))


@pytest.mark.slow
def test_killing_one_worker_mid_run_restarts_the_whole_gang(tmp_path, root):
    name = "gang"
    spec = _write_spec(
        tmp_path,
        _spec(
            name,
            2,
            [sys.executable, str(ALLREDUCE)],
            max_restarts=2,
            checkpoint_dir=str(tmp_path / "ckpt"),
            env={"LOCAL_TEST_HANG_FIRST_ATTEMPT": "1"},
        ),
    )
    cli = _popen_cli(root, "submit", "--local", spec, cwd=tmp_path)
    try:
        ready = [tmp_path / "ckpt" / f"ready-{i}" for i in range(2)]
        _wait_for(lambda: all(p.exists() for p in ready) or cli.poll() is not None, 90, "both workers mid-run")
        assert cli.poll() is None, cli.communicate()
        first_pids = _status(root, name)["pids"]
        programs = _program_pids(tmp_path, "ready-")
        os.kill(first_pids[1], signal.SIGKILL)  # worker 1's roxxel-worker: its program is orphaned
        out, err = cli.communicate(timeout=TIMEOUT)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == 0, out + err
    status = _status(root, name)
    assert (status["state"], status["restarts"], status["exit_code"]) == ("Succeeded", 1, 0)
    first, second = status["attempts"]
    assert first["outcome"] == "failure" and first["exit_codes"][1] == 128 + signal.SIGKILL
    # The manifest's policies decided: backoffLimit 0 fails the Job, no JobSet rule matches,
    # so the restart counts against maxRestarts.
    assert (first["decision"]["action"], first["decision"]["counted"], first["decision"]["rule"]) == (
        "Restart",
        True,
        None,
    )
    assert not set(first["pids"]) & set(second["pids"])  # every worker was started again
    assert "restart 1 of at most 2" in err
    assert out.count("[worker 0] allreduce sum=3 processes=2") == 2
    assert "[worker 0] process 0: attempt 2, completing" in out
    _assert_all_gone(_all_worker_pids(root, name) | programs)


# ----------------------------------------------------------------------------- signals, exit codes


@pytest.mark.slow
@pytest.mark.parametrize("signo,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_stops_every_worker(tmp_path, root, signo, code):
    name = f"stop{code}"
    # Worker 2's program ignores SIGTERM: only a SIGKILL at the end of the grace period stops it.
    spec = _program_spec(tmp_path, name, 3, "wait", env={"LOCAL_TEST_IGNORE_TERM": "2"})
    cli = _popen_cli(root, "submit", "--local", spec, cwd=tmp_path)
    try:
        _wait_for(lambda: len(_program_pids(tmp_path)) == 3 or cli.poll() is not None, 30, "the programs")
        assert cli.poll() is None, cli.communicate()
        workers, programs = set(_status(root, name)["pids"]), _program_pids(tmp_path)
        assert all(_alive(p) for p in workers | programs)
        started = time.monotonic()
        os.killpg(cli.pid, signo)  # what a terminal does on Ctrl-C: the CLI's group only
        out, err = cli.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == code, out + err
    assert took < 2 + 5  # grace period (2 s) + slack
    _assert_all_gone(workers | programs)
    status = _status(root, name)
    assert (status["state"], status["exit_code"]) == ("Failed", code)
    assert status["message"].startswith(f"stopped by {signal.Signals(signo).name}")
    assert status["reason"] == "stopped_by_user"
    # roxxel-worker ends the program that ignores SIGTERM just inside the grace period (2 s less
    # a quarter) and exits as a SIGTERM without a checkpoint, before the supervisor's SIGKILL.
    assert status["worker_exit_codes"][2] == 128 + signal.SIGTERM
    assert "killing it (SIGKILL)" in (root / name / "worker-2.log").read_text()


@pytest.mark.slow
def test_a_preempted_worker_restarts_the_jobset_in_place_without_counting(tmp_path, root):
    """Exit 42 matches the Job's podFailurePolicy (FailJob) and the JobSet's ``preemption``
    rule (RestartJobSetAndIgnoreMaxRestarts): the gang restarts although max_restarts is 0."""
    name = "preempt"
    spec = _program_spec(tmp_path, name, 2, "preempt", max_restarts=0)
    result = _cli(root, "submit", "--local", spec, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker 0] process 0: SIGTERM, checkpoint saved" in result.stdout
    assert "[worker 0] process 0: restored checkpoint step-7, finishing" in result.stdout
    status = _status(root, name)
    assert (status["state"], status["exit_code"], status["restarts"], status["restarts_counted"]) == (
        "Succeeded",
        0,
        1,
        0,
    )
    first = status["attempts"][0]
    assert first["exit_codes"] == [42, 42]
    assert (first["decision"]["rule"], first["decision"]["counted"]) == ("preemption", False)
    log = (root / name / "worker-1.log").read_text()
    assert log.count(L.ATTEMPT_HEADER) == 2 and "attempt 2 (restart 1, resume 0)" in log
    _assert_all_gone(_all_worker_pids(root, name))


@pytest.mark.slow
def test_a_preempted_indexed_job_stops_and_resume_completes_it(tmp_path, root):
    """An Indexed Job has no gang restart: its podFailurePolicy fails it on exit 42, and the
    job is Preempted until ``resume``."""
    name = "preempt-ij"
    spec = _program_spec(tmp_path, name, 2, "preempt", workload="indexed-job")
    result = _cli(root, "submit", "--local", spec, cwd=tmp_path)
    assert result.returncode == 42, result.stdout + result.stderr
    status = _status(root, name)
    assert (status["state"], status["exit_code"], status["restarts"]) == ("Preempted", 42, 0)
    assert status["reason"] == "preempted"
    assert status["worker_exit_codes"] == [42, 42]
    assert f"resume {name} --local" in result.stderr

    result = _cli(root, "resume", name, "--local", cwd=root)  # the run's own cwd is reused
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[worker 0] process 0: restored checkpoint step-7, finishing" in result.stdout
    status = _status(root, name)
    assert (status["state"], status["exit_code"], status["resumes"]) == ("Succeeded", 0, 1)
    assert len(status["attempts"]) == 2
    assert status["reason"] is None  # reset by the resume
    log = (root / name / "worker-1.log").read_text()
    assert log.count(L.ATTEMPT_HEADER) == 2 and "attempt 2 (restart 0, resume 1)" in log
    result = _cli(root, "resume", name, "--local")
    assert result.returncode == 1 and "nothing to resume" in result.stderr
    # Issue 51: suspend said "resume it" here, and delete warned that resume could not continue it.
    result = _cli(root, "suspend", name, "--local")
    assert result.returncode == 1 and "succeeded; there is nothing to suspend or resume" in result.stderr
    assert "resume it" not in result.stderr
    _assert_all_gone(_all_worker_pids(root, name))
    result = _cli(root, "delete", name, "--local")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"deleted {name}\n", ""), result


def test_max_restarts_used_up_fails_with_the_workers_code_and_log(tmp_path, root):
    name = "failing"
    spec = _program_spec(tmp_path, name, 2, "fail", max_restarts=1)
    result = _cli(root, "submit", "--local", spec, cwd=tmp_path)
    assert result.returncode == 3, result.stdout + result.stderr
    status = _status(root, name)
    assert (status["state"], status["exit_code"], status["restarts"], status["failed_process"]) == ("Failed", 3, 1, 1)
    assert status["reason"] == "restarts_exhausted"
    message = status["message"]
    assert message.startswith("worker 1 exited with 3 (failed); max_restarts (1) used up")
    assert "process 1: fatal: the loss is NaN" in message and "line 29" in message
    assert "line 5\n" not in message  # only the tail
    assert "== roxxel-launch" not in message  # of the last attempt only
    assert [a["outcome"] for a in status["attempts"]] == ["failure", "failure"]
    assert "fatal: the loss is NaN" in result.stderr  # the error is surfaced, not a log path
    # The failure policy's words once per restart, in the restart's line (they were in the
    # 'stopping the other workers' line before it too).
    assert result.stderr.count("backoff limit") == 1, result.stderr
    assert "worker 1 exited with 3: stopping the other workers for a gang restart" in result.stderr
    _assert_all_gone(_all_worker_pids(root, name))


def test_a_configuration_error_is_reported_once_in_local_words(tmp_path, root):
    """A job whose program exits 78: the program's own line, then one report from
    roxxel-launch that says what 78 means and what to do. Before: a [roxxel-launch] WARNING,
    then the final line repeating it twice, both quoting Kubernetes' failure-policy message
    (\"Container worker for pod default/... matching FailJob rule at index 0\")."""
    program = "import sys; print('bad config: vocab_size is missing', file=sys.stderr); raise SystemExit(78)"
    spec = _write_spec(tmp_path, _spec("cfgerr", 2, [sys.executable, "-c", program], max_restarts=3))
    result = _cli(root, "submit", "--local", spec, cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 78, out
    assert "FailJob" not in out and "FailJobSet" not in out and "pod default/" not in out
    ours = [line for line in out.splitlines() if line.startswith(("roxxel-launch", "[roxxel-launch]"))]
    assert len(ours) == 1, out
    assert "configuration error" in ours[0] and "fix the job and submit again" in ours[0]
    assert ours[0].count("configuration error") == 1 and ours[0].count("not restarted") == 1, ours[0]
    assert "bad config: vocab_size is missing" in result.stderr  # the failing worker's own words
    status = _status(root, "cfgerr")
    assert (status["state"], status["reason"], status["restarts"]) == ("Failed", "config_error", 0)
    # The policy's verdict, in Kubernetes' words, stays in the attempt's record.
    assert status["attempts"][-1]["decision"]["rule"] == "configError"


# ----------------------------------------------------------------------------- status, list, logs


@pytest.mark.slow
def test_status_list_logs_and_detached_runs(tmp_path, root):
    ok = _program_spec(tmp_path, "okjob", 2, "ok")
    result = _cli(root, "submit", "--local", "--detach", ok, cwd=tmp_path)
    assert result.returncode == 0 and "started local job okjob: 2 workers" in result.stdout, result.stderr
    result = _cli(root, "wait", "okjob", "--local", "--poll", 0.1)
    assert result.returncode == 0 and "okjob succeeded" in result.stderr

    result = _cli(root, "status", "okjob", "--local")
    assert result.returncode == 0
    assert "state:      Succeeded" in result.stdout and f"run dir:    {root / 'okjob'}" in result.stdout
    as_json = json.loads(_cli(root, "status", "okjob", "--local", "--json").stdout)
    assert (as_json["state"], as_json["processes"], as_json["exit_code"]) == ("Succeeded", 2, 0)

    result = _cli(root, "logs", "okjob", "--local", "--process", 1)
    assert result.returncode == 0
    assert result.stdout.startswith(L.ATTEMPT_HEADER) and "process 1 of 2: ok run=okjob" in result.stdout
    assert _cli(root, "logs", "okjob", "--local", "-p", 5).returncode == 1
    assert "no local job 'nope'" in _cli(root, "status", "nope", "--local").stderr
    submitted_again = _cli(root, "submit", "--local", ok)
    assert submitted_again.returncode == 1 and "already succeeded" in submitted_again.stderr
    assert "roxxel-launch delete okjob --local" in submitted_again.stderr
    # delete keeps the checkpoints, which a new run would restore (training no step): say so
    assert f"remove its checkpoints ({tmp_path / 'ckpt'})" in submitted_again.stderr
    assert "resume" not in submitted_again.stderr  # resume refuses a succeeded job: never suggest it

    # A detached job that runs: followed, listed, then deleted (which stops it).
    waiting = _program_spec(tmp_path, "waitjob", 2, "wait")
    assert _cli(root, "submit", "--local", "--detach", waiting, cwd=tmp_path).returncode == 0
    _wait_for(lambda: len(_program_pids(tmp_path)) == 2, 30, "the detached workers")
    running_again = _cli(root, "submit", "--local", waiting)
    assert running_again.returncode == 1 and "'waitjob' is running" in running_again.stderr
    assert "roxxel-launch logs waitjob --local -f" in running_again.stderr and "resume" not in running_again.stderr
    listing = _cli(root, "list", "--local").stdout.splitlines()
    assert listing[0].split() == ["NAME", "STATE", "PROCESSES", "RESTARTS", "EXIT", "CREATED"]
    assert [line.split()[:5] for line in listing[1:]] == [
        ["okjob", "Succeeded", "2", "0", "0"],
        ["waitjob", "Running", "2", "0", "-"],
    ]
    follower = subprocess.Popen(
        [sys.executable, "-m", "roxxel_launch.cli", "logs", "waitjob", "--local", "-f"],
        env=_env(root),
        stdout=subprocess.PIPE,
        text=True,
    )
    followed: list[str] = []
    reader = threading.Thread(target=lambda: followed.extend(follower.stdout), daemon=True)
    reader.start()
    # Delete only once -f is attached and has printed: on a loaded machine its start-up can
    # outlast the delete, and it then found no job to follow (it printed nothing).
    _wait_for(
        lambda: any("process 0: waiting" in line for line in followed) or follower.poll() is not None,
        60,
        "logs -f to print the job's lines",
    )
    pids = set(_status(root, "waitjob")["pids"]) | _program_pids(tmp_path)
    supervisor = _status(root, "waitjob")["supervisor_pid"]
    result = _cli(root, "delete", "waitjob", "--local")
    assert result.returncode == 0, result.stderr
    follower.wait(timeout=30)  # -f ends with the job
    reader.join(timeout=30)
    assert any("process 0: waiting" in line for line in followed), followed
    assert not (root / "waitjob").exists()
    _assert_all_gone(pids | {supervisor})
    assert [j["name"] for j in json.loads(_cli(root, "list", "--local", "--json").stdout)] == ["okjob"]


def test_backend_api_errors(tmp_path, root):
    backend = L.LocalBackend()
    assert backend.root == root and backend.list() == []
    with pytest.raises(JobNotFoundError):
        backend.status("../etc")
    with pytest.raises(JobNotFoundError):
        backend.delete("missing")
    spec = spec_from_dict(_spec("apijob", 1, [sys.executable, str(PROGRAM)], checkpoint_dir=str(tmp_path / "c")))
    status = L.LocalBackend(options=L.LocalOptions(foreground=True)).submit(spec)
    assert (status.state, status.exit_code, status.processes) == (JobState.SUCCEEDED, 0, 1)
    assert backend.wait("apijob", poll_seconds=0.1) == status
    assert list(backend.logs("apijob"))[-1].endswith("exited with 0: done")
    with pytest.raises(JobExistsError):
        backend.submit(spec)
    with pytest.raises(BackendError, match="devices per worker"):
        L.LocalBackend(options=L.LocalOptions(devices_per_worker=0)).submit(spec_from_dict(_spec("other", 1, ["x"])))
    backend.delete("apijob")
    assert backend.list() == []


def test_without_local_the_kubernetes_backend_is_imported_lazily(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from roxxel_launch import cli

    # As if launcher/roxxel_launch/backends/kubernetes/backend.py were missing or could not be imported.
    monkeypatch.setitem(sys.modules, "roxxel_launch.backends.kubernetes.backend", None)
    runner = CliRunner()
    result = runner.invoke(cli.cli, ["status", "somejob"])
    assert result.exit_code == 1 and "Kubernetes backend is not available" in result.output
    assert "--local" in result.output
    spec = _write_spec(tmp_path, _spec("k8sjob", 2, ["train"]))
    result = runner.invoke(cli.cli, ["submit", str(spec), "--detach"])
    assert result.exit_code == 2 and "--detach applies to --local runs only" in result.output
    result = runner.invoke(cli.cli, ["list", "--local", "--context", "prod"])
    assert result.exit_code == 2 and "--context applies to Kubernetes jobs only, not to --local runs" in result.output


def test_backend_is_chosen_by_name_and_local_is_short_for_backend_local(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from roxxel_launch import cli
    from roxxel_launch.cli import backend_choice

    monkeypatch.setenv(L.ROOT_ENV, str(tmp_path))
    runner = CliRunner()
    assert set(backend_choice.BACKENDS) == {"kubernetes", "local"} and backend_choice.DEFAULT_BACKEND == "kubernetes"
    for args in (["--local"], ["--backend", "local"], ["--backend", "local", "--local"]):
        result = runner.invoke(cli.cli, ["list", *args])
        assert result.exit_code == 0 and f"no local jobs in {tmp_path}" in result.output, (args, result.output)
    result = runner.invoke(cli.cli, ["list", "--local", "--backend", "kubernetes"])
    assert result.exit_code == 2 and "contradicts --backend kubernetes" in result.output
    result = runner.invoke(cli.cli, ["list", "--backend", "slurm"])
    assert result.exit_code == 2 and "kubernetes" in result.output and "local" in result.output
    monkeypatch.setitem(sys.modules, "roxxel_launch.backends.kubernetes.backend", None)
    result = runner.invoke(cli.cli, ["status", "somejob", "--backend", "kubernetes"])
    assert result.exit_code == 1 and "Kubernetes backend is not available" in result.output


@pytest.mark.slow
def test_a_killed_supervisor_takes_its_workers_along_and_is_reported(tmp_path, root):
    name = "orphans"
    spec = _program_spec(tmp_path, name, 2, "wait")
    assert _cli(root, "submit", "--local", "--detach", spec, cwd=tmp_path).returncode == 0
    _wait_for(lambda: len(_program_pids(tmp_path)) == 2, 30, "the detached workers")
    status = _status(root, name)
    pids = set(status["pids"]) | _program_pids(tmp_path)
    os.kill(status["supervisor_pid"], signal.SIGKILL)  # no chance to stop anything itself
    _assert_all_gone(pids | {status["supervisor_pid"]})  # PR_SET_PDEATHSIG: SIGTERM to each worker
    shown = json.loads(_cli(root, "status", name, "--local", "--json").stdout)
    assert shown["state"] == "Failed" and "ended without recording a final state" in shown["message"]
    assert _status(root, name)["state"] == "Running"  # status only reports; the record is untouched
    for pid_file in (tmp_path / "ckpt").glob("pid-*"):
        pid_file.unlink()
    assert _cli(root, "resume", name, "--local", "--detach").returncode == 0  # resumable
    _wait_for(lambda: len(_program_pids(tmp_path)) == 2, 30, "the resumed workers")
    pids = set(_status(root, name)["pids"]) | _program_pids(tmp_path)
    assert _cli(root, "delete", name, "--local").returncode == 0
    _assert_all_gone(pids)


def test_local_run_with_object_storage_checkpoints_is_pointed_out(root, tmp_path):
    """A spec made for the cluster (gs:// checkpoints) run locally: say so before starting."""
    spec = tmp_path / "gs.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "roxxel.dev/v1alpha1",
                "kind": "RoxxelJob",
                "name": "gsjob",
                "image": "local",
                "command": ["python", "-c", "pass"],
                "accelerator": {"cpu": {"hosts": 1}},
                "checkpoint_dir": "gs://bucket/run",
            }
        )
    )
    result = _cli(root, "submit", "--local", "--dry-run", str(spec), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "checkpoint_dir is gs://bucket/run" in result.stderr and "--set checkpoint_dir=" in result.stderr


def test_resume_with_a_fixed_spec_runs_it_and_refuses_another_run(tmp_path, root):
    """After fixing a failed job's YAML, resume re-ran the old stored spec and failed again;
    `resume NAME --spec FILE` runs the fixed one (changes logged, stored for later resumes),
    and refuses one that would be another run (another checkpoint_dir), saying what fits."""
    broken = _program_spec(tmp_path, "fixme", 2, "fail", max_restarts=0)
    failed = _cli(root, "submit", "--local", broken, cwd=tmp_path)
    assert failed.returncode != 0 and _status(root, "fixme")["state"] == "Failed", failed.stderr
    fixed = _program_spec(tmp_path, "fixme", 2, "ok", max_restarts=0)  # the same file, edited
    elsewhere = _cli(
        root,
        "resume",
        "fixme",
        "--local",
        "--spec",
        fixed,
        "--set",
        f"checkpoint_dir={tmp_path / 'other'}",
        cwd=tmp_path,
    )
    assert elsewhere.returncode == 1, elsewhere.stderr
    assert "checkpoint_dir" in elsewhere.stderr and "makes it another run" in elsewhere.stderr
    assert "submit the spec" in elsewhere.stderr and _status(root, "fixme")["state"] == "Failed"
    resumed = _cli(root, "resume", "fixme", "--local", "--spec", fixed, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming fixme under the new spec: env:" in resumed.stderr and "'ok'" in resumed.stderr
    assert _status(root, "fixme")["state"] == "Succeeded"
    stored = json.loads((root / "fixme" / "spec.json").read_text())
    assert stored["env"]["LOCAL_TEST_MODE"] == "ok"  # a later plain resume runs the fixed spec too
    assert "--set applies to the --spec file" in _cli(root, "resume", "fixme", "--local", "--set", "x=1").stderr


BRANCHING_PROGRAM = """
import sys
sys.path.insert(0, {tests!r})
from roxxel.run import run_info
from roxxel.train import Checkpointer
from support.ckpt import MODEL_DIMS, build
run = run_info()
with Checkpointer(run.checkpoint_dir, state=build(MODEL_DIMS, 0), run_name=run.run_name,
                  restore_from=run.restore_from) as ckpt:
    step = ckpt.restore()
    print("RESTORED", step, flush=True)
    ckpt.save(step + 1, force=True)
"""


@pytest.mark.slow
def test_a_renamed_job_on_another_runs_checkpoints_is_refused_and_restore_from_branches(tmp_path, root):
    """`--set name=b` kept the YAML's checkpoint_dir and job b trained on job lm's checkpoint.
    Now submit refuses it before anything starts, naming both runs and the two fixes; with its
    own checkpoint_dir and restore_from=lm's, b starts from lm's step and writes only its own.
    The training program is a real Checkpointer (Orbax) reading what the launcher set."""
    from support.paths import TESTS

    lm_dir = tmp_path / "lm-ckpt"
    command = [sys.executable, "-c", BRANCHING_PROGRAM.format(tests=str(TESTS))]
    spec = _write_spec(tmp_path, _spec("lm", 1, command, checkpoint_dir=str(lm_dir), max_restarts=0))
    first = _cli(root, "submit", "--local", spec, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads((lm_dir / "roxxel_run.json").read_text())["run"] == "lm"
    before = sorted((str(p), p.stat().st_mtime_ns) for p in lm_dir.rglob("*") if p.is_file())

    renamed = _cli(root, "submit", "--local", spec, "--set", "name=b", cwd=tmp_path)
    assert renamed.returncode == 1, renamed.stdout + renamed.stderr
    assert "belongs to run 'lm', not to this job's run 'b'" in renamed.stderr
    assert f"restore_from={lm_dir}" in renamed.stderr and "--set checkpoint_dir=" in renamed.stderr
    assert not (root / "b").exists()  # nothing started

    branched = _cli(
        root,
        "submit",
        "--local",
        spec,
        "--set",
        "name=b",
        "--set",
        f"checkpoint_dir={tmp_path / 'b-ckpt'}",
        "--set",
        f"restore_from={lm_dir}",
        cwd=tmp_path,
    )
    assert branched.returncode == 0, branched.stdout + branched.stderr
    assert "RESTORED 1" in _cli(root, "logs", "b", "--local").stdout
    assert json.loads((tmp_path / "b-ckpt" / "roxxel_run.json").read_text())["run"] == "b"
    assert (tmp_path / "b-ckpt" / "2").is_dir()
    assert sorted((str(p), p.stat().st_mtime_ns) for p in lm_dir.rglob("*") if p.is_file()) == before


@pytest.mark.slow
def test_suspend_stops_a_local_job_and_keeps_it_for_resume(tmp_path, root):
    """`suspend --local` stops the workers as Ctrl-C does and keeps the run directory (its
    stored spec): `resume` starts the job again, where `delete` would have removed it."""
    name = "pausejob"
    spec = _program_spec(tmp_path, name, 2, "wait")
    assert _cli(root, "submit", "--local", "--detach", spec, cwd=tmp_path).returncode == 0
    _wait_for(lambda: len(_program_pids(tmp_path)) == 2, 30, "the detached workers")
    status = _status(root, name)
    pids = set(status["pids"]) | _program_pids(tmp_path) | {status["supervisor_pid"]}
    result = _cli(root, "suspend", name, "--local")
    assert result.returncode == 0, result.stderr
    assert f"`roxxel-launch resume {name}` continues it" in result.stdout
    _assert_all_gone(pids)
    assert (root / name / "spec.json").is_file() and _status(root, name)["reason"] == "stopped_by_user"
    again = _cli(root, "suspend", name, "--local")
    assert again.returncode == 1 and "nothing to suspend" in again.stderr
    for pid_file in (tmp_path / "ckpt").glob("pid-*"):
        pid_file.unlink()
    resumed = _cli(root, "resume", name, "--local", "--detach")
    assert resumed.returncode == 0, resumed.stderr
    # As much as submit --detach says (before: 'resumed pausejob: state Running', nothing more).
    assert f"resumed local job {name}: 2 workers, run directory {root / name}" in resumed.stdout
    assert f"`roxxel-launch logs {name} --local -f`" in resumed.stdout
    assert f"`roxxel-launch wait {name} --local`" in resumed.stdout
    _wait_for(lambda: len(_program_pids(tmp_path)) == 2, 30, "the resumed workers")
    pids = set(_status(root, name)["pids"]) | _program_pids(tmp_path)
    assert _cli(root, "delete", name, "--local").returncode == 0
    _assert_all_gone(pids)


def test_exec_of_a_process_job_names_no_container_engine(tmp_path, root):
    """Before, every local job's refusal said `podman ps ...`, a process job's too."""
    import json as _json

    from roxxel_launch.backends.local.rundir import LAUNCH_FILE, STATUS_FILE

    for name, runtime in (("procs", "process"), ("ctrs", "docker")):
        run_dir = root / name
        run_dir.mkdir(parents=True)
        (run_dir / STATUS_FILE).write_text(_json.dumps({"name": name, "state": "Succeeded", "attempts": []}))
        (run_dir / LAUNCH_FILE).write_text(_json.dumps({"runtime": runtime}))
    backend = L.LocalBackend(root)
    with pytest.raises(BackendError) as err:
        backend.exec("procs", ["true"], out=None, err=None)
    assert "podman" not in str(err.value) and "docker" not in str(err.value)
    assert f"in its run directory {root / 'procs'}" in str(err.value)
    with pytest.raises(BackendError, match=r"docker ps --filter label=dev.roxxel.run=\w+ lists its containers"):
        backend.exec("ctrs", ["true"], out=None, err=None)


def test_the_echo_of_worker_0_leaves_out_gloos_connection_lines(tmp_path):
    """Gloo prints "[Gloo] Rank R is connected to N peer ranks..." to stdout (C++, no switch)
    once per communicator: six lines in the main job, between the progress lines. The echo
    leaves out those that say every peer is connected; one that says fewer is kept, and the
    log file keeps them all."""
    import io

    from roxxel_launch.backends.local.processes import LogEcho

    log = tmp_path / "worker-0.log"
    log.write_text("")
    out = io.StringIO()
    echo = LogEcho(log, "[worker 0] ", out)
    connected = "[Gloo] Rank 0 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3"
    partial = "[Gloo] Rank 1 is connected to 1 peer ranks. Expected number of connected peer ranks is : 3"
    log.write_text(f"training steps 0..500\n{connected}\n{partial}\nstep 20/500  loss=6.4\n[Gloo] Rank 0 is")
    echo.pump()
    assert (
        out.getvalue() == f"[worker 0] training steps 0..500\n[worker 0] {partial}\n[worker 0] step 20/500  loss=6.4\n"
    )
    with log.open("a") as f:
        f.write(" connected to 1 peer ranks. Expected number of connected peer ranks is : 1\ndone\n")
    echo.pump(final=True)
    assert out.getvalue().endswith("[worker 0] step 20/500  loss=6.4\n[worker 0] done\n")
    assert log.read_text().count("[Gloo]") == 3
