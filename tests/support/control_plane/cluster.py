"""A Kubernetes control plane on this machine, from the upstream programs (see the package
docstring): start, wait until ready, stop.

Every component is a process of this machine listening on loopback only, on ports chosen free
at start; their logs are in ``STATE/logs/``. The state directory holds the certificates, the
kubeconfig, etcd's data and ``cluster.json`` (ports and process ids), so that another process
(``./dev.sh cluster down``, a second pytest worker) can find and stop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from support.net import free_port

from . import manifests, nodes, pki

START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0  # per component, from SIGTERM to SIGKILL and after it
KUBE_VERBOSITY = "1"


class ClusterError(RuntimeError):
    """A component did not start or answer in time; the message names it and its log."""


# Kueue (cmd/kueue/main.go) reads its metrics server's certificate from this fixed path whenever
# its internal certificate management is off, and exits when it is missing, even with the
# metrics server disabled (as here: bindAddress "0", so the certificate is never served).
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def kueue_metrics_certificate(source: Path) -> None:
    """Puts a certificate at :data:`KUEUE_METRICS_CERTS` unless one is there.

    Raises: ClusterError when the path cannot be written (not root)."""
    if (KUEUE_METRICS_CERTS / "tls.crt").is_file() and (KUEUE_METRICS_CERTS / "tls.key").is_file():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            tmp = KUEUE_METRICS_CERTS / f".{name}.tmp"
            shutil.copyfile(source / name, tmp)
            tmp.chmod(0o600)
            os.replace(tmp, KUEUE_METRICS_CERTS / name)
    except OSError as err:
        raise ClusterError(
            f"Kueue needs a certificate at {KUEUE_METRICS_CERTS} (its fixed metrics path) and this user cannot "
            f"write it ({err}): run as root, or create it once (sudo mkdir -p {KUEUE_METRICS_CERTS} && sudo cp "
            f"{source}/tls.* {KUEUE_METRICS_CERTS}/)"
        ) from err


@dataclass
class ControlPlane:
    """The control plane whose state is in ``state`` and whose programs are in ``home``
    (:func:`.build.build`)."""

    state: Path
    home: Path
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    # Seconds from the start of :meth:`start` until each readiness wait passed, in order.
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        """The administrator's kubeconfig (group ``system:masters``)."""
        return self.state / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def bin(self, name: str) -> str:
        return str(self.home / "bin" / name)

    # ---------------------------------------------------------------- start

    def start(self, *, log=None) -> None:
        """Starts every component and waits until the API server, the controllers' webhooks
        and the nodes are ready. On a failure, stops what it started.

        Raises: ClusterError naming the component and its log."""
        started = self._started = time.monotonic()
        self.timings = {}
        try:
            self._start(log)
        except BaseException:
            self.stop()
            raise
        if log:
            print(f"control plane: ready in {time.monotonic() - started:.1f} s", file=log, flush=True)

    def _start(self, log) -> None:
        for sub in ("pki", "logs", "etcd", "config", "bin", "webhook-certs"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        names = (
            "etcd",
            "etcd-peer",
            "apiserver",
            "jobset-webhook",
            "jobset-health",
            "kueue-webhook",
            "kueue-health",
            "kwok",
        )
        self.ports = {name: free_port() for name in names}
        pki.make_all(self.state / "pki")
        for name in ("webhooks.crt", "webhooks.key"):
            shutil.copyfile(self.state / "pki" / name, self.state / "webhook-certs" / name.replace("webhooks", "tls"))
        self._write_kubeconfig()
        os.symlink(self.bin("kubectl"), self.state / "bin" / "kubectl") if not (
            self.state / "bin" / "kubectl"
        ).exists() else None
        self._save()
        self._spawn(
            "etcd",
            [self.bin("etcd"), str(self.state / "etcd"), f"http://127.0.0.1:{self.ports['etcd']}",
             f"http://127.0.0.1:{self.ports['etcd-peer']}"],
        )  # fmt: skip
        self._wait("etcd", lambda: self._http_ok(f"http://127.0.0.1:{self.ports['etcd']}/health"))
        self._spawn("kube-apiserver", self._apiserver_args())
        self._wait("kube-apiserver", lambda: self._http_ok(f"{self.server}/readyz"))
        ca = (self.state / "pki" / "ca.crt").read_bytes()
        upstream = self.home / "upstream"
        self.apply(
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                for n in ("kueue-system", "jobset-system")
            ]
            + manifests.jobset_crds(upstream)
            + manifests.kueue_crds(upstream, ca, self.ports["kueue-webhook"]),
            name="crds",
        )
        self._wait("the CRDs", self._crds_established)
        self._spawn("kube-controller-manager", self._controller_manager_args())
        self._spawn("kube-scheduler", self._scheduler_args())
        self._spawn("kwok", self._kwok_args())
        self._spawn(
            "jobset", [self.bin("jobset"), f"--config={self._jobset_config()}", f"--kubeconfig={self.kubeconfig}"]
        )
        kueue_metrics_certificate(self.state / "webhook-certs")
        # Kueue's on-demand visibility API (an aggregated API server with a certificate at a fixed
        # path) is off: roxxel-launch does not read it.
        self._spawn(
            "kueue",
            [self.bin("kueue"), f"--config={self._kueue_config()}", f"--kubeconfig={self.kubeconfig}",
             "--feature-gates=VisibilityOnDemand=false"],
        )  # fmt: skip
        for name in ("jobset", "kueue"):
            self._wait(name, lambda name=name: self._http_ok(f"http://127.0.0.1:{self.ports[name + '-health']}/readyz"))
            self._wait(name + " webhook", lambda name=name: self._tls_listens(self.ports[name + "-webhook"]))
        self.apply(
            manifests.jobset_webhooks(upstream, ca, self.ports["jobset-webhook"])
            + manifests.kueue_webhooks(upstream, ca, self.ports["kueue-webhook"])
            + nodes.all_nodes(),
            name="webhooks-and-nodes",
        )
        self._wait("kwok's nodes", lambda: self._all_true("nodes", "Ready"), process="kwok")
        self._wait(
            "the default ServiceAccount",
            lambda: self.kubectl_ok("get", "serviceaccount", "default", "-n", "default"),
            process="kube-controller-manager",
        )

    # ---------------------------------------------------------------- components

    def _apiserver_args(self) -> list[str]:
        pki_dir = self.state / "pki"
        return [
            self.bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # GKE's: RBAC and Node authorisation, and its admission chain (the defaults:
            # NamespaceLifecycle, LimitRanger, ServiceAccount, PodSecurity, Priority,
            # DefaultTolerationSeconds, ResourceQuota, the admission webhooks and policies, ...)
            # with NodeRestriction added.
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            # The `kubernetes` Service's endpoint would be 127.0.0.1, which Endpoints refuse;
            # nothing here runs in a pod that would call it.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--v={KUBE_VERBOSITY}",
        ]

    def _controller_manager_args(self) -> list[str]:
        pki_dir = self.state / "pki"
        return [
            self.bin("kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--service-account-private-key-file={pki_dir / 'sa.key'}",
            f"--root-ca-file={pki_dir / 'ca.crt'}",
            "--cluster-name=roxxel-local",
            "--controllers=*",
            f"--v={KUBE_VERBOSITY}",
        ]

    def _scheduler_args(self) -> list[str]:
        return [
            self.bin("kube-scheduler"),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            f"--v={KUBE_VERBOSITY}",
        ]

    def _kwok_args(self) -> list[str]:
        stages = sorted((self.home / "upstream" / "kwok").glob("*.yaml"))
        config = self.state / "config" / "kwok.yaml"
        config.write_text("\n---\n".join(p.read_text().strip() for p in stages) + "\n")
        return [
            self.bin("kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={config}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
            # Node and pod addresses on loopback: the API server dials a node's address for
            # logs, exec and port-forward, and whatever it dials must be on this machine (nothing
            # listens on the kubelet port, so such calls are refused at once).
            "--node-ip=127.0.0.1",
            "--cidr=127.244.0.1/16",
        ]

    def _controller_config(self, name: str, api_version: str, **extra) -> Path:
        """The Configuration file of controller ``name`` (JobSet's and Kueue's share the
        controller-runtime fields): no leader election, no internal certificate rotation (the
        webhooks serve the local CA's certificate on loopback), no metrics server, health
        probes on loopback."""
        return self._write_config(
            f"{name}.yaml",
            {
                "apiVersion": api_version,
                "kind": "Configuration",
                **extra,
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {
                    "port": self.ports[f"{name}-webhook"],
                    "host": "127.0.0.1",
                    "certDir": str(self.state / "webhook-certs"),
                },
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{self.ports[name + '-health']}"},
            },
        )

    def _jobset_config(self) -> Path:
        return self._controller_config("jobset", "config.jobset.x-k8s.io/v1alpha1")

    def _kueue_config(self) -> Path:
        return self._controller_config(
            "kueue",
            "config.kueue.x-k8s.io/v1beta2",
            namespace="kueue-system",
            manageJobsWithoutQueueName=False,
            integrations={"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
        )

    def _write_config(self, name: str, body: dict) -> Path:
        path = self.state / "config" / name
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        return path

    def _write_kubeconfig(self) -> None:
        pki_dir = self.state / "pki"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "roxxel-local",
                    "clusters": [
                        {
                            "name": "roxxel-local",
                            "cluster": {"server": self.server, "certificate-authority": str(pki_dir / "ca.crt")},
                        }
                    ],
                    "users": [
                        {
                            "name": "roxxel-admin",
                            "user": {
                                "client-certificate": str(pki_dir / "admin.crt"),
                                "client-key": str(pki_dir / "admin.key"),
                            },
                        }
                    ],
                    "contexts": [
                        {
                            "name": "roxxel-local",
                            "context": {"cluster": "roxxel-local", "user": "roxxel-admin", "namespace": "default"},
                        }
                    ],
                },
                sort_keys=False,
            )
        )

    # ---------------------------------------------------------------- processes

    def _spawn(self, name: str, args: list[str]) -> None:
        with open(self.state / "logs" / f"{name}.log", "ab") as out:
            process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.pids[name] = process.pid
        self._save()

    def _alive(self, name: str) -> bool:
        """Whether the component's process runs: reaped here when this process is its parent;
        a zombie (ended, waiting for another parent to reap it: a pytest-xdist worker that
        started the cluster while another one stops it) counts as gone."""
        pid = self.pids.get(name)
        if pid is None:
            return False
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        except OSError:  # no procfs: the signal check alone
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            return True
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")

    def _wait(self, what: str, ready, timeout: float = START_TIMEOUT_S, *, process: str | None = None) -> None:
        """Polls ``ready()`` until it is true; fails at once when the component ``process``
        (default: the first word of ``what`` when it names one) exits meanwhile."""
        deadline = time.monotonic() + timeout
        if process is None:
            process = what.split()[0] if what.split()[0] in self.pids else None
        while time.monotonic() < deadline:
            if ready():
                self.timings[what] = time.monotonic() - getattr(self, "_started", time.monotonic())
                return
            if process and not self._alive(process):
                raise ClusterError(
                    f"{process} exited while starting; its log: {self.state / 'logs' / (process + '.log')}\n{self._tail(process)}"
                )
            time.sleep(0.2)
        hint = f"; its log: {self.state / 'logs' / (process + '.log')}\n{self._tail(process)}" if process else ""
        raise ClusterError(f"{what} was not ready within {timeout:.0f} s{hint}")

    def _tail(self, name: str, lines: int = 15) -> str:
        path = self.state / "logs" / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _ssl(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))
        context.load_cert_chain(str(self.state / "pki" / "admin.crt"), str(self.state / "pki" / "admin.key"))
        return context

    def _http_ok(self, url: str) -> bool:
        try:
            context = self._ssl() if url.startswith("https") else None
            with urllib.request.urlopen(url, timeout=2, context=context) as answer:
                return answer.status == 200
        except (OSError, ValueError):
            return False

    def _tls_listens(self, port: int) -> bool:
        try:
            context = ssl.create_default_context(cafile=str(self.state / "pki" / "ca.crt"))
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                    return True
        except OSError:
            return False

    # ---------------------------------------------------------------- kubectl

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 90) -> str:
        """Runs the cluster's kubectl as the administrator; returns its stdout.

        Raises: ClusterError with kubectl's message."""
        done = subprocess.run(
            [self.bin("kubectl"), f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.state / 'kube-cache'}", *args],
            input=input, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def kubectl_ok(self, *args: str) -> bool:
        """Whether ``kubectl ARGS`` succeeds within 10 s."""
        try:
            self.kubectl(*args, timeout=10)
            return True
        except (ClusterError, subprocess.TimeoutExpired):
            return False

    def _all_true(self, resource: str, condition: str) -> bool:
        """Every object of ``resource`` has ``condition`` True (and there is one)."""
        try:
            items = json.loads(self.kubectl("get", resource, "-o", "json", timeout=10))["items"]
        except (ClusterError, subprocess.TimeoutExpired, ValueError):
            return False
        return bool(items) and all(
            any(
                c.get("type") == condition and c.get("status") == "True"
                for c in (i.get("status") or {}).get("conditions") or []
            )
            for i in items
        )

    def _crds_established(self) -> bool:
        return self._all_true("customresourcedefinitions", "Established")

    def apply(self, objects: list[dict], *, name: str) -> None:
        """Server-side applies ``objects`` (kept in ``STATE/config/NAME.yaml``)."""
        path = self.state / "config" / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))

    # ---------------------------------------------------------------- stop

    def _save(self) -> None:
        data = {"home": str(self.home), "ports": self.ports, "pids": self.pids}
        tmp = self.state / "cluster.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.state / "cluster.json")

    @classmethod
    def load(cls, state: Path) -> ControlPlane | None:
        """The control plane recorded in ``state``, or None."""
        try:
            data = json.loads((state / "cluster.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(state, Path(data["home"]), dict(data["ports"]), dict(data["pids"]))

    def dead(self) -> list[str]:
        """The recorded components that no longer run."""
        return [name for name in self.pids if not self._alive(name)]

    def running(self) -> bool:
        """Every recorded process is alive and the API server answers."""
        return bool(self.pids) and all(self._alive(n) for n in self.pids) and self._http_ok(f"{self.server}/readyz")

    def _ours(self, name: str) -> bool:
        """Whether the recorded pid still runs one of this build's programs (a pid recorded
        before a reboot may be another program's now: never signal that)."""
        pid = self.pids.get(name)
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, TypeError):
            return self._alive(name)  # no procfs: trust the record
        return command.startswith(str(self.home / "bin") + "/")

    def stop(self) -> None:
        """Stops the components one at a time, newest first (the controllers, then the API
        server, then etcd: an API server whose etcd went first hangs in its retries), each with
        SIGTERM and, after :data:`STOP_GRACE_S`, SIGKILL. A recorded pid that no longer runs one
        of this build's programs is left alone.

        Raises: ClusterError when a component outlives its SIGKILL by :data:`STOP_GRACE_S`."""
        for name in reversed(list(self.pids)):
            if not self._alive(name) or not self._ours(name):
                continue
            for signo in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pids[name], signo)
                deadline = time.monotonic() + STOP_GRACE_S
                while self._alive(name) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not self._alive(name):
                    break
            if self._alive(name):
                raise ClusterError(f"{name} (pid {self.pids[name]}) still runs {STOP_GRACE_S:.0f} s after SIGKILL")
        self.pids = {}
        if (self.state / "cluster.json").exists():
            self._save()
