"""roxxel.distributed.detect over environment sets, and what initialize() asks of JAX."""

from __future__ import annotations

import logging

import pytest

import roxxel.distributed as rd
from roxxel.distributed import Detected, ProcessInfo, detect
from roxxel.distributed import runtime  # where initialize() looks up its JAX seams


def test_every_public_name_is_importable_from_the_package():
    """roxxel.distributed is a package of modules by concern; its public names stay where they were."""
    missing = [name for name in rd.__all__ if not hasattr(rd, name)]
    assert not missing
    assert rd.initialize is runtime.initialize and rd.ENV_PROCESS_ID == "ROXXEL_PROCESS_ID"


def jobset_env(job_index, completion_index, *, slices=2, hosts=4, **extra):
    env = {
        rd.ENV_JOBSET_NAME: "train",
        rd.ENV_REPLICATED_JOB_NAME: "slice",
        rd.ENV_JOB_INDEX: str(job_index),
        rd.ENV_JOB_COMPLETION_INDEX: str(completion_index),
        rd.ENV_HOSTS_PER_SLICE: str(hosts),
        rd.ENV_NUM_SLICES: str(slices),
    }
    env.update(extra)
    return env


INDEXED = {
    rd.ENV_JOB_COMPLETION_INDEX: "2",
    rd.ENV_JOB_NAME: "lm",
    rd.ENV_SERVICE_NAME: "lm-hosts",
    rd.ENV_NUM_PROCESSES: "4",
}
ROXXEL = {
    rd.ENV_COORDINATOR_ADDRESS: "10.0.0.5:1234",
    rd.ENV_NUM_PROCESSES: "3",
    rd.ENV_PROCESS_ID: "2",
}
GKE_TPU = {
    rd.ENV_TPU_WORKER_HOSTNAMES: "h0.t,h1.t,h2.t,h3.t",
    rd.ENV_TPU_WORKER_ID: "3",
    rd.ENV_JOB_COMPLETION_INDEX: "3",  # GKE TPU pods are Indexed Job pods too
}
COORD = "train-slice-0-0.train:8476"

CASES = {
    # multi-slice JobSet: 2 slices x 4 hosts; id = job_index * 4 + completion_index
    "jobset-0-0": (jobset_env(0, 0), (COORD, 8, 0, "jobset")),
    "jobset-0-3": (jobset_env(0, 3), (COORD, 8, 3, "jobset")),
    "jobset-1-0": (jobset_env(1, 0), (COORD, 8, 4, "jobset")),
    "jobset-1-2": (jobset_env(1, 2), (COORD, 8, 6, "jobset")),
    "jobset-1-3": (jobset_env(1, 3), (COORD, 8, 7, "jobset")),
    "jobset-single-slice": (jobset_env(0, 2, slices=1), (COORD, 4, 2, "jobset")),
    "jobset-replicas-label": (
        {k: v for k, v in jobset_env(1, 1).items() if k != rd.ENV_NUM_SLICES} | {rd.ENV_REPLICATED_JOB_REPLICAS: "2"},
        (COORD, 8, 5, "jobset"),
    ),
    "jobset-subdomain-port": (
        jobset_env(0, 1, **{rd.ENV_JOBSET_SUBDOMAIN: "net", rd.ENV_COORDINATOR_PORT: "9000"}),
        ("train-slice-0-0.net:9000", 8, 1, "jobset"),
    ),
    "jobset-empty-subdomain-is-default": (
        jobset_env(0, 1, **{rd.ENV_JOBSET_SUBDOMAIN: ""}),
        (COORD, 8, 1, "jobset"),
    ),
    "jobset-consistent-count": (
        jobset_env(1, 1, **{rd.ENV_NUM_PROCESSES: "8"}),
        (COORD, 8, 5, "jobset"),
    ),
    "jobset-beats-tpu": (jobset_env(1, 3) | GKE_TPU, (COORD, 8, 7, "jobset")),
    "indexed-job": (INDEXED, ("lm-0.lm-hosts:8476", 4, 2, "indexed-job")),
    "indexed-job-port": (
        INDEXED | {rd.ENV_COORDINATOR_PORT: "7000"},
        ("lm-0.lm-hosts:7000", 4, 2, "indexed-job"),
    ),
    "gke-tpu": (GKE_TPU, (None, 4, 3, "gke-tpu")),
    "gke-tpu-multislice": (
        GKE_TPU | {rd.ENV_MEGASCALE_NUM_SLICES: "2", rd.ENV_MEGASCALE_SLICE_ID: "1"},
        (None, 8, 7, "gke-tpu"),
    ),
    "gke-tpu-one-host-no-id": ({rd.ENV_TPU_WORKER_HOSTNAMES: "h0"}, (None, 1, 0, "gke-tpu")),
    "gke-tpu-process-addresses-win": (
        {rd.ENV_TPU_PROCESS_ADDRESSES: "a:1,b:1", rd.ENV_TPU_WORKER_HOSTNAMES: "h0", rd.ENV_TPU_WORKER_ID: "1"},
        (None, 2, 1, "gke-tpu"),
    ),
    "roxxel": (ROXXEL, ("10.0.0.5:1234", 3, 2, "roxxel")),
    "roxxel-ipv6": (ROXXEL | {rd.ENV_COORDINATOR_ADDRESS: "[::1]:1234"}, ("[::1]:1234", 3, 2, "roxxel")),
    "roxxel-one-process-no-coordinator": (
        {rd.ENV_NUM_PROCESSES: "1", rd.ENV_PROCESS_ID: "0"},
        (None, 1, 0, "roxxel"),
    ),
    "roxxel-beats-jobset": (jobset_env(1, 1) | ROXXEL, ("10.0.0.5:1234", 3, 2, "roxxel")),
    "roxxel-beats-tpu": (GKE_TPU | ROXXEL, ("10.0.0.5:1234", 3, 2, "roxxel")),
    "roxxel-whitespace": (
        {k: f" {v}\n" for k, v in ROXXEL.items()},
        ("10.0.0.5:1234", 3, 2, "roxxel"),
    ),
    "local": ({}, (None, 1, 0, "single")),
    "local-unrelated-vars": ({"HOME": "/root", "ROXXEL_INIT_TIMEOUT": "5"}, (None, 1, 0, "single")),
    "bare-indexed-job-index-only": ({rd.ENV_JOB_COMPLETION_INDEX: "0"}, (None, 1, 0, "single")),
    "empty-values-are-unset": ({rd.ENV_PROCESS_ID: "", rd.ENV_JOB_INDEX: " "}, (None, 1, 0, "single")),
}


@pytest.mark.parametrize("env, expected", list(CASES.values()), ids=list(CASES))
def test_detect(env, expected):
    assert detect(env) == Detected(*expected)


EXPLICIT_CASES = {
    "all-explicit-ignores-broken-env": (
        {rd.ENV_JOB_INDEX: "oops"},
        dict(coordinator_address="c:1", num_processes=2, process_id=1),
        ("c:1", 2, 1),
    ),
    "explicit-id-over-jobset": (jobset_env(1, 1), dict(process_id=0), (COORD, 8, 0)),
    "explicit-coordinator-over-jobset": (jobset_env(1, 1), dict(coordinator_address="x:2"), ("x:2", 8, 5)),
    "explicit-count-over-roxxel": (ROXXEL, dict(num_processes=5), ("10.0.0.5:1234", 5, 2)),
    "explicit-single": ({}, dict(num_processes=1, process_id=0), (None, 1, 0)),
    "explicit-coordinator-with-tpu": (GKE_TPU, dict(coordinator_address="h0.t:1"), ("h0.t:1", 4, 3)),
    "explicit-count-with-tpu-coordinator-left-to-jax": (GKE_TPU, dict(num_processes=4), (None, 4, 3)),
}


@pytest.mark.parametrize("env, kwargs, expected", list(EXPLICIT_CASES.values()), ids=list(EXPLICIT_CASES))
def test_explicit_arguments_override_each_value(env, kwargs, expected):
    assert detect(env, **kwargs) == Detected(*expected, "explicit")


ERROR_CASES = {
    "id-not-below-count": (
        ROXXEL | {rd.ENV_PROCESS_ID: "3"},
        {},
        ["process id 3", "ROXXEL_PROCESS_ID", "process count 3"],
    ),
    "negative-id": (ROXXEL | {rd.ENV_PROCESS_ID: "-1"}, {}, ["ROXXEL_PROCESS_ID=-1", ">= 0"]),
    "zero-count": (ROXXEL | {rd.ENV_NUM_PROCESSES: "0"}, {}, ["ROXXEL_NUM_PROCESSES=0", ">= 1"]),
    "non-integer-count": (ROXXEL | {rd.ENV_NUM_PROCESSES: "two"}, {}, ["ROXXEL_NUM_PROCESSES='two'", "not an integer"]),
    "float-id": (ROXXEL | {rd.ENV_PROCESS_ID: "1.0"}, {}, ["ROXXEL_PROCESS_ID='1.0'", "not an integer"]),
    "no-coordinator": (
        {rd.ENV_NUM_PROCESSES: "2", rd.ENV_PROCESS_ID: "0"},
        {},
        ["no coordinator address", "ROXXEL_COORDINATOR_ADDRESS"],
    ),
    "coordinator-without-port": (
        ROXXEL | {rd.ENV_COORDINATOR_ADDRESS: "10.0.0.5"},
        {},
        ["'10.0.0.5'", "no port", "ROXXEL_COORDINATOR_ADDRESS"],
    ),
    "coordinator-no-host": (ROXXEL | {rd.ENV_COORDINATOR_ADDRESS: ":1234"}, {}, ["no host"]),
    "coordinator-bare-ipv6": (ROXXEL | {rd.ENV_COORDINATOR_ADDRESS: "fe80::1:1234"}, {}, ["no port", "brackets"]),
    "coordinator-bad-port": (ROXXEL | {rd.ENV_COORDINATOR_ADDRESS: "h:99999"}, {}, ["invalid port", "99999"]),
    "roxxel-missing-id": (
        {rd.ENV_COORDINATOR_ADDRESS: "h:1", rd.ENV_NUM_PROCESSES: "2"},
        {},
        ["ROXXEL_PROCESS_ID is not set"],
    ),
    "roxxel-count-alone": ({rd.ENV_NUM_PROCESSES: "2"}, {}, ["ROXXEL_PROCESS_ID is not set"]),
    "jobset-index-without-hosts": (
        {rd.ENV_JOB_INDEX: "0", rd.ENV_JOB_COMPLETION_INDEX: "0"},
        {},
        ["incomplete JobSet environment", "JOB_INDEX", "ROXXEL_HOSTS_PER_SLICE", "JOBSET_NAME", "missing"],
    ),
    "jobset-without-slices": (
        {k: v for k, v in jobset_env(0, 0).items() if k != rd.ENV_NUM_SLICES},
        {},
        ["ROXXEL_NUM_SLICES (or REPLICATED_JOB_REPLICAS)"],
    ),
    "jobset-completion-index-too-big": (jobset_env(0, 4), {}, ["JOB_COMPLETION_INDEX=4", "ROXXEL_HOSTS_PER_SLICE=4"]),
    "jobset-job-index-too-big": (jobset_env(2, 0), {}, ["JOB_INDEX=2", "ROXXEL_NUM_SLICES=2"]),
    "jobset-count-mismatch": (jobset_env(0, 0, **{rd.ENV_NUM_PROCESSES: "4"}), {}, ["ROXXEL_NUM_PROCESSES=4", "= 8"]),
    "jobset-replicas-mismatch": (
        jobset_env(0, 0, **{rd.ENV_REPLICATED_JOB_REPLICAS: "3"}),
        {},
        ["ROXXEL_NUM_SLICES=2", "REPLICATED_JOB_REPLICAS=3"],
    ),
    "jobset-bad-name": (jobset_env(0, 0, **{rd.ENV_JOBSET_NAME: "Train_1"}), {}, ["JOBSET_NAME='Train_1'", "RFC 1123"]),
    "jobset-bad-port": (jobset_env(0, 0, **{rd.ENV_COORDINATOR_PORT: "http"}), {}, ["ROXXEL_COORDINATOR_PORT='http'"]),
    "indexed-job-without-service": (
        {k: v for k, v in INDEXED.items() if k != rd.ENV_SERVICE_NAME},
        {},
        ["incomplete Indexed Job environment", "ROXXEL_SERVICE_NAME", "missing"],
    ),
    "indexed-job-index-too-big": (
        INDEXED | {rd.ENV_JOB_COMPLETION_INDEX: "4"},
        {},
        ["process id 4", "JOB_COMPLETION_INDEX"],
    ),
    "tpu-without-worker-id": ({rd.ENV_TPU_WORKER_HOSTNAMES: "a,b"}, {}, ["TPU_WORKER_ID is not set", "2 hosts"]),
    "tpu-worker-id-too-big": (GKE_TPU | {rd.ENV_TPU_WORKER_ID: "4"}, {}, ["TPU_WORKER_ID=4"]),
    "tpu-slice-id-too-big": (
        GKE_TPU | {rd.ENV_MEGASCALE_NUM_SLICES: "2", rd.ENV_MEGASCALE_SLICE_ID: "2"},
        {},
        ["MEGASCALE_SLICE_ID=2"],
    ),
    "explicit-id-too-big": (
        {},
        dict(num_processes=2, process_id=2, coordinator_address="h:1"),
        ["process id 2", "argument process_id"],
    ),
    "explicit-count-without-coordinator": (
        {},
        dict(num_processes=2),
        ["no coordinator address", "argument num_processes"],
    ),
    "explicit-id-alone": ({}, dict(process_id=1), ["process id 1", "process count 1"]),
    "explicit-negative-id": ({}, dict(process_id=-1), ["argument process_id=-1"]),
    "explicit-coordinator-without-port": (
        {},
        dict(coordinator_address="host"),
        ["'host'", "no port", "argument coordinator_address"],
    ),
    "explicit-args-do-not-hide-env-errors": (jobset_env(0, 9), dict(process_id=0), ["JOB_COMPLETION_INDEX=9"]),
}


@pytest.mark.parametrize("env, kwargs, fragments", list(ERROR_CASES.values()), ids=list(ERROR_CASES))
def test_detect_errors_name_the_variable(env, kwargs, fragments):
    with pytest.raises(ValueError) as info:
        detect(env, **kwargs)
    for fragment in fragments:
        assert fragment in str(info.value)


@pytest.mark.parametrize("kwargs", [dict(num_processes="2"), dict(process_id=True), dict(coordinator_address=("h", 1))])
def test_detect_rejects_wrong_argument_types(kwargs):
    with pytest.raises(TypeError):
        detect({}, **kwargs)


def test_downward_api_paths_cover_the_jobset_labels():
    assert set(rd.JOBSET_DOWNWARD_API) == {
        rd.ENV_JOBSET_NAME,
        rd.ENV_REPLICATED_JOB_NAME,
        rd.ENV_JOB_INDEX,
        rd.ENV_REPLICATED_JOB_REPLICAS,
    }
    assert rd.JOBSET_DOWNWARD_API[rd.ENV_JOB_INDEX] == "metadata.labels['jobset.sigs.k8s.io/job-index']"


# --- initialize(): what it asks of JAX, with JAX replaced by a fake -------------------


class FakeJax:
    """Stands in for jax.distributed and the device queries used by initialize()."""

    def __init__(self, initialized=False, info=None):
        self.calls = []
        self.initialized = initialized
        self.shutdowns = 0
        self.info = info

    def initialize(self, **kwargs):
        self.calls.append(kwargs)
        self.initialized = True
        self.kwargs = kwargs

    def process_info(self, source, coordinator):
        if self.info is not None:
            return ProcessInfo(**{**self.info.__dict__, "source": source})
        if self.calls and "process_id" in self.kwargs:
            pid, count = self.kwargs["process_id"], self.kwargs["num_processes"]
        else:
            pid, count = 0, 1
        return ProcessInfo(pid, count, coordinator, source, 2, 2 * count)

    def shutdown(self):
        self.shutdowns += 1
        self.initialized = False


@pytest.fixture
def fake_jax(monkeypatch):
    fake = FakeJax()
    monkeypatch.setattr(runtime, "_record", None)  # initialize() and shutdown() live in roxxel.distributed.runtime
    monkeypatch.setattr(runtime, "_jax_initialize", fake.initialize)
    monkeypatch.setattr(runtime, "_jax_is_initialized", lambda: fake.initialized)
    monkeypatch.setattr(runtime, "_jax_shutdown", fake.shutdown)
    monkeypatch.setattr(runtime, "_process_info", fake.process_info)
    yield fake
    runtime._record = None


def test_initialize_single_process_does_not_touch_jax_distributed(fake_jax):
    info = rd.initialize(env={})
    assert fake_jax.calls == []
    assert (info.process_id, info.num_processes, info.source) == (0, 1, "single")
    rd.shutdown()
    assert fake_jax.shutdowns == 0


def test_initialize_one_process_job_does_not_start_a_coordinator(fake_jax):
    rd.initialize(env=jobset_env(0, 0, slices=1, hosts=1))
    assert fake_jax.calls == []


def test_initialize_jobset_passes_everything_and_timeouts_from_env(fake_jax):
    env = jobset_env(1, 2) | {rd.ENV_INIT_TIMEOUT: "30", rd.ENV_HEARTBEAT_TIMEOUT: "7"}
    info = rd.initialize(env=env)
    assert fake_jax.calls == [
        dict(
            coordinator_address=COORD,
            num_processes=8,
            process_id=6,
            initialization_timeout=30,
            heartbeat_timeout_seconds=7,
        )
    ]
    assert info == ProcessInfo(6, 8, COORD, "jobset", 2, 16)


def test_initialize_arguments_beat_env_timeouts_and_pass_device_ids(fake_jax):
    env = ROXXEL | {rd.ENV_INIT_TIMEOUT: "30"}
    rd.initialize(env=env, initialization_timeout=5, heartbeat_timeout_seconds=6, local_device_ids=[0])
    (call,) = fake_jax.calls
    assert (call["initialization_timeout"], call["heartbeat_timeout_seconds"], call["local_device_ids"]) == (5, 6, [0])


def test_initialize_default_timeouts_are_jax_defaults(fake_jax):
    rd.initialize(env=ROXXEL)
    (call,) = fake_jax.calls
    assert (call["initialization_timeout"], call["heartbeat_timeout_seconds"]) == (300, 100)


@pytest.mark.parametrize("env_value", ["0", "-3", "soon"])
def test_initialize_rejects_bad_timeouts(fake_jax, env_value):
    with pytest.raises(ValueError, match=rd.ENV_INIT_TIMEOUT):
        rd.initialize(env=ROXXEL | {rd.ENV_INIT_TIMEOUT: env_value})
    assert fake_jax.calls == []


def test_initialize_gke_tpu_leaves_detection_to_jax(fake_jax):
    rd.initialize(env=GKE_TPU)
    assert fake_jax.calls == [dict(initialization_timeout=300, heartbeat_timeout_seconds=100)]


def test_initialize_twice_is_harmless(fake_jax):
    first = rd.initialize(env=ROXXEL)
    second = rd.initialize(env={})  # the environment is not read again
    assert second is first
    assert len(fake_jax.calls) == 1
    assert rd.initialize(process_id=2, env=ROXXEL) is first


def test_initialize_twice_with_a_different_identity_fails(fake_jax):
    rd.initialize(env=ROXXEL)
    with pytest.raises(RuntimeError, match="process_id=0"):
        rd.initialize(process_id=0, env=ROXXEL)


def test_initialize_after_someone_else_initialised_jax(fake_jax):
    fake_jax.initialized = True
    fake_jax.info = ProcessInfo(1, 2, "c:1", "?", 1, 2)
    info = rd.initialize(env={rd.ENV_JOB_INDEX: "broken"})  # detection is not even attempted
    assert fake_jax.calls == []
    assert (info.process_id, info.num_processes, info.source) == (1, 2, "external")
    rd.shutdown()
    assert fake_jax.shutdowns == 0  # not ours to shut down


def test_shutdown_after_our_initialize(fake_jax):
    rd.initialize(env=ROXXEL)
    rd.shutdown()
    rd.shutdown()
    assert fake_jax.shutdowns == 1


def test_process_zero_logs_what_was_detected(fake_jax, caplog):
    caplog.set_level(logging.INFO, logger="roxxel.distributed")
    rd.initialize(env=ROXXEL | {rd.ENV_PROCESS_ID: "0"})
    (record,) = [r for r in caplog.records if r.levelno == logging.INFO]
    message = record.getMessage()
    for fragment in ("source=roxxel", "coordinator=10.0.0.5:1234", "processes=3", "process_id=0"):
        assert fragment in message


def test_other_processes_log_quietly(fake_jax, caplog):
    caplog.set_level(logging.INFO, logger="roxxel.distributed")
    rd.initialize(env=ROXXEL)
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []


def test_lone_completion_index_warns(fake_jax, caplog):
    caplog.set_level(logging.WARNING, logger="roxxel.distributed")
    rd.initialize(env={rd.ENV_JOB_COMPLETION_INDEX: "3"})
    assert any("JOB_COMPLETION_INDEX=3" in r.getMessage() for r in caplog.records)


def test_unsupported_jax_keyword_is_dropped_with_a_warning(monkeypatch, caplog):
    import jax

    def old_initialize(coordinator_address=None, num_processes=None, process_id=None, initialization_timeout=300):
        raise AssertionError("not called")

    monkeypatch.setattr(jax.distributed, "initialize", old_initialize)
    caplog.set_level(logging.WARNING, logger="roxxel.distributed")
    kept = runtime._supported_kwargs(dict(process_id=1, heartbeat_timeout_seconds=7))
    assert kept == dict(process_id=1)
    assert "heartbeat_timeout_seconds" in caplog.text
