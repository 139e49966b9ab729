"""The operator's verbs: ``list -A``, ``logs -c``, ``exec`` and ``port-forward``.

Against the simulated API server (tests/support/k8s_fake_server.py, real HTTP and, for exec
and port-forward, real WebSocket sessions of the channel protocols, tests/support/k8s_streams.py)
through the CLI and the official client's ``kubernetes.stream``. Connections go to loopback.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

import pytest
import yaml
from click.testing import CliRunner

from roxxel_launch.cli import cli

from support import k8s_streams
from support.k8s_fake_server import FakeKubernetes, use_cluster
from support.specs import spec_dict

pytestmark = pytest.mark.timeout(120)

NS = "team-a"
SPEC = spec_dict(
    namespace=NS,
    accelerator={"cpu": {"hosts": 2}},
    num_slices=1,
    checkpoint_dir="gs://ckpt/lm",
    run_name="lm-run-1",
)


def run(*args, code: int = 0):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKubernetes(namespace=NS) as fake:
        use_cluster(fake, tmp_path, monkeypatch)
        yield fake


def submit(fake, tmp_path, name: str = "lm", namespace: str = NS) -> list[str]:
    path = tmp_path / f"{name}-{namespace}.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "name": name, "namespace": namespace}))
    run("submit", path)
    return sorted(
        p["metadata"]["name"]
        for (r, n, _), p in fake.objects.items()
        if r == "pods" and n == namespace and p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == name
    )


def process_pod(fake, name: str, process: int) -> str:
    return next(
        p["metadata"]["name"]
        for p in fake.pods(name)
        if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == str(process)
    )


# ----------------------------------------------------------------------------- list -A


def test_list_all_namespaces_has_a_namespace_column(fake, tmp_path):
    """``list -A`` reads JobSets, Jobs and pods across namespaces (``/apis/.../jobsets``,
    ``/api/v1/pods`` without a namespace, as ``kubectl get -A``) and prints NAMESPACE first."""
    submit(fake, tmp_path, "lm", NS)
    submit(fake, tmp_path, "other", "team-b")
    here = run("list").output.splitlines()
    assert [line.split()[0] for line in here] == ["NAME", "lm"]  # one namespace: the context's
    everywhere = run("list", "-A").output.splitlines()
    assert everywhere[0].split()[:3] == ["NAMESPACE", "NAME", "STATE"]
    assert [line.split()[:4] for line in everywhere[1:]] == [
        [NS, "lm", "Running", "2"],
        ["team-b", "other", "Running", "2"],
    ]
    assert any(r.path == "/api/v1/pods" for r in fake.calls("GET", "pods"))
    listed = yaml.safe_load(run("list", "--all-namespaces", "--json").output)
    assert [(j["namespace"], j["name"]) for j in listed] == [(NS, "lm"), ("team-b", "other")]


def test_list_all_namespaces_without_cluster_permission_is_one_line_naming_the_fix(fake, tmp_path):
    submit(fake, tmp_path)
    fake.set_role(
        [{"apiGroups": ["jobset.x-k8s.io", "batch", ""], "resources": ["jobsets", "jobs", "pods"], "verbs": ["list"]}]
    )
    assert "lm" in run("list").output  # the namespace's own Role still lists it
    result = run("list", "-A", code=1)
    (line,) = result.output.strip().splitlines()
    assert "may not list jobs across namespaces" in line and "-n NAMESPACE" in line
    assert "ClusterRole" in line and "kubectl auth can-i list jobsets.jobset.x-k8s.io --all-namespaces" in line


def test_list_all_namespaces_refuses_a_namespace_and_local(fake, tmp_path, monkeypatch):
    assert "contradicts --namespace" in run("list", "-A", "-n", NS, code=2).output
    monkeypatch.setenv("ROXXEL_LOCAL_ROOT", str(tmp_path / "runs"))
    assert "local jobs have none" in run("list", "-A", "--local", code=1).output


# ----------------------------------------------------------------------------- logs -c


def test_logs_of_a_sidecar_container_and_an_unknown_one(fake, tmp_path):
    """``-c`` reads another container's log (``container=`` of the log subresource); a name
    that is not one of the pod's containers (native sidecars are init containers) is refused
    in one line listing them, before any log request."""
    pods = submit(fake, tmp_path)
    pod = process_pod(fake, "lm", 1)
    fake.add_sidecar(pod)
    fake.log(pod, "worker line")
    fake.log(pod, "mounted gs://data", container="gke-gcsfuse-sidecar")
    assert run("logs", "lm", "-p", "1", "-c", "gke-gcsfuse-sidecar").output == "mounted gs://data\n"
    assert run("logs", "lm", "-p", "1").output == "worker line\n"
    assert [r.query.get("container") for r in fake.calls("GET", "log")] == ["gke-gcsfuse-sidecar", "worker"]
    fake.requests.clear()
    result = run("logs", "lm", "-p", "1", "-c", "gpudirect", code=1)
    (line,) = result.output.strip().splitlines()
    assert f"pod {pod} (process 1 of lm) has no container 'gpudirect'" in line
    assert "its containers: gke-gcsfuse-sidecar, worker" in line
    assert fake.calls("GET", "log") == []
    assert len(pods) == 2


# ----------------------------------------------------------------------------- exec


def test_exec_streams_output_and_returns_the_remote_exit_code(fake, tmp_path):
    """The command's stdout and stderr come back on their channels; its exit code (3, from
    the error channel's NonZeroExitCode Status) is the CLI's; 0 on Success."""
    submit(fake, tmp_path)
    pod = process_pod(fake, "lm", 1)
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = run("exec", "lm", "--pod", "1", "--", sys.executable, "-c", script, code=3)
    assert result.stdout == "out\n" and result.stderr == "err\n"
    assert fake.execs == [(pod, "worker", [sys.executable, "-c", script])]
    assert run("exec", "lm", "--", sys.executable, "-c", "print('hi')").stdout == "hi\n"
    assert fake.execs[-1][0] == process_pod(fake, "lm", 0)


def test_exec_in_a_sidecar_and_in_an_unknown_container(fake, tmp_path):
    submit(fake, tmp_path)
    pod = process_pod(fake, "lm", 0)
    fake.add_sidecar(pod)
    run("exec", "lm", "-c", "gke-gcsfuse-sidecar", "--", sys.executable, "-c", "pass")
    assert fake.execs == [(pod, "gke-gcsfuse-sidecar", [sys.executable, "-c", "pass"])]
    result = run("exec", "lm", "-c", "nope", "--", "true", code=1)
    assert "has no container 'nope'; its containers: gke-gcsfuse-sidecar, worker" in result.output
    assert len(fake.execs) == 1


def test_exec_refusals_are_one_line(fake, tmp_path, monkeypatch):
    submit(fake, tmp_path)
    assert "give the command after --" in run("exec", "lm", code=2).output
    assert "there is no process 5" in run("exec", "lm", "-p", "5", "--", "true", code=1).output
    fake.set_role(
        [
            {
                "apiGroups": ["jobset.x-k8s.io", "batch", ""],
                "resources": ["jobsets", "jobs", "pods"],
                "verbs": ["get", "list"],
            },
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]},
        ]
    )  # no create
    (line,) = run("exec", "lm", "--", "true", code=1).output.strip().splitlines()
    assert "forbidden to exec in pod" in line and 'cannot create resource "pods/exec"' in line
    assert "kubectl auth can-i create pods/exec -n team-a" in line
    monkeypatch.setenv("ROXXEL_LOCAL_ROOT", str(tmp_path / "runs"))
    assert "no local job 'lm'" in run("exec", "lm", "--local", "--", "true", code=1).output


def test_exec_and_port_forward_refuse_a_pod_that_does_not_run(fake, tmp_path):
    submit(fake, tmp_path)
    fake.settle("jobsets", "lm", "succeed")
    pod = process_pod(fake, "lm", 0)
    (line,) = run("exec", "lm", "--", "true", code=1).output.strip().splitlines()
    assert line == (
        f"Error: pod {pod} (process 0 of lm) is Succeeded; exec and port-forward need a running "
        "pod (see roxxel-launch status -w)"
    )
    assert "is Succeeded" in run("port-forward", "lm", "6006", code=1).output
    assert fake.execs == [] and fake.calls("GET", "portforward") == []


# ----------------------------------------------------------------------------- port-forward


def _echo_server() -> tuple[socket.socket, tuple[str, int]]:
    """A TCP server that answers each line with 'pong: LINE' (the pod's process)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = conn.recv(1024)
                conn.sendall(b"pong: " + data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()


def _forwarding(args: list[str]) -> tuple[threading.Thread, list[str]]:
    said: list[str] = []

    def main() -> None:
        from roxxel_launch.backends.kubernetes.backend import KubernetesBackend

        backend = KubernetesBackend()
        try:
            backend.port_forward(args[0], int(args[1]), int(args[2]), process=int(args[3]), on_listen=said.append)
        except Exception as err:  # noqa: BLE001 - reported to the test
            said.append(f"error: {err}")

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not said:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return thread, said


def test_port_forward_carries_each_connection_to_the_pods_port(fake, tmp_path, caplog):
    """Each local connection gets its own portforward WebSocket to the pod's port (data on
    channel 0); a port nobody serves in the pod is reported from the error channel."""
    submit(fake, tmp_path)
    pod = process_pod(fake, "lm", 1)
    server, address = _echo_server()
    with server:
        fake.serve_port(pod, 6006, address)
        _, said = _forwarding(["lm", "0", "6006", "1"])
        assert said[0].startswith("127.0.0.1:"), said
        port = int(said[0].rsplit(":", 1)[1])
        for n in range(2):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                conn.sendall(f"ping {n}".encode())
                assert conn.recv(1024) == f"pong: ping {n}".encode()
        assert [r.query.get("ports") for r in fake.calls("GET", "portforward")] == ["6006", "6006"]
        assert {r.name for r in fake.calls("GET", "portforward")} == {pod}

        _, said = _forwarding(["lm", "0", "9999", "1"])
        port = int(said[0].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            assert conn.recv(1024) == b""  # the pod refused: the local connection is closed
        deadline = time.monotonic() + 10
        while "connection refused" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        assert f"port 9999 of pod {NS}/{pod}: error forwarding port 9999" in caplog.text


def test_port_forward_cli_says_where_it_listens_and_refuses_bad_ports(fake, tmp_path, monkeypatch):
    submit(fake, tmp_path)
    assert "is not PORT, LOCAL:REMOTE or :REMOTE" in run("port-forward", "lm", "x:6006", code=2).output
    assert "is not PORT" in run("port-forward", "lm", "70000", code=2).output
    taken = socket.create_server(("127.0.0.1", 0))
    with taken:
        port = taken.getsockname()[1]
        result = run("port-forward", "lm", f"{port}:6006", code=1)
        assert f"cannot listen on 127.0.0.1:{port}" in result.output and "choose another local port" in result.output

    from roxxel_launch.backends.kubernetes import pod_streams

    def interrupted(api, pod, local_port, remote_port, *, on_listen):
        on_listen(f"127.0.0.1:{local_port}")
        raise KeyboardInterrupt

    monkeypatch.setattr("roxxel_launch.backends.kubernetes.backend.forward_port", interrupted)
    result = run("port-forward", "lm", "8080:6006", "-p", "1")
    assert result.stderr == "forwarding 127.0.0.1:8080 to port 6006 of lm's process 1; Ctrl-C stops\n"
    assert pod_streams.forward_port is not interrupted
    monkeypatch.setenv("ROXXEL_LOCAL_ROOT", str(tmp_path / "runs"))
    assert "no local job 'lm'" in run("port-forward", "lm", "6006", "--local", code=1).output


def test_a_broken_exec_stream_is_one_line(fake, tmp_path):
    """The connection ends mid-command (no Status on the error channel, no close frame: the
    API server, kubelet or a proxy went away): the output so far, then one line saying the
    command's end is unknown, not websocket-client's traceback."""
    submit(fake, tmp_path)

    def lost(argv):
        raise k8s_streams.ConnectionLost(b"partial\n")

    fake.on_exec(lost)
    result = run("exec", "lm", "--", "true", code=1)
    assert result.stdout.startswith("partial\n")
    assert isinstance(result.exception, SystemExit), result.exception  # not a traceback
    (line,) = [text for text in result.output.splitlines() if text != "partial"]
    assert line.startswith("Error: ") and "exec stream of pod" in line and "run it again" in line


def test_exec_into_a_closed_pipe_ends_quietly(fake, tmp_path, monkeypatch):
    """``exec ... | head``: the reader closed our stdout; exit 141 (128 + SIGPIPE) as a program
    killed by SIGPIPE, no traceback and nothing said about the pod's stream."""
    submit(fake, tmp_path)

    def closed_pipe(*args, out, err):
        out(b"first\n")
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("roxxel_launch.backends.kubernetes.backend.exec_in_pod", closed_pipe)
    result = run("exec", "lm", "--", "true", code=141)
    assert result.output == "first\n"
