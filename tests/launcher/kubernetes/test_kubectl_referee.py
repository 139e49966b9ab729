"""``kubectl``, a client we did not write, as the referee of the simulated cluster.

No Kubernetes API server runs here. ``tests/support/k8s_fake_server.py`` is a test double:
an HTTPS server on 127.0.0.1 (a thread of this process) whose discovery, OpenAPI v3, field
validation, schema checks, watch and delete answers follow the Kubernetes documentation
(each module of tests/support/k8s_*.py cites what it follows). ``kubectl`` (the binary on
PATH, skipped when there is none) talks to it through a kubeconfig the fake writes, exactly
as to a cluster, so where ``kubectl`` and the fake disagree the fake is wrong. The same
rendered manifests also go through ``roxxel-launch submit`` (the official Python client) to
the same server, and both must end the same way: accepted with the same objects sent, or
refused. Connections go to loopback only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch.cli import cli

from support import k8s_schema
from support.k8s_fake_server import FakeKubernetes
from support.paths import REPO

KUBECTL = shutil.which("kubectl")
EXAMPLES = sorted((REPO / "k8s" / "examples").glob("*.yaml"))
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One simulated cluster for the module (kubectl's discovery is cached per cache dir)."""
    home = tmp_path_factory.mktemp("kubectl")
    with FakeKubernetes(namespace="default", tls=True) as fake:
        fake.kubeconfig = fake.write_kubeconfig(home / "kubeconfig")
        fake.cache_dir = home / "cache"
        fake.kueue("team-a")  # the LocalQueue the TPU example names (roxxel-launch checks it exists)
        yield fake


@pytest.fixture
def fake(cluster, monkeypatch):
    """The cluster with no objects; roxxel-launch uses it through KUBECONFIG."""
    with cluster._lock:
        cluster.objects.clear()
        cluster.requests.clear()
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    return cluster


def kubectl_command(fake, *args: str) -> list[str]:
    return [KUBECTL, f"--kubeconfig={fake.kubeconfig}", f"--cache-dir={fake.cache_dir}", "--request-timeout=20s", *args]


def kubectl(fake, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    result = subprocess.run(kubectl_command(fake, *args), capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    return result


def launch(*args, code: int = 0):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


def render(spec, path, *sets: str) -> list[dict]:
    # --no-schema: the offline schema check is slow, and submit runs it again anyway
    launch("render", spec, "-o", path, "--no-schema", *(x for s in sets for x in ("--set", s)))
    return list(yaml.safe_load_all(path.read_text()))


def sent(fake, *, by_kubectl: bool) -> list[dict]:
    """The bodies of the creates that kubectl (or the Python client) sent, without the
    annotation kubectl adds for client-side apply."""
    bodies = []
    for request in fake.calls("POST"):
        if (request.query.get("fieldManager") == "kubectl-client-side-apply") != by_kubectl:
            continue
        body = yaml.safe_load(yaml.safe_dump(request.body))
        annotations = body["metadata"].get("annotations") or {}
        annotations.pop(LAST_APPLIED, None)
        if not annotations:
            body["metadata"].pop("annotations", None)
        bodies.append(body)
    return sorted(bodies, key=lambda b: b["kind"])


# ----------------------------------------------------------------------------- same outcome


@pytest.mark.parametrize(
    "example",
    [pytest.param(e, id=e.stem, marks=() if e.stem == "cpu-smoke" else pytest.mark.slow) for e in EXAMPLES]
    + [pytest.param("indexed-job", id="cpu-smoke-indexed-job", marks=pytest.mark.slow)],
)
def test_rendered_examples_pass_a_server_dry_run_by_kubectl_and_by_roxxel_launch(fake, tmp_path, example):
    """Every example spec, rendered, is accepted by ``kubectl apply --dry-run=server`` (which
    asks for strict field validation, https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation)
    and by ``roxxel-launch submit --dry-run``; both send the same objects; nothing is created
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#dry-run)."""
    spec, sets = (
        (example, ())
        if example != "indexed-job"
        else (REPO / "k8s" / "examples" / "cpu-smoke.yaml", ("workload=indexed-job",))
    )
    objects = render(spec, tmp_path / "manifest.yaml", *sets)
    priority_class = yaml.safe_load(Path(spec).read_text()).get("priority_class")
    if priority_class:  # made by the cluster's admin first (docs/run-on-gke.md); submit checks it exists
        fake.add_priority_class(priority_class)
    result = kubectl(fake, "apply", "--dry-run=server", "-f", str(tmp_path / "manifest.yaml"))
    names = [f"{o['kind']}/{o['metadata']['name']}" for o in objects]
    assert len(result.stdout.strip().splitlines()) == len(objects), result.stdout
    assert all(line.endswith("created (server dry run)") for line in result.stdout.splitlines())
    assert "Warning" not in result.stderr, result.stderr
    assert [r.query.get("fieldValidation") for r in fake.calls("POST")] == ["Strict"] * len(objects)

    launch("submit", spec, "--dry-run", *(x for s in sets for x in ("--set", s)))
    ours = sent(fake, by_kubectl=False)
    # roxxel-launch also dry-runs one worker pod made from the rendered template (admission).
    assert [o["metadata"]["name"] for o in ours if o["kind"] == "Pod"] != []
    ours = [o for o in ours if o["kind"] != "Pod"]
    assert sent(fake, by_kubectl=True) == ours == sorted(objects, key=lambda o: o["kind"]), names
    assert all(r.dry_run for r in fake.calls("POST")) and not any(key[0] != "pods" for key in fake.objects)


def test_an_unknown_field_is_refused_by_both_as_strict_validation_demands(fake, tmp_path):
    """An unknown field in the pod template: under ``fieldValidation=Strict`` (kubectl's
    default) the API server fails the create with 400 BadRequest naming every unknown field;
    under ``Warn`` it drops them and says so in ``Warning`` headers, which kubectl prints
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation).
    ``roxxel-launch`` refuses the same manifest before sending anything."""
    spec = REPO / "k8s" / "examples" / "cpu-smoke.yaml"
    bogus = tmp_path / "bogus.yaml"  # the same field, through the spec's pod_patch
    bogus.write_text(
        yaml.safe_dump(
            {
                **yaml.safe_load(spec.read_text()),
                "pod_patch": {"spec": {"containers": [{"name": "worker", "bogusField": 1}]}},
            }
        )
    )
    path = tmp_path / "manifest.yaml"
    patched = yaml.safe_load(yaml.safe_dump(render(spec, tmp_path / "plain.yaml")))
    jobset = next(o for o in patched if o["kind"] == "JobSet")
    pod_spec = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod_spec["containers"][0]["bogusField"] = 1
    jobset["spec"]["restartPolicyTypo"] = "Never"
    path.write_text(yaml.safe_dump_all(patched))

    refused = kubectl(fake, "apply", "--dry-run=server", "-f", str(path), code=1)
    field = "spec.replicatedJobs[0].template.spec.template.spec.containers[0].bogusField"
    assert (
        f'Error from server (BadRequest): error when creating "{path}": JobSet in version '
        f'"v1alpha2" cannot be handled as a JobSet: strict decoding error: unknown field '
        f'"{field}", unknown field "spec.restartPolicyTypo"'
    ) in refused.stderr

    warned = kubectl(fake, "apply", "--dry-run=server", "--validate=warn", "-f", str(path))
    assert f'Warning: unknown field "{field}"' in warned.stderr
    assert "jobset.jobset.x-k8s.io/roxxel-smoke created (server dry run)" in warned.stdout

    fake.requests.clear()
    result = launch("submit", bogus, "--dry-run", code=1)
    assert "invalid manifests" in result.output and "bogusField" in result.output
    assert fake.calls("POST") == []


def test_schema_and_cel_rules_of_the_jobset_crd_are_enforced(fake, tmp_path):
    """What the JobSet CRD's structural schema refuses (an enum value, a required field) and
    what its CEL rules refuse, and an object name that is not a DNS label, with 422 Invalid
    and one cause each
    (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules);
    kubectl prints them as a cluster's errors."""
    if not k8s_schema.cel_available():
        pytest.skip("cel-python is not installed: the fake cannot evaluate CEL rules")
    objects = render(REPO / "k8s" / "examples" / "cpu-smoke.yaml", tmp_path / "plain.yaml")
    jobset = next(o for o in objects if o["kind"] == "JobSet")
    jobset["spec"]["failurePolicy"]["rules"][0]["action"] = "Explode"
    jobset["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    jobset["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "other", "status": "Ready"}]
    del jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["name"]
    path = tmp_path / "jobset.yaml"
    path.write_text(yaml.safe_dump(jobset))
    refused = kubectl(fake, "apply", "--dry-run=server", "-f", str(path), code=1)
    assert 'The JobSet "roxxel-smoke" is invalid:' in refused.stderr, refused.stderr
    for line in [
        'spec.failurePolicy.rules[0].action: Unsupported value: "Explode": supported '
        'values: "FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"',
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].name: Required value",
        'spec: Invalid value: "object": StartupPolicy and DependsOn APIs are mutually exclusive',
    ]:
        assert line in refused.stderr, refused.stderr
    assert not any(key[0] == "jobsets" for key in fake.objects)

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "Bad_Name"},
        "spec": {"clusterIP": "None", "selector": {"a": "b"}},
    }
    path.write_text(yaml.safe_dump(service))
    refused = kubectl(fake, "apply", "--dry-run=server", "-f", str(path), code=1)
    assert (
        'The Service "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": must be a DNS-1123 label'
    ) in refused.stderr, refused.stderr


# ----------------------------------------------------------------------------- the verbs


def test_get_logs_wait_and_delete_a_job_with_kubectl(fake, tmp_path):
    """``kubectl explain`` reads the JobSet schema from the OpenAPI v3 document
    (https://kubernetes.io/docs/concepts/overview/kubernetes-api/#openapi-v3);
    applying again patches it (a merge patch) and creating again is refused with 409 AlreadyExists
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#create);
    ``kubectl get -o yaml`` lists what the fake holds; ``kubectl logs`` reads a pod's log
    (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#get-read-log-of-the-specified-pod);
    ``kubectl wait --for=condition=Completed`` watches the JobSet until its controller marks it
    completed (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes)
    and ``kubectl get jobsets`` prints the CRD's printer columns from the server's Table
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables);
    ``kubectl delete`` removes it with its pods (a custom resource's DELETE answers with the
    object, https://kubernetes.io/docs/reference/using-api/api-concepts/#deletion)."""
    path = tmp_path / "manifest.yaml"
    render(REPO / "k8s" / "examples" / "cpu-smoke.yaml", path)
    created = kubectl(fake, "apply", "-f", str(path))
    assert "jobset.jobset.x-k8s.io/roxxel-smoke created" in created.stdout
    # Again: the NetworkPolicy is unchanged; the JobSet's replicatedJobs list now holds the
    # CRD's defaults, so kubectl's three-way merge sends it whole again as a merge patch.
    uid = fake.get("jobsets", "roxxel-smoke")["metadata"]["uid"]
    again = kubectl(fake, "apply", "-f", str(path))
    assert "networkpolicy.networking.k8s.io/roxxel-smoke unchanged" in again.stdout
    assert "jobset.jobset.x-k8s.io/roxxel-smoke configured" in again.stdout
    assert fake.get("jobsets", "roxxel-smoke")["metadata"]["uid"] == uid
    exists = kubectl(fake, "create", "-f", str(path), code=1)
    assert (
        f'Error from server (AlreadyExists): error when creating "{path}": '
        'jobsets.jobset.x-k8s.io "roxxel-smoke" already exists'
    ) in exists.stderr
    explained = kubectl(fake, "explain", "jobset.spec.failurePolicy.restartStrategy").stdout
    assert "KIND:       JobSet" in explained and "BlockingRecreate" in explained  # OpenAPI v3

    listed = yaml.safe_load(kubectl(fake, "get", "jobsets,jobs,pods", "-o", "yaml").stdout)
    kinds = [item["kind"] for item in listed["items"]]
    assert listed["kind"] == "List" and kinds == ["JobSet", "Pod", "Pod"], kinds
    pod = listed["items"][1]["metadata"]["name"]
    assert listed["items"][1]["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "roxxel-smoke"

    fake.log(pod, "step 1 loss 2.5", "step 2 loss 2.1")
    logs = kubectl(fake, "logs", f"pod/{pod}")
    assert logs.stdout == "step 1 loss 2.5\nstep 2 loss 2.1\n"

    waiting = subprocess.Popen(
        kubectl_command(fake, "wait", "--for=condition=Completed", "jobset/roxxel-smoke", "--timeout=30s"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not any(r.query.get("watch") == "true" for r in fake.calls("GET", "jobsets")):
            assert waiting.poll() is None and time.monotonic() < deadline, waiting.communicate()
            time.sleep(0.05)
        fake.settle("jobsets", "roxxel-smoke", "succeed")
        out, err = waiting.communicate(timeout=30)
    finally:
        waiting.kill()
    assert waiting.returncode == 0 and "jobset.jobset.x-k8s.io/roxxel-smoke condition met" in out, err
    table = kubectl(fake, "get", "jobsets").stdout.splitlines()  # the CRD's printer columns
    assert table[0].split() == ["NAME", "TERMINALSTATE", "RESTARTS", "COMPLETED", "SUSPENDED", "AGE"]
    assert table[1].split()[:4] == ["roxxel-smoke", "Completed", "0", "True"], table

    deleted = kubectl(fake, "delete", "-f", str(path))
    assert 'jobset.jobset.x-k8s.io "roxxel-smoke" deleted' in deleted.stdout
    assert 'networkpolicy.networking.k8s.io "roxxel-smoke" deleted' in deleted.stdout
    assert fake.objects == {}
    none = kubectl(fake, "get", "jobsets,pods", "-o", "name")
    assert none.stdout == ""


# ----------------------------------------------------------------------------- the Python client


def test_the_python_client_gets_the_same_field_validation_answers(fake):
    """The official Python client against the same server: without ``fieldValidation`` the
    API server warns (``Warn`` is its default) and drops the unknown field; with ``Strict`` it
    refuses with 400 BadRequest
    (https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation)."""
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(fake.kubeconfig)))
    objects = render(REPO / "k8s" / "examples" / "cpu-smoke.yaml", fake.cache_dir.parent / "p.yaml")
    jobset = next(o for o in objects if o["kind"] == "JobSet")
    jobset["spec"]["bogus"] = True
    args = ("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", jobset)
    with pytest.raises(client.ApiException) as refused:
        api.create_namespaced_custom_object(*args, field_validation="Strict")
    assert refused.value.status == 400
    status = json.loads(refused.value.body)
    assert (status["reason"], status["message"]) == (
        "BadRequest",
        'JobSet in version "v1alpha2" cannot be handled as a JobSet: strict decoding error: unknown field "spec.bogus"',
    )
    _, code, headers = api.create_namespaced_custom_object_with_http_info(*args)
    assert code == 201 and headers["Warning"] == '299 - "unknown field \\"spec.bogus\\""'
    assert "bogus" not in fake.get("jobsets", "roxxel-smoke")["spec"]


# ----------------------------------------------------------------------------- the docs' commands


def doc_kubectl_commands(page: str) -> list[str]:
    """The inline commands of a page that involve kubectl (``...`` spans, in order)."""
    text = re.sub(r"```.*?```", "", (REPO / page).read_text(), flags=re.S)  # not the blocks
    spans = (" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text))
    return [c for c in spans if c.startswith(("kubectl ", "roxxel-launch render")) and "kubectl" in c]


@pytest.mark.slow
def test_the_by_hand_commands_of_run_on_gke_work_against_the_cluster(fake, tmp_path):
    """docs/run-on-gke.md says how to do by hand what ``submit``, ``logs -f`` and ``resume``
    do: render piped into ``kubectl create``, ``kubectl logs -f`` of process 0 by label
    selector, and a delete then a create again. Run verbatim (SPEC = the example) against the
    cluster; a followed log ends when the pod terminates
    (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_logs/)."""
    commands = doc_kubectl_commands("docs/run-on-gke.md")
    create, logs, delete = (
        next(c for c in commands if c.startswith(prefix))
        for prefix in (
            "roxxel-launch render SPEC | kubectl create",
            "kubectl logs -f",
            "roxxel-launch render SPEC | kubectl delete",
        )
    )
    spec = "k8s/examples/tpu-v5p-multislice.yaml"
    env = {
        **{k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")},
        "KUBECONFIG": str(fake.kubeconfig),
        "KUBECACHEDIR": str(fake.cache_dir),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }

    def shell(command: str, code: int = 0) -> subprocess.CompletedProcess:
        result = subprocess.run(
            command.replace("SPEC", spec), shell=True, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == code, (command, result.stdout, result.stderr)
        return result

    assert shell(create).stdout.splitlines() == [
        "networkpolicy.networking.k8s.io/lm-v5p created",
        "jobset.jobset.x-k8s.io/lm-v5p created",
    ]
    process0 = next(
        p
        for p in fake.pods("lm-v5p")
        if p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "0"
        and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    )["metadata"]["name"]
    following = subprocess.Popen(logs, shell=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not fake.calls("GET", "log"):
            assert following.poll() is None and time.monotonic() < deadline, following.communicate()
            time.sleep(0.05)
        fake.log(process0, "step 100 loss 1.9")
        fake.settle("jobsets", "lm-v5p", "succeed", namespace="ml")
        out, err = following.communicate(timeout=60)
    finally:
        following.kill()
    assert following.returncode == 0 and out == "step 100 loss 1.9\n", (out, err)
    assert [r.name for r in fake.calls("GET", "log")] == [process0]

    # Resume by hand: delete what render made, then create it again.
    assert shell(delete).stdout.splitlines() == [
        'networkpolicy.networking.k8s.io "lm-v5p" deleted',
        'jobset.jobset.x-k8s.io "lm-v5p" deleted',
    ]
    shell(create)
    assert fake.submissions("lm-v5p") == 2


# ----------------------------------------------------------------------------- the operator's verbs


def own_lines(stderr: str) -> list[str]:
    """kubectl's stderr without its klog lines (``E1204 15:16:54.520222 ...``: discovery
    notes about API groups the fake lists but does not serve)."""
    return [line for line in stderr.splitlines() if not re.match(r"[EWI]\d{4} ", line)]


def _running_job(fake, tmp_path, namespace: str = "default") -> list[str]:
    """The cpu-smoke example created by kubectl in ``namespace``; its pods' names."""
    path = tmp_path / f"manifest-{namespace}.yaml"
    render(REPO / "k8s" / "examples" / "cpu-smoke.yaml", path, f"namespace={namespace}")
    kubectl(fake, "apply", "-n", namespace, "-f", str(path))
    return sorted(p["metadata"]["name"] for (r, n, _), p in fake.objects.items() if r == "pods" and n == namespace)


def test_get_all_namespaces_and_list_all_namespaces_agree(fake, tmp_path):
    """``kubectl get jobsets -A`` lists across namespaces (no namespace in the path) and prints
    NAMESPACE first (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/);
    ``roxxel-launch list -A`` reads the same lists and prints the same pairs."""
    _running_job(fake, tmp_path, "default")
    _running_job(fake, tmp_path, "ml")
    table = kubectl(fake, "get", "jobsets", "-A").stdout.splitlines()
    assert table[0].split()[:2] == ["NAMESPACE", "NAME"], table
    by_kubectl = [tuple(line.split()[:2]) for line in table[1:]]
    listed = launch("list", "-A").output.splitlines()
    assert listed[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert (
        [tuple(line.split()[:2]) for line in listed[1:]]
        == by_kubectl
        == [("default", "roxxel-smoke"), ("ml", "roxxel-smoke")]
    )
    pods = kubectl(fake, "get", "pods", "-A", "-o", "name").stdout.split()
    assert len(pods) == 4 and any(r.path == "/api/v1/pods" for r in fake.calls("GET", "pods"))


def test_logs_of_another_container_by_kubectl_and_by_roxxel_launch(fake, tmp_path):
    """``kubectl logs -c`` reads a named container's log (init containers, native sidecars
    among them, included); an unknown name is "container X is not valid for pod Y" (kubectl
    says it from the pod it read; the API server answers the same with 400 BadRequest);
    roxxel-launch reads the same log and refuses the same name, listing the pod's containers."""
    pod = _running_job(fake, tmp_path)[0]
    fake.add_sidecar(pod)
    fake.log(pod, "mounted gs://data", container="gke-gcsfuse-sidecar")
    assert kubectl(fake, "logs", pod, "-c", "gke-gcsfuse-sidecar").stdout == "mounted gs://data\n"
    refused = kubectl(fake, "logs", pod, "-c", "nope", code=1)
    # kubectl checks the name against the pod it read first, in the API server's words, and
    # sends no log request.
    assert own_lines(refused.stderr) == [f"error: container nope is not valid for pod {pod}"]
    assert [r.query.get("container") for r in fake.calls("GET", "log")] == ["gke-gcsfuse-sidecar"]
    assert launch("logs", "roxxel-smoke", "-n", "default", "-c", "gke-gcsfuse-sidecar").output == "mounted gs://data\n"
    assert (
        "its containers: gke-gcsfuse-sidecar, worker"
        in launch("logs", "roxxel-smoke", "-n", "default", "-c", "nope", code=1).output
    )


def test_exec_by_kubectl_and_by_roxxel_launch(fake, tmp_path):
    """``kubectl exec`` over WebSocket (kubectl >= 1.31 asks for ``v5.channel.k8s.io``; on an
    upgrade failure it would fall back to SPDY, which the fake does not speak): stdout and
    stderr come back apart, and the command's exit code is kubectl's (from the error channel's
    NonZeroExitCode Status, https://kubernetes.io/docs/reference/kubectl/generated/kubectl_exec/).
    roxxel-launch exec gets the same."""
    pod = _running_job(fake, tmp_path)[0]
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    done = kubectl(fake, "exec", pod, "-c", "worker", "--", sys.executable, "-c", script, code=3)
    assert (done.stdout, own_lines(done.stderr)) == ("out\n", ["err", "command terminated with exit code 3"])
    assert fake.calls("GET", "exec")[-1].query_lists["command"] == [sys.executable, "-c", script]
    ours = launch("exec", "roxxel-smoke", "-n", "default", "--", sys.executable, "-c", script, code=3)
    assert (ours.stdout, ours.stderr) == ("out\n", "err\n")
    assert [e[1:] for e in fake.execs] == [("worker", [sys.executable, "-c", script])] * 2


# No referee for ``kubectl port-forward``: kubectl (>= 1.31) tunnels SPDY/3.1 over its WebSocket
# (sub-protocol ``SPDY/3.1+portforward.k8s.io``) and falls back to plain SPDY, neither of which
# the fake speaks; it refuses both in one line. roxxel-launch's port-forward uses the client's
# ``v4.channel.k8s.io`` (tests/launcher/kubernetes/test_k8s_verbs.py).
