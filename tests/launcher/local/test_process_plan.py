"""The job's process plans (roxxel_launch/backends/process_plan.py), as a backend that runs the
pods itself (the local one today, a Slurm or Ray one tomorrow) relies on them: each pod's
command, its environment under the worker contract, its volumes; and the checks that keep a
plan that could not meet from starting."""

from __future__ import annotations

import dataclasses

import pytest

from roxxel import distributed
from roxxel.contract import ENV_HOST_ALIASES
from roxxel_launch import contract
from roxxel_launch.backends import process_plan as P
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.rendered_pods import RESTART_ATTEMPT_KEY, manifest_pods
from support.specs import COMMAND, IMAGE, job_spec


def _spec(**fields):
    return job_spec(accelerator={"cpu": {"hosts": 2}}, checkpoint_dir="/ckpt/lm", **fields)


def test_a_jobsets_plans_are_its_processes_in_order_under_one_coordinator():
    plans = P.spec_plans(_spec(num_slices=2), restarts=3)
    assert [(p.process, p.num_processes, p.pod.name) for p in plans] == [
        (0, 4, "lm-slice-0-0"),
        (1, 4, "lm-slice-0-1"),
        (2, 4, "lm-slice-1-0"),
        (3, 4, "lm-slice-1-1"),
    ]
    assert {p.coordinator_address for p in plans} == {"lm-slice-0-0.lm:8476"}  # process 0's pod, by DNS name
    for plan in plans:
        assert plan.image == IMAGE and plan.argv == ["roxxel-worker", "--", *COMMAND]
        assert plan.command == ("roxxel-worker", "--")  # what replaces the image's entrypoint
        assert plan.env["ROXXEL_RESTART_ATTEMPT"] == "3" and plan.env["ROXXEL_CHECKPOINT_DIR"] == "/ckpt/lm"
        assert plan.pod.labels.get(RESTART_ATTEMPT_KEY) is None  # the attempt is the env's, per call
        # What the worker itself reads: the contract holds without any Kubernetes around.
        assert distributed.detect(plan.env) == distributed.Detected("lm-slice-0-0.lm:8476", 4, plan.process, "jobset")


def test_a_backend_maps_the_coordinator_as_a_slurm_one_would():
    """A backend that runs the processes elsewhere points the pods' DNS names at its hosts
    through ROXXEL_HOST_ALIASES; the plan's env, untouched otherwise, then meets there."""
    plans = P.spec_plans(_spec())
    aliases = f"{plans[0].coordinator_address}=node7:12345"
    for plan in plans:
        detected = distributed.detect({**plan.env, ENV_HOST_ALIASES: aliases})
        assert (detected.coordinator_address, detected.num_processes, detected.process_id) == (
            "node7:12345",
            2,
            plan.process,
        )


def test_an_indexed_jobs_plans_carry_no_restart_attempt():
    plans = P.spec_plans(_spec(workload="indexed-job"), restarts=5)
    assert [p.process for p in plans] == [0, 1]
    assert all("ROXXEL_RESTART_ATTEMPT" not in p.env for p in plans)
    assert [p.env["JOB_COMPLETION_INDEX"] for p in plans] == ["0", "1"]


def test_the_mounts_say_what_each_volume_is():
    spec = _spec(
        data={"pvc": {"claim": "datasets"}},
        volumes=[
            {"name": "scratch", "mount_path": "/scratch", "read_only": False, "empty_dir": {"size_limit": "10Gi"}},
            {"name": "tokens", "mount_path": "/etc/tokens", "secret": "hf-token"},
        ],
    )
    mounts = {m.path: m for m in P.spec_plans(spec)[1].mounts}
    assert mounts[contract.DATA_MOUNT_PATH].data and mounts[contract.DATA_MOUNT_PATH].kind == "persistentVolumeClaim"
    assert mounts[contract.DATA_MOUNT_PATH].read_only is True
    assert mounts[contract.SHM_MOUNT_PATH].shm and not mounts[contract.SHM_MOUNT_PATH].scratch
    scratch = mounts["/scratch"]
    assert (scratch.kind, scratch.scratch, scratch.read_only, scratch.size_limit) == ("emptyDir", True, False, "10Gi")
    tokens = mounts["/etc/tokens"]
    assert (tokens.kind, tokens.read_only, tokens.scratch, tokens.data) == ("secret", True, False, False)
    tmp = mounts["/tmp"]
    assert tmp.scratch and tmp.read_only is None  # the manifest does not say: read-write, as Kubernetes mounts it


def test_secrets_come_from_the_lookup_or_are_named():
    spec = _spec(env_refs={"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}})
    with pytest.raises(BackendError, match="WANDB_API_KEY comes from"):
        P.spec_plans(spec)
    seen = []

    def lookup(name, source):
        seen.append((name, source["secretKeyRef"]["name"]))
        return "k-" + name

    plans = P.spec_plans(spec, secret=lookup)
    assert [p.env["WANDB_API_KEY"] for p in plans] == ["k-WANDB_API_KEY"] * 2
    assert seen == [("WANDB_API_KEY", "wandb")] * 2


def test_argv_expands_against_the_env_a_backend_gives():
    """$(VAR) in a container's args, as a pod_patch may write them (the spec's own command is
    escaped when rendered): expanded against the plan's env, or a backend's version of it."""
    pod = manifest_pods(P.rendered_objects(_spec()))[0]
    container = {**pod.container(contract.CONTAINER_NAME), "args": ["--out=$(ROXXEL_CHECKPOINT_DIR)/x", "$$(literal)"]}
    plan = P.plan(dataclasses.replace(pod, spec={**pod.spec, "containers": [container]}), restart_attempt=0)
    assert plan.argv == ["roxxel-worker", "--", "--out=/ckpt/lm/x", "$(literal)"]
    assert plan.argv_for({**plan.env, "ROXXEL_CHECKPOINT_DIR": "/local/c"})[2] == "--out=/local/c/x"
    escaped = P.spec_plans(_spec(command=["echo", "$(HOME)"]))[0]
    assert escaped.argv[-1] == "$(HOME)"  # the spec's command is the user's words, never expanded


def test_pod_addresses_reach_the_downward_api():
    pods = manifest_pods(P.rendered_objects(_spec()))
    pod = dataclasses.replace(
        pods[1],
        spec={
            **pods[1].spec,
            "containers": [
                {
                    **pods[1].container(contract.CONTAINER_NAME),
                    "env": [
                        *pods[1].container(contract.CONTAINER_NAME)["env"],
                        {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    ],
                    "workingDir": "/work",
                }
            ],
        },
    )
    plans = P.plans([pods[0], pod], restart_attempt=0, pod_ips=["10.0.0.1", "10.0.0.2"])
    assert plans[1].env["MY_IP"] == "10.0.0.2" and plans[1].working_dir == "/work" and plans[0].working_dir is None
    with pytest.raises(BackendError, match="1 pod addresses for 2 pods"):
        P.plans(pods, restart_attempt=0, pod_ips=["10.0.0.1"])


def test_pods_out_of_process_order_are_refused():
    pods = manifest_pods(P.rendered_objects(_spec()))
    with pytest.raises(
        BackendError, match="lm-slice-0-1: the rendered environment makes it process 1 of 2, not 0 of 2"
    ):
        P.plans(pods[::-1], restart_attempt=0)
    with pytest.raises(BackendError, match="no pods"):
        P.plans([], restart_attempt=None)


def _with_env(pod, **values):
    container = pod.container(contract.CONTAINER_NAME)
    env = [e for e in container["env"] if e["name"] not in values] + [
        {"name": k, "value": v} for k, v in values.items()
    ]
    return dataclasses.replace(pod, spec={**pod.spec, "containers": [{**container, "env": env}]})


def test_a_pod_naming_another_coordinator_is_refused():
    pods = manifest_pods(P.rendered_objects(_spec(workload="indexed-job")))
    first = _with_env(pods[0], ROXXEL_NUM_PROCESSES="2", ROXXEL_PROCESS_ID="0", ROXXEL_COORDINATOR_ADDRESS="lm-0.lm:1")
    stray = _with_env(
        pods[1], ROXXEL_NUM_PROCESSES="2", ROXXEL_PROCESS_ID="1", ROXXEL_COORDINATOR_ADDRESS="elsewhere:1"
    )
    with pytest.raises(
        BackendError, match=r"lm-1 would connect to the coordinator elsewhere:1, process 0 \(lm-0\) to lm-0.lm:1"
    ):
        P.plans([first, stray], restart_attempt=None)


def test_a_pod_whose_env_identifies_no_process_is_refused():
    pods = manifest_pods(P.rendered_objects(_spec(workload="indexed-job")))
    broken = _with_env(pods[0], ROXXEL_PROCESS_ID="zero")
    with pytest.raises(BackendError, match="lm-0: the rendered environment does not identify a process"):
        P.plan(broken, restart_attempt=None)


def test_a_container_without_command_has_no_argv():
    pod = manifest_pods(P.rendered_objects(_spec()))[0]
    container = {**pod.container(contract.CONTAINER_NAME), "command": []}
    plan = P.plan(dataclasses.replace(pod, spec={**pod.spec, "containers": [container]}), restart_attempt=0)
    with pytest.raises(BackendError, match="has no command"):
        plan.argv
