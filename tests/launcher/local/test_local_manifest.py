"""The local backend executes the rendered manifest: its pods' env, command and policies.

No Kubernetes API server can run here: the manifests are the ones ``render`` produces for a
cluster, the expansion and downward-API rules are Kubernetes' documented ones ("Define
Dependent Environment Variables", "Expose Pod Information to Containers Through Environment
Variables"), and the policy cases follow the Job (podFailurePolicy, backoffLimit) and
JobSet (failurePolicy) documentation.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from roxxel import distributed
from roxxel_launch import render
from roxxel_launch.render import yaml_quoting
from roxxel_launch.backends.local import backend as L
from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.local import pods, policy
from roxxel_launch.backends.base import BackendError, JobState
from roxxel_launch.spec import spec_from_dict


def _spec(name="mj", hosts=2, command=("train",), **extra):
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": name,
        "image": "local",
        "command": list(command),
        "accelerator": {"cpu": {"hosts": hosts}},
        "termination_grace_period": 2,
    }
    data.update(extra)
    return spec_from_dict(data)


# ----------------------------------------------------------------------------- $(VAR) expansion


@pytest.mark.parametrize(
    "text,expected",
    [
        ("$(A)/$(B)", "1/two"),
        ("$$(A)", "$(A)"),  # $$ escapes
        ("$(MISSING)-$(A)", "$(MISSING)-1"),  # an undefined reference stays as it is
        ("cost $5 $", "cost $5 $"),  # $ before anything else, and at the end, stays
        ("$(A", "$(A"),  # unclosed
        ("$$$(A)", "$1"),
        ("", ""),
    ],
)
def test_expand_follows_kubernetes(text, expected):
    assert rendered_pods.expand(text, {"A": "1", "B": "two"}.get) == expected


def test_env_entries_see_only_earlier_entries_and_field_refs_are_not_expanded():
    pod = rendered_pods.RenderedPod(
        "job-0", "ns", "job", None, 0, 0, {"tier": "$(X)"}, {rendered_pods.COMPLETION_INDEX_KEY: "0"}, None, {}
    )
    container = {
        "env": [
            {"name": "LATE", "value": "$(X)-late"},  # X is defined after: left as is
            {"name": "X", "value": "x"},
            {"name": "Y", "value": "$(X)$(X)"},
            {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "NOLABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['absent']"}}},
            {"name": "EMPTY"},
        ]
    }
    env = rendered_pods.container_env(pod, container)
    assert env == {
        "LATE": "$(X)-late",
        "X": "x",
        "Y": "xx",
        "TIER": "$(X)",
        "NS": "ns",
        "NOLABEL": "",
        "EMPTY": "",
        "JOB_COMPLETION_INDEX": "0",
    }  # added last by the Job controller
    with pytest.raises(rendered_pods.UnresolvedReference, match="secretKeyRef"):
        rendered_pods.container_env(
            pod, {"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
        )
    assert rendered_pods.container_argv({"command": ["echo"], "args": ["$(X)", "$$(X)"]}, env) == ["echo", "x", "$(X)"]


# ----------------------------------------------------------------------------- pods and env


def test_the_workers_env_is_the_rendered_jobsets(tmp_path):
    spec = _spec(env={"MY_FLAG": "a$b"}, checkpoint_dir=str(tmp_path / "ckpt"))
    procs = L.worker_processes(spec, tmp_path, base_env={"PATH": "/bin", "ROXXEL_PROCESS_ID": "9"})
    objects = render.render(spec, cluster=False).objects
    pod_list = rendered_pods.manifest_pods(objects)
    assert [p.name for p in pod_list] == ["mj-slice-0-0", "mj-slice-0-1"]
    aliases = pods.host_aliases(pod_list, "mj-slice-0-0.mj:8476", 4321)
    for i, (argv, env) in enumerate(procs):
        assert argv[1:] == ["--", "train"] and argv[0].endswith("roxxel-worker")
        assert (env["JOBSET_NAME"], env["REPLICATED_JOB_NAME"], env["JOB_INDEX"]) == ("mj", "slice", "0")
        assert env["JOB_COMPLETION_INDEX"] == str(i) and env["ROXXEL_RESTART_ATTEMPT"] == "0"
        assert env["MY_FLAG"] == "a$b"  # rendered as a$$b, unescaped as the kubelet does
        assert "ROXXEL_PROCESS_ID" not in env  # not in the manifest, not inherited
        # emptyDir volumes are directories of the pod in the run directory.
        assert env["TMPDIR"] == str(tmp_path / "pods" / f"mj-slice-0-{i}" / "tmp")
        detected = distributed.detect({**env, "ROXXEL_HOST_ALIASES": aliases})
        assert detected == distributed.Detected("127.0.0.1:4321", 2, i, "jobset")


def test_data_dir_reaches_the_workers_also_without_a_data_volume(tmp_path):
    """Before: --data-dir was dropped without a word when the spec had no data: section
    (ROXXEL_DATA_DIR unset in the workers, even one set in the shell stripped), while --help
    and docs/local.md said the workers get the directory."""
    spec = _spec()
    assert spec.data is None
    data = tmp_path / "data"
    data.mkdir()
    given = L.resolve_data_dir(spec, str(data))
    procs = L.worker_processes(
        spec, tmp_path, data_dir=given, base_env={"PATH": "/bin", "ROXXEL_DATA_DIR": "/elsewhere"}
    )
    assert [env["ROXXEL_DATA_DIR"] for _, env in procs] == [str(data), str(data)]
    assert all("ROXXEL_DATA_DIR" not in env for _, env in L.worker_processes(spec, tmp_path, base_env={"PATH": "/bin"}))


def test_a_template_that_drops_an_env_var_fails_the_local_run(tmp_path, monkeypatch):
    """The local run reads the rendered pods: a template that loses JOB_INDEX cannot start."""
    original = yaml_quoting.load_template

    def broken(name):
        text = original(name)
        return text.replace("{% for var in env %}", "{% for var in env if var.name != 'JOB_INDEX' %}")

    monkeypatch.setattr(yaml_quoting, "load_template", broken)
    yaml_quoting.environment.cache_clear()
    try:
        backend = L.LocalBackend(tmp_path / "runs", L.LocalOptions(foreground=True, cwd=str(tmp_path)))
        with pytest.raises(BackendError, match="JOB_INDEX"):
            backend.submit(_spec("broken", command=[sys.executable, "-c", "pass"]))
    finally:
        yaml_quoting.environment.cache_clear()
    assert not (tmp_path / "runs" / "broken").exists()  # nothing started


def test_a_manifest_env_var_added_by_the_spec_reaches_the_workers(tmp_path):
    """A pod_patch adds an env entry to the container; the kubelet's expansion applies."""
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "worker",
                    "env": [{"name": "SLICE_TAG", "value": "slice-$(JOB_INDEX)-host-$(JOB_COMPLETION_INDEX)-$(NOPE)"}],
                }
            ]
        }
    }
    program = "import os; print('TAG', os.environ['SLICE_TAG'], os.environ['JOBSET_NAME'])"
    spec = _spec("patched", command=[sys.executable, "-c", program], pod_patch=patch)
    backend = L.LocalBackend(tmp_path / "runs", L.LocalOptions(foreground=True, cwd=str(tmp_path)))
    status = backend.submit(spec)
    assert status.state is JobState.SUCCEEDED, status.message
    for i in range(2):
        log = (tmp_path / "runs" / "patched" / f"worker-{i}.log").read_text()
        # JOB_COMPLETION_INDEX is added after the template's entries: not yet defined here.
        assert "TAG slice-0-host-$(JOB_COMPLETION_INDEX)-$(NOPE) patched" in log


# ----------------------------------------------------------------------------- the policy engine


def _exit(code, pod="ns/mj-slice-0-1", disrupted=False):
    return policy.PodExit(
        pod=pod, job="mj-slice-0", exit_code=code, container="worker", replicated_job="slice", disrupted=disrupted
    )


def test_the_rendered_jobsets_failure_policy_decides():
    rules = policy.policy_of(render.render(_spec(max_restarts=2)).objects)
    assert rules.blocking_recreate and rules.max_restarts == 2
    config = rules.decide(_exit(78))
    assert (config.action, config.rule, config.reason) == (policy.Action.FAIL, "configError", "PodFailurePolicy")
    assert "failed with exit code 78 matching FailJob rule at index 0" in config.message
    preempted = rules.decide(_exit(42), counted_restarts=2)  # not counted: maxRestarts does not apply
    assert (preempted.action, preempted.counted, preempted.rule) == (policy.Action.RESTART, False, "preemption")
    disrupted = rules.decide(_exit(143, disrupted=True))
    assert (disrupted.action, disrupted.rule) == (policy.Action.RESTART, "preemption")
    crash = rules.decide(_exit(1), counted_restarts=1)
    assert (crash.action, crash.counted, crash.rule) == (policy.Action.RESTART, True, None)
    spent = rules.decide(_exit(1), counted_restarts=2)
    assert (spent.action, spent.reason) == (policy.Action.FAIL, "ReachedMaxRestarts")


def test_an_indexed_job_fails_on_any_failure():
    rules = policy.policy_of(render.render(_spec(workload="indexed-job")).objects)
    for code in (1, 42, 78):
        decision = rules.decide(policy.PodExit(pod="ns/mj-0", job="mj", exit_code=code, container="worker"))
        assert decision.action is policy.Action.FAIL
    assert (
        rules.decide(policy.PodExit(pod="ns/mj-0", job="mj", exit_code=1, container="worker")).reason
        == "BackoffLimitExceeded"
    )


def test_backoff_limit_ignore_rules_and_jobset_rule_matching():
    job = policy.JobPolicy(
        backoff_limit=1,
        pod_failure_rules=(
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [9]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "other", "operator": "NotIn", "values": [0]}},
        ),
    )
    workload = policy.WorkloadPolicy(
        {"slice": job},
        {
            "maxRestarts": 1,
            "rules": [
                {
                    "name": "only-other",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["BackoffLimitExceeded"],
                    "targetReplicatedJobs": ["other"],
                },
                {"name": "by-message", "action": "FailJobSet", "onJobFailureMessagePatterns": ["backoff limit"]},
            ],
        },
    )
    ignored = workload.decide(_exit(9))
    assert (ignored.action, ignored.counted) == (policy.Action.RECREATE_POD, False)
    first = workload.decide(_exit(3))  # rule 1 names another container: counted, within the limit
    assert (first.action, first.counted) == (policy.Action.RECREATE_POD, True)
    second = workload.decide(_exit(3), failed_before=1)
    assert (second.action, second.rule, second.reason) == (policy.Action.FAIL, "by-message", "BackoffLimitExceeded")
    assert policy.WorkloadPolicy({"slice": job}, {}).decide(_exit(3), failed_before=1).reason == "FailedJobs"


def test_the_policy_engine_and_the_manifest_reader_load_without_the_process_code():
    """A simulated cluster reuses them: they must not pull in the supervisor or the backend."""
    code = (
        "import sys; import roxxel_launch.backends.local.policy, roxxel_launch.backends.rendered_pods; "
        "loaded = [m for m in ('roxxel_launch.backends.local.supervisor', 'roxxel_launch.backends.local.backend', "
        "'roxxel_launch.backends.local.pods', 'subprocess') if m in sys.modules]; print(loaded)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_free_preemption_restarts_stop_at_the_pods_restart_budget(tmp_path):
    """Exit 42 restarts the JobSet without counting; each restart raises the pods'
    ``restart-attempt`` annotation, and roxxel-worker refuses an attempt beyond
    max_restarts + max_preemptions with 78, which the configError rule makes final."""
    spec = _spec("budget", command=[sys.executable, "-c", "raise SystemExit(42)"], max_restarts=0, max_preemptions=1)
    backend = L.LocalBackend(tmp_path / "runs", L.LocalOptions(foreground=True, cwd=str(tmp_path)))
    status = backend.submit(spec)
    assert (status.state, status.exit_code, status.reason.value) == (JobState.FAILED, 78, "config_error")
    record = json.loads((tmp_path / "runs" / "budget" / "status.json").read_text())
    assert (record["restarts"], record["restarts_counted"]) == (2, 0)
    assert [a["decision"]["rule"] for a in record["attempts"]] == ["preemption", "preemption", "configError"]
    i = record["failed_process"]  # the first worker that refused; the other may have been stopped first
    log = (tmp_path / "runs" / "budget" / f"worker-{i}.log").read_text()
    assert "gang restart 2 is beyond the job's budget of 1 restarts" in log


@pytest.mark.parametrize(
    "command", [["roxxel-no-such-program-xyz", "train.py"], ["/dev/null"]], ids=["not-found", "not-executable"]
)
def test_a_command_that_cannot_start_fails_the_job_at_once(tmp_path, command):
    """A typo in the command fails the same way in every attempt: roxxel-worker exits 78
    (not a shell's 127/126, which the pod failure policy would count as a failure and
    restart the gang for, max_restarts times), so the configError rule ends the job."""
    spec = _spec("typo", command=command, max_restarts=3)
    backend = L.LocalBackend(tmp_path / "runs", L.LocalOptions(foreground=True, cwd=str(tmp_path)))
    status = backend.submit(spec)
    assert (status.state, status.exit_code, status.reason.value) == (JobState.FAILED, 78, "config_error")
    record = json.loads((tmp_path / "runs" / "typo" / "status.json").read_text())
    assert record["restarts"] == 0
    log = (tmp_path / "runs" / "typo" / f"worker-{record['failed_process']}.log").read_text()
    assert f"{command[0]}: " in log and "a configuration error, not restarted" in log
