"""Pods as the kubelet shows them: logs (followed, of a container, of the previous
container; https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#get-read-log-of-the-specified-pod),
container restarts, native sidecars
(https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/), pods held Pending
(https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions), and the
exec and port-forward requests whose WebSocket sessions ``k8s_streams`` serves.
"""

from __future__ import annotations

import copy
import subprocess
import time
from typing import Any

from support.k8s_sim.api import FOLLOW_LIMIT_S, status_object
from support.k8s_sim.request import Request


class Pods:
    """Pod logs, containers, exec and port-forward (a mixin of ``FakeKubernetes``)."""

    def log(self, pod: str, *lines: str, container: str | None = None) -> None:
        """Append lines to a pod's log (a followed stream sends them at once): its first
        container's, or ``container``'s."""
        with self._lock:
            self._logs.setdefault(pod if container is None else f"{pod}/{container}", []).extend(lines)
            self._lock.notify_all()

    def log_bytes(self, pod: str, *chunks: bytes) -> None:
        """Append raw chunks to a pod's log (a followed stream sends each as it comes)."""
        with self._lock:
            self._logs.setdefault(pod, []).extend(chunks)
            self._lock.notify_all()

    def end_log(self, pod: str) -> None:
        """End a followed log stream of ``pod`` (as when its container exits)."""
        with self._lock:
            self._log_ended.add(pod)
            self._lock.notify_all()

    def restart_container(self, pod: str, code: int = 1) -> None:
        """The kubelet restarts the first container of ``pod`` in place (a pod whose
        ``restartPolicy`` is OnFailure or Always): the old container exited with ``code``; its
        status moves to ``lastState.terminated`` (with its ``containerID``),
        ``restartCount`` grows, and its log becomes the previous container's log, which
        ``previous=true`` reads
        (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#get-read-log-of-the-specified-pod);
        the new container starts with an empty log."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._lock:
            container = self.objects[("pods", self.namespace, pod)]["status"]["containerStatuses"][0]
            container["lastState"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "finishedAt": now,
                    "containerID": container.get("containerID"),
                }
            }
            container.update(
                restartCount=container["restartCount"] + 1,
                containerID=f"containerd://{next(self._ids):064x}",
                state={"running": {"startedAt": now}},
            )
            self._previous_logs[pod] = self._logs.pop(pod, [])
            self._touch(self.objects[("pods", self.namespace, pod)])
            self._lock.notify_all()

    def add_sidecar(self, pod: str, name: str = "gke-gcsfuse-sidecar") -> None:
        """Inject a native sidecar into ``pod``, as GKE's GCS FUSE webhook does: an init
        container with ``restartPolicy: Always``, running beside the app containers
        (https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/,
        https://cloud.google.com/kubernetes-engine/docs/how-to/cloud-storage-fuse-csi-driver-sidecar)."""
        with self._lock:
            obj = self.objects[("pods", self.namespace, pod)]
            obj["spec"].setdefault("initContainers", []).append(
                {"name": name, "image": f"gke.gcr.io/{name}:v1", "restartPolicy": "Always"}
            )
            obj["status"].setdefault("initContainerStatuses", []).append(
                {
                    "name": name,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": obj["metadata"]["creationTimestamp"]}},
                }
            )
            self._touch(obj)

    def hold(
        self, pod: str, phase: str = "Pending", *, waiting: str | None = None, unschedulable: str | None = None
    ) -> dict:
        """Keep ``pod`` from running, as a stuck pod looks: ``phase`` Pending with its
        container ``waiting`` (ContainerCreating, ErrImagePull, ...) or, with
        ``unschedulable`` (the scheduler's message), condition PodScheduled False, reason
        Unschedulable and no container started
        (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-conditions).
        Returns the pod as stored."""
        with self._lock:
            obj = self.objects[("pods", self.namespace, pod)]
            status = obj["status"]
            status["phase"] = phase
            for container in status.get("containerStatuses") or []:
                container.update(
                    ready=False,
                    state={"waiting": {"reason": waiting}} if waiting else {"waiting": {"reason": "ContainerCreating"}},
                )
            if unschedulable is not None:
                status.pop("containerStatuses", None)
                status["conditions"] = [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
                ]
            self._lock.notify_all()
            return copy.deepcopy(obj)

    def serve_port(self, pod: str, port: int, address: tuple[str, int]) -> None:
        """Port ``port`` of ``pod`` is served by the TCP listener at ``address`` (the pod's
        process, for portforward). A port nobody serves refuses, as the kubelet reports."""
        with self._lock:
            self._real.ports[(pod, port)] = address

    def on_exec(self, run) -> None:
        """``run(argv) -> subprocess.Popen`` (stdout and stderr pipes) runs exec'd commands;
        by default the argv runs on this machine, in place of the container's runtime."""
        with self._lock:
            self._real.exec_runner = run

    @property
    def execs(self) -> list[tuple[str, str, list[str]]]:
        """(pod, container, argv) of every exec, in order."""
        with self._lock:
            return list(self._real.execs)

    def _log_answer(self, request: Request) -> tuple[int, Any]:
        """A pod's log; with ``previous=true`` its previous terminated container's, which the
        kubelet finds from ``lastState.terminated.containerID`` and refuses (400 BadRequest,
        the kubelet's words) when there is none, as in a pod that never restarted one."""
        pod = self.objects.get(("pods", request.namespace, request.name))
        if pod is None:
            return self._not_found("pods", request.name)
        container = request.query.get("container")
        invalid = invalid_container(pod, container)
        if invalid is not None:
            return invalid
        default = (((pod.get("spec") or {}).get("containers") or [{}])[0]).get("name")
        key = request.name if container in (None, default) or default is None else f"{request.name}/{container}"
        previous = request.query.get("previous") == "true"
        if previous:
            statuses = pod["status"].get("containerStatuses") or [{}]
            container = request.query.get("container") or statuses[0].get("name")
            status = next((c for c in statuses if c.get("name") == container), {})
            if not ((status.get("lastState") or {}).get("terminated") or {}).get("containerID"):
                return 400, status_object(
                    400, "BadRequest", f'previous terminated container "{container}" in pod "{request.name}" not found'
                )
        return 200, ("stream", request.namespace, request.name, request.query.get("follow") == "true", previous, key)

    def stream_log(
        self, ns: str, pod: str, follow: bool, write, previous: bool = False, key: str | None = None
    ) -> None:
        """Writes a pod's log lines with ``write(bytes)``; with ``follow`` until it ends. The
        ``previous`` container's log has ended: it is written whole, followed or not. ``key``:
        the log of another container than the first (``POD/CONTAINER``, see :meth:`log`)."""
        logs = self._previous_logs if previous else self._logs
        key = key or pod
        sent = 0
        deadline = time.monotonic() + FOLLOW_LIMIT_S
        while True:
            with self._lock:
                lines = logs.get(key, [])[sent:]
                sent += len(lines)
                obj = self.objects.get(("pods", ns, pod))
                over = (
                    not follow
                    or previous
                    or self._closing
                    or obj is None
                    or pod in self._log_ended
                    or obj["status"]["phase"] in ("Succeeded", "Failed")
                )
                if not lines and not over:
                    self._lock.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                    if time.monotonic() >= deadline:
                        return
                    continue
            if lines:
                write(b"".join(line if isinstance(line, bytes) else (line + "\n").encode() for line in lines))
            if over:
                with self._lock:
                    if not logs.get(key, [])[sent:]:
                        return

    def _stream_answer(self, request: Request) -> tuple[int, Any]:
        """exec and portforward (see ``k8s_streams``): the pod must exist and run, exec's
        container be one of it; then ("upgrade", ...) for the handler to take the connection
        over. Without ``Upgrade: websocket`` (SPDY, which this double does not speak) 400."""
        pod = self.objects.get(("pods", request.namespace, request.name))
        if pod is None:
            return self._not_found("pods", request.name)
        upgrade = dict((k.lower(), v) for k, v in request.headers).get("upgrade", "").lower()
        if upgrade != "websocket":
            return 400, status_object(
                400,
                "BadRequest",
                f"Upgrade request required (this simulated API "
                f"server speaks WebSocket only, not {upgrade or 'plain HTTP'})",
            )
        phase = pod["status"].get("phase")
        if phase in ("Succeeded", "Failed"):  # the API server's message for a finished pod
            return 400, status_object(
                400, "BadRequest", f"cannot exec into a container in a completed pod; current phase is {phase}"
            )
        if request.resource == "portforward":
            port = int(request.query.get("ports", "0") or 0)
            uid = pod["metadata"].get("uid", "")
            refused = (
                f"error forwarding port {port} to pod {request.name}, uid {uid}: failed to connect "
                f"to localhost:{port} inside the pod: connect: connection refused"
            )
            return 101, ("upgrade", "portforward", port, self._real.ports.get((request.name, port)), refused)
        container = request.query.get("container") or pod["spec"]["containers"][0]["name"]
        invalid = invalid_container(pod, container)
        if invalid is not None:
            return invalid
        command = request.query_lists.get("command") or []
        self._real.execs.append((request.name, container, command))
        run = self._real.exec_runner or (
            lambda argv: subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        )
        return 101, ("upgrade", "exec", command, run)


def end_pod(pod: dict, code: int, finished: str, message: str = "") -> None:
    """The kubelet's record of a container that exited with ``code`` (``message``: its
    termination message)."""
    pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
    terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": finished}
    if message:
        terminated["message"] = message
    if not pod["status"].get("containerStatuses"):  # a pod that was never scheduled (hold)
        pod["status"]["containerStatuses"] = [
            {"name": c["name"], "restartCount": 0} for c in pod["spec"].get("containers") or []
        ]
    pod["status"]["containerStatuses"][0].update(ready=False, state={"terminated": terminated})


def invalid_container(pod: dict, container: str | None) -> tuple[int, dict] | None:
    """400 BadRequest for a container that is not one of the pod's (init containers, native
    sidecars among them, included), in the API server's words (pod strategy's
    validateContainer); None when it is one, or none was named, or the pod was stored
    without containers (a test's sketch of one: every pod the API server holds has some)."""
    spec = pod.get("spec") or {}
    names = [
        c.get("name") for key in ("initContainers", "containers", "ephemeralContainers") for c in spec.get(key) or []
    ]
    if container is None or not names or container in names:
        return None
    return 400, status_object(
        400, "BadRequest", f"container {container} is not valid for pod {pod['metadata']['name']}"
    )
