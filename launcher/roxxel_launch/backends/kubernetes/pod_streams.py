"""``exec`` and ``port-forward`` into a worker's pod, over the API server's WebSocket subresources.

Both go through the official client's ``kubernetes.stream`` (``websocket-client`` underneath):

* ``exec``: ``GET /api/v1/namespaces/NS/pods/POD/exec?command=...&container=...`` upgraded
  to a WebSocket with the channel protocol ``v5.channel.k8s.io`` or ``v4.channel.k8s.io``:
  every binary message starts with its channel byte (0 stdin, 1 stdout, 2 stderr, 3 error);
  the error channel carries one ``metav1.Status`` when the command ends: ``Success``, or
  ``Failure`` with reason ``NonZeroExitCode`` and the exit code as the message of its cause
  ``ExitCode`` (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/
  #get-connect-exec-of-pod; the channels: k8s.io/apimachinery wsstream, remotecommand).
* ``port-forward``: ``GET .../pods/POD/portforward?ports=PORT`` upgraded the same way
  (``v4.channel.k8s.io``; one WebSocket per forwarded connection): channel 0 carries the
  data, channel 1 the kubelet's error, each opened by a frame of the port number (two bytes,
  little-endian)
  (https://kubernetes.io/docs/tasks/access-application-cluster/port-forward-access-application-cluster/).

Authorization: the WebSocket upgrade is a GET, which API servers before 1.35 authorize as
``get`` on ``pods/exec`` / ``pods/portforward``; from 1.35 they require ``create`` too, as for
the POST that SPDY sends (k8s/rbac/roxxel-launch-role.yaml grants both).
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException
from websocket import WebSocketException

from roxxel.wording import as_clause
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.kubernetes.api import _RBAC_RESOURCE, KubernetesApi

logger = logging.getLogger(__name__)

_CHUNK = 1 << 16


def _refused(err: ApiException, what: str, pod: str, namespace: str, resource: str) -> BackendError:
    """One line for a WebSocket handshake the API server refused (websocket-client's
    WebSocketBadStatusException, which the client wraps into an ApiException with status 0)."""
    cause = err.__context__
    code = getattr(cause, "status_code", None)
    body = getattr(cause, "resp_body", None) or b""
    try:
        message = json.loads(body).get("message") or ""
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    message = message.strip() or (err.reason or "").strip()
    if code == 403:
        return BackendError(
            f"forbidden to {what} pod {namespace}/{pod}: {as_clause(message)}. Your account needs "
            f"RBAC permission to get and create {resource} in namespace {namespace} "
            f"(check: kubectl auth can-i create {resource} -n {namespace}); "
            "k8s/rbac/roxxel-launch-role.yaml grants it"
        )
    if code is None:
        return BackendError(
            f"cannot {what} pod {namespace}/{pod}: {as_clause(message)}. Check the connection to the "
            "API server (kubectl cluster-info)"
        )
    return BackendError(f"the API server refused to {what} pod {namespace}/{pod} (HTTP {code}): {message}")


def require_running(pod: Mapping, who: str) -> None:
    """Raises BackendError unless the pod runs: exec and port-forward reach a running pod only."""
    phase = (pod.get("status") or {}).get("phase") or "Unknown"
    if phase != "Running":
        raise BackendError(
            f"pod {pod['metadata']['name']} ({who}) is {phase}; exec and port-forward need a "
            "running pod (see roxxel-launch status -w)"
        )


def exec_in_pod(
    api: KubernetesApi,
    pod: str,
    container: str,
    command: Sequence[str],
    *,
    out: Callable[[bytes], None],
    err: Callable[[bytes], None],
) -> int:
    """Runs ``command`` (an argv, no shell) in ``container`` of ``pod``; its stdout and stderr
    go to ``out`` and ``err`` as they arrive. Returns its exit code (the error channel's Status).

    Raises: BackendError (refused, or the stream broke before the command ended).
    """
    from kubernetes.stream import stream

    namespace = api.namespace
    try:
        client = stream(
            api.core().connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=list(command),
            container=container,
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            binary=True,
            _preload_content=False,
        )
    except ApiException as error:
        raise _refused(error, "exec in", pod, namespace, _RBAC_RESOURCE["Pod exec"]) from error
    try:
        try:
            while client.is_open():
                client.update(timeout=1)
                _drain(client, out, err)
            _drain(client, out, err)
            status = client.read_channel(3)
        except BrokenPipeError:  # our own output was closed (| head): the caller's to handle
            raise
        except (WebSocketException, OSError) as error:
            # The connection ended without a close frame (websocket-client's
            # WebSocketConnectionClosedException, a reset, a TLS error): the command's end is
            # unknown. What had arrived is shown, then one line.
            with contextlib.suppress(WebSocketException, OSError):
                _drain(client, out, err)
            raise BackendError(
                f"the exec stream of pod {pod} broke before the command ended "
                f"({as_clause(str(error) or type(error).__name__)}); whether it finished is unknown: "
                "check the pod (roxxel-launch logs) and run it again"
            ) from error
    finally:
        with contextlib.suppress(WebSocketException, OSError):
            client.close()
    return _exit_code(status, pod)


def _drain(client: Any, out: Callable[[bytes], None], err: Callable[[bytes], None]) -> None:
    """Hands what stdout and stderr hold to ``out`` and ``err``."""
    for data, sink in ((client.read_stdout(timeout=0), out), (client.read_stderr(timeout=0), err)):
        if data:
            sink(data)


def _exit_code(status: Any, pod: str) -> int:
    """The exit code in the error channel's Status (v4.channel.k8s.io)."""
    if not status:
        raise BackendError(
            f"the exec stream of pod {pod} ended without the command's exit status (the connection broke); run it again"
        )
    try:
        data = json.loads(status)
    except ValueError:
        data = {"status": "Failure", "message": str(status)}
    if data.get("status") == "Success":
        return 0
    causes = (data.get("details") or {}).get("causes") or []
    code = next((c.get("message") for c in causes if c.get("reason") == "ExitCode"), None)
    if data.get("reason") == "NonZeroExitCode" and code is not None and str(code).isdigit():
        return int(code)
    raise BackendError(f"exec in pod {pod} failed: {data.get('message') or data}")


def forward_port(
    api: KubernetesApi, pod: str, local_port: int, remote_port: int, *, on_listen: Callable[[str], None] | None = None
) -> None:
    """Listens on 127.0.0.1:``local_port`` (0: a free port) and forwards each connection to
    ``remote_port`` of ``pod`` over its own port-forward WebSocket, until KeyboardInterrupt.

    Raises: BackendError (the local port is taken).
    """
    try:
        server = socket.create_server(("127.0.0.1", local_port))
    except OSError as error:
        raise BackendError(
            f"cannot listen on 127.0.0.1:{local_port}: {error.strerror or error}; choose "
            f"another local port (e.g. {remote_port + 1}:{remote_port})"
        ) from error
    with server:
        address = "127.0.0.1:%d" % server.getsockname()[1]
        if on_listen is not None:
            on_listen(address)
        while True:
            connection, _ = server.accept()
            threading.Thread(
                target=_forward_one,
                args=(api, pod, connection, remote_port),
                name=f"port-forward-{remote_port}",
                daemon=True,
            ).start()


def _forward_one(api: KubernetesApi, pod: str, connection: socket.socket, remote_port: int) -> None:
    """One local connection through one port-forward WebSocket; a failure is logged (the
    listener goes on, as kubectl's does)."""
    from kubernetes.stream import portforward

    namespace = api.namespace
    with connection:
        try:
            forwarded = portforward(
                api.core().connect_get_namespaced_pod_portforward, pod, namespace, ports=str(remote_port)
            )
        except ApiException as error:
            logger.warning(
                "%s", _refused(error, "forward a port of", pod, namespace, _RBAC_RESOURCE["Pod portforward"])
            )
            return
        remote = forwarded.socket(remote_port)
        try:
            _splice(connection, remote)
        finally:
            with contextlib.suppress(OSError):
                remote.close()
        problem = forwarded.error(remote_port)
        if problem:
            logger.warning("port %d of pod %s/%s: %s", remote_port, namespace, pod, problem.strip())


def _splice(local: socket.socket, remote: Any) -> None:
    """Copies bytes both ways until the remote side ends (after the local side ended, what the
    pod still sends is delivered)."""
    reading = [local, remote]
    while reading:
        ready, _, _ = select.select(reading, [], [])
        for sock in ready:
            try:
                data = sock.recv(_CHUNK)
            except OSError:
                data = b""
            if sock is remote:
                if not data:
                    return
                local.sendall(data)
            elif data:
                remote.sendall(data)
            else:
                reading.remove(local)  # the client is done sending; the answer may still come
