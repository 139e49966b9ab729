"""Network-namespace mode of the local backend: every worker on its own network host.

``roxxel-launch submit SPEC --local --netns`` runs each worker as the pod it would be on a
cluster, as far as the network goes:

- its own network namespace (``ip netns``), with loopback up and one interface ``eth0``
  (a veth pair) on a private bridge of its own run, addressed in :data:`SUBNET`; the
  bridge has no address on this machine and no namespace has a route beyond the /24, so
  only the namespaces' addresses and loopback are ever used, and nothing outside this
  machine is contacted;
- its own UTS namespace with the hostname its pod would have:
  ``<jobset>-<replicated job>-<job index>-<pod index>`` for a JobSet (JobSet API,
  ``spec.network.enableDNSHostnames``), ``<job>-<completion index>`` for an Indexed Job
  whose pods set ``subdomain`` to a headless Service;
- the other pods resolvable exactly as cluster DNS names them: ``/etc/netns/<ns>/hosts``
  (which ``ip netns exec`` mounts over ``/etc/hosts``) maps
  ``<host>.<subdomain>.<namespace>.svc.cluster.local`` and ``<host>.<subdomain>`` (what a
  pod's DNS search path ``<namespace>.svc.cluster.local`` makes of it) to each pod's
  address; ``/etc/netns/<ns>/resolv.conf`` points at the namespace's own loopback, so a
  name that is not a pod fails at once instead of reaching a real DNS server;
- the environment of the rendered manifest, as on loopback
  (:mod:`roxxel_launch.backends.local.pods`), but without ``ROXXEL_HOST_ALIASES``:
  :func:`roxxel.distributed.detect` derives the coordinator's DNS name and port, and the
  namespace's ``/etc/hosts`` resolves the name to process 0's address, as in a pod.

The hosts come from :func:`roxxel_launch.render.render` (see :func:`pod_hosts`), so the
names are the manifest's, not a copy of its rules.

Every attempt of the job gets fresh namespaces (a gang restart recreates the pods: same
names, new network); they are removed when its workers are gone. Names carry
:data:`PREFIX` and a run id (``rxl-<id>-<i>`` namespaces, ``rxl<id>b`` bridge,
``rxl<id>v<i>`` host ends of the veths), and the supervisor holds
``/run/roxxel-netns/<id>.lock`` (``flock``) while they exist: every start removes the
namespaces, links and hosts files of run ids whose lock nobody holds (a supervisor that
was SIGKILLed). Creating and removing are idempotent.

Each attempt's record in ``status.json`` lists the hosts (process, hostname, address,
namespace, host-side link), so a test or a user can take a host's link down
(``ip link set <link> down``) or shape it with ``tc``.

Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``) and iproute2's ``ip``;
:func:`unavailable_reason` says why not in one line, and the supervisor then runs the
workers on loopback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import ipaddress
import logging
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from roxxel_launch.backends import rendered_pods
from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.local import bridge_firewall
from roxxel_launch.backends.local.rundir import lock_is_held
from roxxel_launch.backends.process_plan import spec_plans

__all__ = [
    "CLUSTER_DOMAIN",
    "PREFIX",
    "PodHost",
    "PodNetwork",
    "SUBNET",
    "cleanup_stale",
    "pod_hosts",
    "unavailable_reason",
]

logger = logging.getLogger("roxxel_launch.backends.local")

PREFIX = "rxl"
"""Start of the name of every namespace, link and hosts directory this module creates."""
SUBNET = ipaddress.ip_network("10.213.0.0/24")
"""Addresses of the pods: ``.1 + process id``. Private (RFC 1918) and never routed: the
bridge of a run has no address on this machine, so runs cannot see each other."""
CLUSTER_DOMAIN = rendered_pods.CLUSTER_DOMAIN
"""Kubernetes' default cluster domain (kubelet ``--cluster-domain``)."""
LOCK_DIR = Path("/run/roxxel-netns")
"""Where the supervisors' locks live (one file per run id)."""
NETNS_ETC = Path("/etc/netns")
"""Per-namespace files that ``ip netns exec`` mounts over ``/etc`` (iproute2)."""
IP_TIMEOUT = 30.0
"""Seconds one ``ip`` command may take."""

_RUN_ID = re.compile(r"[0-9a-f]{6}")
_NETNS_NAME = re.compile(rf"{PREFIX}-([0-9a-f]{{6}})-[0-9]+")
_LINK_NAME = re.compile(rf"{PREFIX}([0-9a-f]{{6}})(?:b|v[0-9]+)")
_CLONE_NEWUTS = 0x04000000  # <linux/sched.h>

# Run after `ip netns exec NS` by each worker: a UTS namespace of its own with the pod's
# hostname (ip netns exec switches only the network and mount namespaces), then exec.
_UTS_SHIM = (
    "import ctypes, os, socket, sys\n"
    f"if ctypes.CDLL(None, use_errno=True).unshare({_CLONE_NEWUTS}) != 0:\n"
    "    sys.exit(f'roxxel-launch: unshare(CLONE_NEWUTS) failed: {os.strerror(ctypes.get_errno())}')\n"
    "socket.sethostname(sys.argv[1])\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


# ------------------------------------------------------------------------------------
# The pods of a manifest
# ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PodHost:
    """One pod of a rendered job, as the network sees it.

    Attributes:
        process_id: the process id :func:`roxxel.distributed.detect` derives from ``env``.
        hostname: the pod's hostname (a DNS-1123 label).
        dns_names: the names other pods reach it by, fully qualified first.
        env: the container's environment as the manifest gives it (downward-API fields
            and ``JOB_COMPLETION_INDEX`` resolved; see :mod:`roxxel_launch.backends.rendered_pods`).
        coordinator_address: ``host:port`` the pod's worker will connect to.
        namespace: the Kubernetes namespace of the job (part of the DNS names).
    """

    process_id: int
    hostname: str
    dns_names: tuple[str, ...]
    env: Mapping[str, str]
    coordinator_address: str
    namespace: str


def pod_hosts(spec) -> list[PodHost]:
    """The pods of ``spec``'s rendered manifests, in process order, from the job's process
    plans (:func:`roxxel_launch.backends.process_plan.spec_plans`).

    The pods, their hostnames, DNS names and environments are the ones
    :mod:`roxxel_launch.backends.rendered_pods` reads from the manifest: JobSet pods
    ``<jobset>-<rjob>-<j>-<i>`` under ``spec.network.subdomain`` (default the JobSet's name)
    when ``enableDNSHostnames`` is true; Indexed Job pods ``<job>-<i>`` under the pod
    template's ``subdomain`` when a headless Service of that name selects them.

    Args:
        spec: a validated ``roxxel_launch.spec.JobSpec``.

    Raises:
        BackendError: the manifests hold no JobSet or Job, use a downward-API field that
            has no local value, make pod ``i`` another process than ``i``, or derive a
            coordinator that is not one of the pods' DNS names (the workers could never meet).
    """
    # The identity only: a Secret's value does not matter here.
    planned = spec_plans(spec, secret=lambda _name, _source: "")
    hosts = [
        PodHost(
            plan.process,
            plan.pod.name,
            plan.pod.dns_names,
            plan.env,
            plan.coordinator_address or "",
            plan.pod.namespace,
        )
        for plan in planned
    ]
    names = {name for h in hosts for name in h.dns_names}
    for host in hosts:
        coordinator = host.coordinator_address.rpartition(":")[0]
        if coordinator not in names:
            raise BackendError(
                f"job {spec.name!r}: pod {host.hostname} would connect to the coordinator "
                f"{host.coordinator_address}, which is no pod's DNS name ({', '.join(sorted(names)) or 'none'}): "
                "fix the template or the environment contract so that both name process 0's pod"
            )
    return hosts


# ------------------------------------------------------------------------------------
# Privileges, commands, stale runs
# ------------------------------------------------------------------------------------


def unavailable_reason() -> str | None:
    """None when this process can create network namespaces; else why not, in one line."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` command is not installed"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    result = _ip("netns", "add", probe, check=False)
    _ip("netns", "delete", probe, check=False)
    if result.returncode != 0:
        return f"`ip netns add` failed: {result.stderr.strip() or result.returncode}"
    return None


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=IP_TIMEOUT, stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise BackendError(f"`{' '.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check=check)


def _lock_path(run_id: str) -> Path:
    return LOCK_DIR / f"{run_id}.lock"


def _existing() -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[Path]]]:
    """Namespaces, links and /etc/netns directories of this module, by run id."""
    namespaces: dict[str, list[str]] = {}
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if match := _NETNS_NAME.fullmatch(name):
            namespaces.setdefault(match.group(1), []).append(name)
    links: dict[str, list[str]] = {}
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(": ")
        name = parts[1].split("@")[0] if len(parts) > 1 else ""
        if match := _LINK_NAME.fullmatch(name):
            links.setdefault(match.group(1), []).append(name)
    etc: dict[str, list[Path]] = {}
    if NETNS_ETC.is_dir():
        for path in NETNS_ETC.iterdir():
            if match := _NETNS_NAME.fullmatch(path.name):
                etc.setdefault(match.group(1), []).append(path)
    return namespaces, links, etc


def _remove(namespaces: Sequence[str], links: Sequence[str], etc: Sequence[Path]) -> None:
    # Host ends first (deleting one end of a veth deletes both), then the bridge.
    for link in sorted(links, key=lambda n: n.endswith("b")):
        _ip("link", "delete", link, check=False)
    for ns in namespaces:
        _ip("netns", "delete", ns, check=False)
    for path in etc:
        shutil.rmtree(path, ignore_errors=True)


def cleanup_stale() -> list[str]:
    """Remove what runs whose supervisor is gone left behind (see the module docstring).

    Returns:
        The run ids cleaned up.
    """
    namespaces, links, etc = _existing()
    stale = []
    for run_id in sorted(set(namespaces) | set(links) | set(etc)):
        if lock_is_held(_lock_path(run_id)):
            continue
        logger.warning(
            "removing network namespaces and links of a stopped run (id %s): %s",
            run_id,
            ", ".join(namespaces.get(run_id, []) + links.get(run_id, [])) or "hosts files",
        )
        _remove(namespaces.get(run_id, []), links.get(run_id, []), etc.get(run_id, []))
        bridge_firewall.remove(run_id)
        with contextlib.suppress(FileNotFoundError):
            _lock_path(run_id).unlink()
        stale.append(run_id)
    return stale


# ------------------------------------------------------------------------------------
# The network of one run
# ------------------------------------------------------------------------------------


class PodNetwork:
    """The namespaces, bridge and hosts files of one supervisor's run.

    Use as a context manager (holds the run's lock, cleans stale runs on entry and its
    own network on exit); :meth:`up` before each attempt, :meth:`down` after it.

    Args:
        spec: a validated ``roxxel_launch.spec.JobSpec``.
        python: the interpreter that runs the hostname shim (default ``sys.executable``).

    Raises:
        BackendError: more pods than :data:`SUBNET` holds, or see :func:`pod_hosts`.
    """

    def __init__(self, spec, python: str | None = None):
        self.hosts = pod_hosts(spec)
        if len(self.hosts) > SUBNET.num_addresses - 2:
            raise BackendError(
                f"job {spec.name!r} has {len(self.hosts)} pods; --netns gives at most "
                f"{SUBNET.num_addresses - 2} pods addresses in {SUBNET}"
            )
        self.python = python or sys.executable
        self.run_id = secrets.token_hex(3)
        self._lock_fd: int | None = None

    # -- names --------------------------------------------------------------------------
    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.run_id}b"

    def netns(self, i: int) -> str:
        return f"{PREFIX}-{self.run_id}-{i}"

    def link(self, i: int) -> str:
        """The host end of process ``i``'s veth (its end inside the namespace is ``eth0``)."""
        return f"{PREFIX}{self.run_id}v{i}"

    def address(self, i: int) -> str:
        return str(SUBNET.network_address + 1 + i)

    @property
    def coordinator_address(self) -> str:
        return self.hosts[0].coordinator_address

    def describe(self) -> list[dict]:
        """The hosts as recorded in an attempt of ``status.json``."""
        return [
            {
                "process": h.process_id,
                "hostname": h.hostname,
                "address": self.address(i),
                "dns_name": h.dns_names[0] if h.dns_names else h.hostname,
                "netns": self.netns(i),
                "link": self.link(i),
            }
            for i, h in enumerate(self.hosts)
        ]

    # -- lifetime -----------------------------------------------------------------------
    def __enter__(self) -> PodNetwork:
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(_lock_path(self.run_id), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._lock_fd = fd
        cleanup_stale()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.down()
        finally:
            if self._lock_fd is not None:
                with contextlib.suppress(FileNotFoundError):
                    _lock_path(self.run_id).unlink()
                os.close(self._lock_fd)
                self._lock_fd = None

    def up(self) -> None:
        """Create the bridge, one namespace per pod and the hosts files (after removing any
        left from an earlier attempt of this run)."""
        self.down()
        _ip("link", "add", self.bridge, "type", "bridge")
        # A host firewall must not decide whether the pods of one run reach each other.
        bridge_firewall.allow(self.bridge, self.run_id)
        _ip("link", "set", self.bridge, "up")
        for i, host in enumerate(self.hosts):
            ns = self.netns(i)
            self._write_etc(i)
            _ip("netns", "add", ns)
            _ip("link", "add", self.link(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", self.link(i), "master", self.bridge, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/{SUBNET.prefixlen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        logger.info(
            "network namespaces up: %s",
            "; ".join(
                f"process {h['process']} {h['hostname']} {h['address']} ({h['netns']}, link {h['link']})"
                for h in self.describe()
            ),
        )

    def down(self) -> None:
        """Remove this run's namespaces, links and hosts files; nothing is an error."""
        n = len(self.hosts)
        bridge_firewall.remove(self.run_id)
        _remove(
            [self.netns(i) for i in range(n)],
            [self.link(i) for i in range(n)] + [self.bridge],
            [NETNS_ETC / self.netns(i) for i in range(n)],
        )

    def _write_etc(self, i: int) -> None:
        """``hosts`` (every pod's DNS names, the pod's own hostname) and ``resolv.conf``,
        written atomically, for ``ip netns exec`` to mount over ``/etc``."""
        own = self.hosts[i]
        lines = [
            "# written by roxxel-launch --netns: the pods of this job, as cluster DNS names them",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
        ]
        for j, host in enumerate(self.hosts):
            names = list(host.dns_names) + ([host.hostname] if j == i else [])
            if names:
                lines.append(f"{self.address(j)}\t{' '.join(names)}")
        folder = NETNS_ETC / self.netns(i)
        folder.mkdir(parents=True, exist_ok=True)
        search = f"{own.namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}"
        files = {
            "hosts": "\n".join(lines) + "\n",
            "resolv.conf": "# roxxel-launch --netns: pod names come from /etc/hosts; no DNS server\n"
            f"nameserver 127.0.0.1\nsearch {search}\n",
        }
        for name, text in files.items():
            tmp = folder / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, folder / name)

    # -- workers ------------------------------------------------------------------------
    def wrap(self, i: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside process ``i``'s namespace with its pod's hostname (both
        ``ip netns exec`` and the shim exec in place: the pid stays the worker's)."""
        return ["ip", "netns", "exec", self.netns(i), self.python, "-S", "-c", _UTS_SHIM, self.hosts[i].hostname, *argv]
