"""Traffic between the pods on one local run's bridge, where the host filters bridged frames.

A local run's pods reach each other over a bridge of their own: the netns runtime's
``rxl<id>b``, the podman runtime's ``--internal`` network. Where the kernel's
``br_netfilter`` passes bridged frames through iptables (``net.bridge.bridge-nf-call-iptables
= 1``), the host's ``FORWARD`` chain decides whether two pods on that bridge reach each
other. Docker's daemon loads ``br_netfilter``, sets that switch and the ``FORWARD`` policy to
``DROP`` when it starts (Docker's documentation, "Packet filtering and firewalls": traffic
it does not own is dropped unless a rule accepts it). Podman's netavark accepts the traffic
of the networks it NATs, but adds nothing for an internal one, and a bridge's own
``nf_call_iptables 0`` cannot turn the filter off (the kernel filters when either switch is
on: ``br_netfilter_hooks.c``). Without a rule, the workers would wait for their coordinator
until ``jax.distributed``'s initialisation timeout, on every attempt.

:func:`allow` puts one ``ACCEPT`` rule for frames that enter and leave the run's bridge at the
head of ``FORWARD`` (commented with the run id, so that a stale one is found by its run) when
the host filters bridged frames, and does nothing otherwise; :func:`remove` takes every rule
of a run away. Where the rule cannot be added (no ``iptables``, no permission), the run is
refused in one line naming the fixes, before any pod starts.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from pathlib import Path

from roxxel_launch.backends.base import BackendError

logger = logging.getLogger("roxxel_launch.backends.local")

BRIDGE_NF_CALL_IPTABLES = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
"""The kernel switch (br_netfilter) that sends every bridge's frames through iptables."""

_TIMEOUT = 30.0  # seconds for one iptables call (-w waits for the xtables lock within it)


def host_filters_bridges(switch: Path = BRIDGE_NF_CALL_IPTABLES) -> bool:
    """Whether this host passes bridged frames through iptables (the switch is absent when
    ``br_netfilter`` is not loaded: then nothing filters them)."""
    try:
        return switch.read_text().strip() == "1"
    except OSError:
        return False


def _comment(run_id: str) -> str:
    return f"roxxel-launch run {run_id}"


def _rule(bridge: str, run_id: str) -> list[str]:
    return ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", _comment(run_id), "-j", "ACCEPT"]


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["iptables", "-w", "10", *args], capture_output=True, text=True, timeout=_TIMEOUT, stdin=subprocess.DEVNULL
    )


def allow(bridge: str, run_id: str, *, switch: Path = BRIDGE_NF_CALL_IPTABLES) -> bool:
    """Let the pods on ``bridge`` reach each other whatever the host's ``FORWARD`` chain says;
    returns whether a rule was needed (the host filters bridged frames).

    Raises:
        BackendError: the host filters bridged frames and the rule could not be added.
    """
    if not host_filters_bridges(switch):
        return False
    rule = _rule(bridge, run_id)
    try:
        if _iptables("-C", *rule).returncode == 0:
            return True
        added = _iptables("-I", rule[0], "1", *rule[1:])
        error = added.stderr.strip() if added.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as err:
        error = str(err)
    if error:
        raise BackendError(
            f"this machine passes bridged traffic through iptables (net.bridge.bridge-nf-call-iptables=1, "
            f"set by Docker's daemon among others), so its FORWARD chain would drop the traffic between this "
            f"run's pods on bridge {bridge}, and `iptables {shlex.join(['-I', *rule])}` failed ({error[-300:]}): "
            "run the launcher as root with iptables installed, or add that rule yourself, "
            "or `sysctl -w net.bridge.bridge-nf-call-iptables=0` if nothing here needs it"
        )
    logger.info(
        "bridged traffic is filtered here: accepted the traffic on bridge %s in FORWARD (%s)", bridge, _comment(run_id)
    )
    return True


def remove(run_id: str) -> int:
    """Remove every rule :func:`allow` added for ``run_id``; returns how many. Nothing is an
    error (no iptables, no rule, no permission: there is then nothing of ours to remove)."""
    try:
        listed = _iptables("-S", "FORWARD")
    except (OSError, subprocess.TimeoutExpired):
        return 0
    marker = f'--comment "{_comment(run_id)}"'
    removed = 0
    for line in listed.stdout.splitlines():
        if line.startswith("-A FORWARD ") and marker in line:
            try:
                removed += _iptables("-D", *shlex.split(line)[1:]).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                pass
    return removed
