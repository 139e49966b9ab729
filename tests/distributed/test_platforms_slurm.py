"""The Slurm row (roxxel.distributed.platforms.slurm): srun's task variables, read as JAX's own
SlurmCluster reads them (the coordinator compared with JAX's on the same environment)."""

from __future__ import annotations

import pytest

import roxxel.distributed as rd
from roxxel.distributed import Detected, detect, runtime
from roxxel.distributed.platforms.slurm import first_host


def srun_env(procid=3, ntasks=8, nodelist="node[001-004]", job_id="12345", **extra):
    """What srun sets in each task of a step (the variables the row reads, and SLURM_LOCALID)."""
    env = {
        "SLURM_PROCID": str(procid),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_JOB_ID": job_id,
        "SLURM_LOCALID": str(procid % 2),
    }
    env.update(extra)
    return env


def test_a_task_of_a_step():
    # 12345 % 4096 = 57: port 61440 + 57
    assert detect(srun_env()) == Detected("node001:61497", 8, 3, "slurm")


@pytest.mark.parametrize(
    "nodelist",
    ["node001", "node001,host2", "node[001-0015],host2", "node[001,007-015],host2", "a1", "x-y[7-9]"],
)
@pytest.mark.parametrize("job_id", ["0", "4095", "4096", "987654"])
def test_the_coordinator_is_jaxs(monkeypatch, nodelist, job_id):
    """The same host and port as jax._src.clusters.slurm_cluster on the forms it parses."""
    from jax._src.clusters.slurm_cluster import SlurmCluster

    env = srun_env(nodelist=nodelist, job_id=job_id)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("JAX_COORDINATOR_PORT", raising=False)
    assert SlurmCluster.is_env_present()
    jax_address = SlurmCluster.get_coordinator_address(timeout_secs=None, override_coordinator_port=None)
    assert detect(env).coordinator_address == jax_address


@pytest.mark.parametrize(
    "nodelist, host",
    [
        ("gpu[1-4]-ib", "gpu1-ib"),  # JAX drops what follows the bracket
        ("rack[1-2]-node[01-04],spare", "rack1-node01"),
        ("node[010,003-005]", "node010"),  # the list's order, not the smallest
        ("node[7]", "node7"),  # JAX gives 'node7]'
        ("n0.cluster.local,n1.cluster.local", "n0.cluster.local"),
    ],
)
def test_first_host_keeps_what_follows_a_bracket(nodelist, host):
    assert first_host(nodelist) == host


@pytest.mark.parametrize("nodelist", ["node[", "node[001-004", "node[a-b]", "node[]", ",node1", "node]1"])
def test_first_host_rejects_what_is_not_a_host_list(nodelist):
    with pytest.raises(ValueError, match="not a Slurm host list"):
        first_host(nodelist)


PORTS = {
    "roxxel-port": ({rd.ENV_COORDINATOR_PORT: "9000"}, "node001:9000"),
    "jax-port": ({"JAX_COORDINATOR_PORT": "9100"}, "node001:9100"),
    "roxxel-port-beats-jax-port": ({rd.ENV_COORDINATOR_PORT: "9000", "JAX_COORDINATOR_PORT": "9100"}, "node001:9000"),
}


@pytest.mark.parametrize("extra, address", list(PORTS.values()), ids=list(PORTS))
def test_a_port_set_in_the_environment_wins(extra, address):
    assert detect(srun_env(**extra)).coordinator_address == address


def test_a_named_port_needs_no_job_id():
    env = {k: v for k, v in srun_env(**{rd.ENV_COORDINATOR_PORT: "9000"}).items() if k != "SLURM_JOB_ID"}
    assert detect(env) == Detected("node001:9000", 8, 3, "slurm")


def test_host_aliases_apply_to_the_slurm_coordinator():
    env = srun_env(**{rd.ENV_HOST_ALIASES: "node001=10.1.2.3"})
    assert detect(env).coordinator_address == "10.1.2.3:61497"


def test_one_task():
    assert detect(srun_env(procid=0, ntasks=1, nodelist="node7")) == Detected("node7:61497", 1, 0, "slurm")


PRECEDENCE = {
    # the batch script's own shell: no step, so one process (not 4 that were never started)
    "batch-script-is-single": (
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[1-4]", "SLURM_JOB_ID": "7"},
        "single",
    ),
    "salloc-shell-is-single": ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_NODELIST": "node[1-4]"}, "single"),
    "roxxel-beats-slurm": (
        srun_env() | {rd.ENV_NUM_PROCESSES: "2", rd.ENV_PROCESS_ID: "1", rd.ENV_COORDINATOR_ADDRESS: "h:1"},
        "roxxel",
    ),
    "roxxel-count-beats-slurm": (srun_env() | {rd.ENV_NUM_PROCESSES: "1", rd.ENV_PROCESS_ID: "0"}, "roxxel"),
    "jobset-beats-slurm": (
        srun_env()
        | {
            rd.ENV_JOBSET_NAME: "t",
            rd.ENV_REPLICATED_JOB_NAME: "s",
            rd.ENV_JOB_INDEX: "0",
            rd.ENV_JOB_COMPLETION_INDEX: "0",
            rd.ENV_HOSTS_PER_SLICE: "2",
            rd.ENV_NUM_SLICES: "1",
        },
        "jobset",
    ),
    "indexed-job-beats-slurm": (
        srun_env()
        | {
            rd.ENV_JOB_COMPLETION_INDEX: "0",
            rd.ENV_JOB_NAME: "lm",
            rd.ENV_SERVICE_NAME: "lm",
            rd.ENV_NUM_PROCESSES: "2",
        },
        "indexed-job",
    ),
    "gke-tpu-beats-slurm": (srun_env() | {rd.ENV_TPU_WORKER_HOSTNAMES: "h0"}, "gke-tpu"),
}


@pytest.mark.parametrize("env, source", list(PRECEDENCE.values()), ids=list(PRECEDENCE))
def test_precedence(env, source):
    assert detect(env).source == source


def test_explicit_arguments_override_slurm():
    assert detect(srun_env(), process_id=0) == Detected("node001:61497", 8, 0, "explicit")


ERRORS = {
    "no-ntasks": (
        {k: v for k, v in srun_env().items() if k != "SLURM_NTASKS"},
        ["incomplete Slurm environment", "SLURM_NTASKS", "srun"],
    ),
    "procid-not-below-ntasks": (srun_env(procid=8), ["process id 8", "SLURM_PROCID", "process count 8"]),
    "ntasks-not-an-integer": (srun_env(ntasks="x"), ["SLURM_NTASKS='x'", "not an integer"]),
    "bad-nodelist": (srun_env(nodelist="node[001-"), ["SLURM_STEP_NODELIST='node[001-'", "not a Slurm host list"]),
    "no-job-id": (
        {k: v for k, v in srun_env().items() if k != "SLURM_JOB_ID"},
        ["SLURM_JOB_ID is not set", rd.ENV_COORDINATOR_PORT],
    ),
    "bad-jax-port": (srun_env(JAX_COORDINATOR_PORT="70000"), ["JAX_COORDINATOR_PORT=70000", "not a TCP port"]),
    "bad-roxxel-port": (srun_env(**{rd.ENV_COORDINATOR_PORT: "http"}), ["ROXXEL_COORDINATOR_PORT='http'"]),
}


@pytest.mark.parametrize("env, fragments", list(ERRORS.values()), ids=list(ERRORS))
def test_errors_name_the_variable(env, fragments):
    with pytest.raises(ValueError) as info:
        detect(env)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_initialize_passes_the_slurm_values_to_jax(monkeypatch):
    calls = []
    monkeypatch.setattr(runtime, "_record", None)
    monkeypatch.setattr(runtime, "_jax_initialize", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(runtime, "_jax_is_initialized", lambda: bool(calls))
    monkeypatch.setattr(runtime, "_process_info", lambda source, coord: rd.ProcessInfo(3, 8, coord, source, 1, 8))
    monkeypatch.setattr(runtime, "_end_at_once_on_uncaught_errors", lambda pid: None)
    try:
        info = rd.initialize(env=srun_env())
    finally:
        runtime._record = None
    assert info.source == "slurm"
    assert [(c["coordinator_address"], c["num_processes"], c["process_id"]) for c in calls] == [("node001:61497", 8, 3)]
