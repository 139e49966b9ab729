"""`roxxel-launch submit --local --netns`: every worker on its own network host.

The pods' names, addresses and environment come from the rendered manifests
(roxxel_launch.backends.local.netns); the multi-host runs below use real network namespaces,
veth pairs on a private bridge and per-namespace hosts files (root only: skipped with the
reason otherwise), real jax.distributed across them and real Orbax checkpoints, and compare
the final parameters with the same job on loopback, bit for bit.

Failure detection: the jobs set ROXXEL_HEARTBEAT_TIMEOUT=HEARTBEAT (jax.distributed's
heartbeat_timeout_seconds, for both the coordination service and its clients), so a host
cut off is declared dead after HEARTBEAT seconds; the gang restart then restores the last
checkpoint. docs/troubleshooting.md has the times measured here.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import psutil
import pytest
import yaml

from roxxel_launch.backends.local import backend as L
from roxxel_launch.backends.local import bridge_firewall, netns
from roxxel_launch.backends.base import BackendError, JobState
from roxxel_launch.spec import spec_from_dict
from support.local_job import EVERY, HEARTBEAT, STEPS, TIMEOUT, Job, needs_netns
from support.local_job import job_spec as _spec
from support.paths import WORKERS
from support.wait import wait_for

PROGRAM = WORKERS / "local_program.py"
DETECTION_BOUND = 2 * HEARTBEAT + 10  # seconds from a host's loss to the first worker's exit
RATE = 125_000  # bytes/s: a slowed link's rate where the kernel has no sch_netem (1 Mbit/s)


# ----------------------------------------------------------------------------- the pods of a manifest


def test_pods_are_named_as_the_rendered_jobset_and_indexed_job_name_them():
    jobset = netns.pod_hosts(
        spec_from_dict(_spec("lm", 2, ["x"], namespace="research", env={"ROXXEL_HEARTBEAT_TIMEOUT": "5"}))
    )
    assert [h.hostname for h in jobset] == ["lm-slice-0-0", "lm-slice-0-1"]
    assert jobset[1].dns_names == ("lm-slice-0-1.lm.research.svc.cluster.local", "lm-slice-0-1.lm")
    assert {h.coordinator_address for h in jobset} == {"lm-slice-0-0.lm:8476"}
    expected = {
        "JOBSET_NAME": "lm",
        "REPLICATED_JOB_NAME": "slice",
        "JOB_INDEX": "0",
        "JOB_COMPLETION_INDEX": "1",
        "JOBSET_SUBDOMAIN": "lm",
        "ROXXEL_HOSTS_PER_SLICE": "2",
        "ROXXEL_NUM_SLICES": "1",
        "ROXXEL_COORDINATOR_PORT": "8476",
        "ROXXEL_HEARTBEAT_TIMEOUT": "5",
    }
    assert expected.items() <= jobset[1].env.items()  # the rendered container's env, resolved

    indexed = netns.pod_hosts(spec_from_dict(_spec("tr", 3, ["x"], workload="indexed-job")))
    assert [(h.process_id, h.hostname) for h in indexed] == [(0, "tr-0"), (1, "tr-1"), (2, "tr-2")]
    assert indexed[2].dns_names == ("tr-2.tr.default.svc.cluster.local", "tr-2.tr")
    assert indexed[2].coordinator_address == "tr-0.tr:8476"


def test_a_coordinator_that_is_no_pods_name_is_refused(monkeypatch):
    """A manifest whose pods have no DNS names (here: no enableDNSHostnames) cannot work on a
    cluster either: the workers would never find the coordinator. Refused before starting."""
    from roxxel_launch import render

    real = render.render

    def without_dns(spec, **kwargs):
        out = real(spec, **kwargs)
        jobset = next(o for o in out.objects if o["kind"] == "JobSet")  # after its NetworkPolicy
        jobset["spec"]["network"]["enableDNSHostnames"] = False
        return out

    monkeypatch.setattr(render, "render", without_dns)
    with pytest.raises(BackendError, match="lm-slice-0-0.lm:8476, which is no pod's DNS name"):
        netns.pod_hosts(spec_from_dict(_spec("lm", 2, ["x"])))


def test_without_root_it_says_so_in_one_line_and_runs_on_loopback(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert netns.unavailable_reason() == "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    monkeypatch.setenv(L.ROOT_ENV, str(tmp_path / "runs"))
    spec = spec_from_dict(
        _spec(
            "noroot",
            2,
            [sys.executable, str(PROGRAM)],
            env={"LOCAL_TEST_MODE": "ok"},
            checkpoint_dir=str(tmp_path / "ckpt"),
        )
    )
    status = L.LocalBackend(options=L.LocalOptions(foreground=True, network="netns")).submit(spec)
    assert (status.state, status.exit_code) == (JobState.SUCCEEDED, 0)
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "[roxxel-launch] WARNING: --netns: network namespaces need root (CAP_NET_ADMIN, "
        "CAP_SYS_ADMIN); running the workers on loopback instead"
    ]
    record = json.loads((tmp_path / "runs" / "noroot" / "status.json").read_text())["attempts"][0]
    assert record["coordinator_address"].startswith("127.0.0.1:") and "hosts" not in record
    with pytest.raises(BackendError, match="network must be one of loopback, netns"):
        L.LocalBackend(options=L.LocalOptions(network="vpn")).submit(spec_from_dict(_spec("other", 1, ["x"])))

    from click.testing import CliRunner

    from roxxel_launch import cli

    path = tmp_path / "k8s.yaml"
    path.write_text(yaml.safe_dump(_spec("k8sjob", 2, ["train"])))
    result = CliRunner().invoke(cli.cli, ["submit", str(path), "--netns"])
    assert result.exit_code == 2 and "--netns applies to --local runs only" in result.output


# ----------------------------------------------------------------------------- namespaces


def _ours(*run_ids: str) -> set[str]:
    """The namespaces, links and hosts files of the given runs (their names carry the run id)
    that exist now. Only this test's own runs: other runs on the machine (another developer's
    tests) create and remove theirs at the same time."""
    assert run_ids and all(re.fullmatch(r"[0-9a-f]{6}", r) for r in run_ids), run_ids
    names = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    names |= {
        line.split(": ")[1].split("@")[0]
        for line in subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    }
    names |= {p.name for p in netns.NETNS_ETC.glob(f"{netns.PREFIX}-*")} if netns.NETNS_ETC.is_dir() else set()
    return {n for n in names if n.startswith(netns.PREFIX) and any(r in n for r in run_ids)}


def _run_id(hosts: list[dict]) -> str:
    """The run id in the names of an attempt's hosts (``rxl-<id>-<i>``)."""
    ids = {h["netns"].split("-")[1] for h in hosts}
    assert len(ids) == 1, ids
    return ids.pop()


@needs_netns
def test_namespaces_resolve_the_pods_and_leave_nothing_behind_even_when_killed(tmp_path):
    spec = spec_from_dict(_spec("lm", 3, ["x"]))
    with netns.PodNetwork(spec) as net:
        net.up()
        net.up()  # idempotent: an attempt's leftovers are replaced
        hosts = net.describe()
        assert [(h["hostname"], h["address"]) for h in hosts] == [
            ("lm-slice-0-0", "10.213.0.1"),
            ("lm-slice-0-1", "10.213.0.2"),
            ("lm-slice-0-2", "10.213.0.3"),
        ]
        inside = subprocess.run(
            net.wrap(
                2,
                [
                    sys.executable,
                    "-c",
                    "import socket; print(socket.gethostname(), socket.gethostbyname('lm-slice-0-0.lm'), "
                    "socket.gethostbyname('lm-slice-0-1.lm.default.svc.cluster.local'), "
                    "socket.gethostbyname(socket.gethostname()))",
                ],
            ),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert inside.stdout.split() == ["lm-slice-0-2", "10.213.0.1", "10.213.0.2", "10.213.0.3"], inside.stderr
        assert _ours(net.run_id) == {h["netns"] for h in hosts} | {h["link"] for h in hosts} | {net.bridge}
        assert all((netns.NETNS_ETC / h["netns"] / "hosts").is_file() for h in hosts)
    assert _ours(net.run_id) == set()

    # A launcher killed with its network up: the next one removes what it left.
    code = (
        "import sys, time; sys.path[:0] = %r\n"
        "from roxxel_launch.backends.local import netns\nfrom roxxel_launch.spec import spec_from_dict\n"
        "net = netns.PodNetwork(spec_from_dict(%r)).__enter__(); net.up(); print(net.run_id, flush=True); "
        "time.sleep(60)" % (sys.path, _spec("lm", 2, ["x"]))
    )
    killed = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    run_id = killed.stdout.readline().strip()
    killed.kill()
    killed.wait()
    assert _ours(run_id), "the killed launcher's network should still be there"
    with netns.PodNetwork(spec) as net:
        assert not _ours(run_id)
    assert _ours(run_id, net.run_id) == set()


def _forward_rules(run_id: str) -> list[str]:
    listed = subprocess.run(["iptables", "-w", "10", "-S", "FORWARD"], capture_output=True, text=True, timeout=30)
    return [line for line in listed.stdout.splitlines() if f"roxxel-launch run {run_id}" in line]


@needs_netns
@pytest.mark.skipif(
    not bridge_firewall.BRIDGE_NF_CALL_IPTABLES.exists() or shutil.which("iptables") is None,
    reason="no br_netfilter or no iptables here: bridged frames cannot be filtered",
)
def test_pods_reach_each_other_where_the_host_firewall_drops_bridged_frames(tmp_path):
    """Where Docker's daemon has started, bridged frames go through iptables and FORWARD's
    policy is DROP: pods on the run's bridge could not reach each other (the workers waited
    for their coordinator until the initialisation timeout). Here a DROP rule for every
    --netns bridge (appended, as a DROP policy would act) and the switch on stand for it."""
    switch = bridge_firewall.BRIDGE_NF_CALL_IPTABLES
    was = switch.read_text().strip()
    drop = [
        "FORWARD",
        "-i",
        f"{netns.PREFIX}+",
        "-m",
        "comment",
        "--comment",
        "roxxel test: DROP as Docker",
        "-j",
        "DROP",
    ]
    switch.write_text("1\n")
    subprocess.run(["iptables", "-w", "10", "-A", *drop], check=True, timeout=30)
    try:
        with netns.PodNetwork(spec_from_dict(_spec("lm", 2, ["x"]))) as net:
            net.up()
            serve = "import socket; s = socket.create_server(('', 8476)); print('up', flush=True); s.accept()"
            server = subprocess.Popen(net.wrap(0, [sys.executable, "-c", serve]), stdout=subprocess.PIPE, text=True)
            try:
                assert server.stdout.readline().strip() == "up"
                connect = (
                    "import socket; socket.create_connection(('lm-slice-0-0.lm', 8476), timeout=5); print('reached')"
                )
                client = subprocess.run(
                    net.wrap(1, [sys.executable, "-c", connect]), capture_output=True, text=True, timeout=30
                )
                assert client.stdout.strip() == "reached", client.stderr[-500:]
                assert len(_forward_rules(net.run_id)) == 1
            finally:
                server.kill()
                server.wait()
        assert _forward_rules(net.run_id) == []
    finally:
        subprocess.run(["iptables", "-w", "10", "-D", *drop], timeout=30)
        if was != "1":
            switch.write_text(was + "\n")


@pytest.mark.slow
@needs_netns
def test_delete_after_a_killed_supervisor_removes_its_namespaces(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    waiting = (
        "import os, pathlib, socket, time; "
        "pathlib.Path(os.environ['ROXXEL_CHECKPOINT_DIR'], socket.gethostname()).write_text('up'); time.sleep(60)"
    )
    spec = tmp_path / "sleepers.yaml"
    spec.write_text(yaml.safe_dump(_spec("sleepers", 2, [sys.executable, "-c", waiting], checkpoint_dir=str(state))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JOB", "TPU_"))}
    env[L.ROOT_ENV] = str(tmp_path / "runs")

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "roxxel_launch.cli", *args, "--local"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert cli("submit", str(spec), "--netns", "--detach").returncode == 0
    wait_for(
        lambda: sorted(p.name for p in state.glob("sleepers-*")) == ["sleepers-slice-0-0", "sleepers-slice-0-1"],
        60,
        "the workers to start with their pods' hostnames",
    )
    status = json.loads((tmp_path / "runs" / "sleepers" / "status.json").read_text())
    hosts = status["attempts"][-1]["hosts"]
    os.kill(status["supervisor_pid"], signal.SIGKILL)
    wait_for(
        lambda: (
            not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in status["pids"])
        ),
        30,
        "the workers to end with their supervisor",
    )
    assert {h["netns"] for h in hosts} <= _ours(_run_id(hosts))  # nobody removed them: the supervisor was killed
    result = cli("delete", "sleepers")
    assert result.returncode == 0, result.stderr
    assert _ours(_run_id(hosts)) == set()


# ----------------------------------------------------------------------------- multi-host training


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _detected_after(job: Job, cut: float) -> float:
    """Seconds from ``cut`` (time.time()) to the first worker exit the supervisor logged."""
    for line in (job.root / job.name / "supervisor.log").read_text().splitlines():
        if re.search(r"worker \d+ \(pid \d+\) exited with", line):
            stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
            return stamp - cut
    raise AssertionError("no worker exit in the supervisor log")


def _assert_restored_and_equal(job: Job, lost: int, reference: pathlib.Path) -> None:
    """The gang restarted once, restored the checkpoint of step EVERY and ended equal to ``reference``."""
    status = job.status()
    first, second = status["attempts"]
    assert (status["state"], status["restarts"]) == ("Succeeded", 1)
    assert first["outcome"] == "failure" and second["outcome"] == "succeeded"
    assert f"training steps {EVERY}..{STEPS}" in job.log(0).split(L.ATTEMPT_HEADER)[-1]
    # The coordination service names the lost process (its task number) in the survivors' logs.
    survivor = 1 if lost == 0 else 0
    attempt1 = job.log(survivor).split(L.ATTEMPT_HEADER)[1]
    assert "stopped sending heartbeats" in attempt1 or "heartbeat" in attempt1.lower(), attempt1[-3000:]
    job.params_equal(reference)
    assert not _ours(*{_run_id(a["hosts"]) for a in status["attempts"]})  # nothing left behind


def _lose_host(job: Job, lost: int) -> float:
    """Once ``job`` has checkpointed step EVERY, takes host ``lost`` off the network (link down:
    no FIN, no RST, just silence); process 0's host also freezes (SIGSTOP to its processes),
    as when a machine loses power, so that the launcher learns it only from the survivors, as
    Kubernetes does. Returns when the job has ended, with the time.time() of the cut."""
    job.wait_for_checkpoint(EVERY)
    host = job.host(lost)
    cut = time.time()
    _ip("link", "set", host["link"], "down")
    if lost == 0:
        worker = psutil.Process(job.status()["pids"][0])
        for proc in [worker, *worker.children(recursive=True)]:
            proc.send_signal(signal.SIGSTOP)
    job.finish()
    return cut


# The host-loss tests below mostly wait (paced steps, then the heartbeat timeout), so their
# two jobs run at the same time, each in a thread, started when the first test asks; each
# test then checks its own job.
HOST_LOSSES = {
    "test_a_host_taken_off_the_network_is_noticed_and_the_gang_resumes": ("linkdown", 1),
    "test_losing_the_coordinators_host_is_noticed_and_the_gang_resumes": ("coordlost", 0),
}


@pytest.fixture(scope="module")
def host_losses(request, tmp_path_factory, data, jax_cache) -> Iterator[dict[str, Future]]:
    """The selected host-loss jobs, started together: by name, the job and its cut time."""
    wanted = [
        HOST_LOSSES[item.originalname]
        for item in request.session.items
        if item.module is request.module and item.originalname in HOST_LOSSES
    ]

    def run(name: str, lost: int) -> tuple[Job, float]:
        job = Job(tmp_path_factory.mktemp(name), data, jax_cache, name, 2, pause=1.0).start("--netns")
        try:
            return job, _lose_host(job, lost)
        finally:
            if job.proc.poll() is None:  # a failed wait: end the job with its thread
                os.killpg(job.proc.pid, signal.SIGKILL)
                job.proc.wait()

    with ThreadPoolExecutor(max_workers=max(1, len(wanted)), thread_name_prefix="host-loss") as pool:
        yield {name: pool.submit(run, name, lost) for name, lost in wanted}


@pytest.mark.slow
@needs_netns
def test_a_host_taken_off_the_network_is_noticed_and_the_gang_resumes(host_losses, reference):
    job, cut = host_losses["linkdown"].result()
    detected = _detected_after(job, cut)
    assert detected < DETECTION_BOUND, detected
    _assert_restored_and_equal(job, 1, reference(2))
    assert "gang restart 1 of at most 2" in job.err
    print(f"link down: first worker exit after {detected:.1f}s (heartbeat timeout {HEARTBEAT}s)")


def _shape(link: str, ns: str) -> str | None:
    """Slow both directions of one host's link: netem delay + loss where the kernel has
    sch_netem, else a token bucket (tbf) that queues and drops. Returns what was used, or
    None when the kernel has neither."""
    for kind, args in (
        ("netem", ["netem", "delay", "20ms", "5ms", "loss", "1%"]),
        ("tbf", ["tbf", "rate", f"{RATE * 8}bit", "burst", "8kb", "limit", "16kb"]),
    ):
        try:
            subprocess.run(["tc", "qdisc", "add", "dev", link, "root", *args], check=True, capture_output=True)
            subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", *args],
                check=True,
                capture_output=True,
            )
            return kind
        except subprocess.CalledProcessError:
            subprocess.run(["tc", "qdisc", "del", "dev", link, "root"], capture_output=True)
    return None


def _assert_shaped(kind: str, stats: str, took: float, reference: pathlib.Path) -> None:
    """The shaper saw the gradients (``stats``: its ``tc -s`` reading) and, for a token bucket,
    held steps 2..STEPS back for at least the time their bytes take at RATE (``took``)."""
    sent = int(re.search(r"Sent (\d+) bytes", stats).group(1))
    assert sent > 100_000, stats  # the gradients to process 1 went through the shaper
    if kind == "tbf":
        assert int(re.search(r"overlimits (\d+)", stats).group(1)) > 0, stats  # it held them back
        # Each step all-reduces the gradients (as many bytes as the parameters) through a
        # link of RATE bytes/s: steps 2..STEPS cannot take less, whatever the CPU does
        # (half of it, and two steps less, for the steps JAX dispatches ahead).
        grads = sum(a.nbytes for a in np.load(reference).values())
        assert took >= 0.5 * (STEPS - 4) * grads / RATE, (took, grads)
    print(f"slow link ({kind}): steps 2..{STEPS} took {took:.2f}s; {' '.join(stats.split())}")


@pytest.mark.slow
@needs_netns
@pytest.mark.parametrize("hosts,workload,shaped", [(2, "jobset", True), (4, "indexed-job", False)])
def test_pod_across_namespaces_equals_loopback(tmp_path, data, jax_cache, reference, hosts, workload, shaped):
    """Each worker on its own host, reached by its pod's name, ends bitwise equal to loopback.
    With ``shaped``, process 1's link is also slowed and lossy from before the workers connect
    (netem delay and loss, or a token bucket): it slows the steps but changes nothing (one run
    proves both: the same job, the same reference)."""
    name = f"hosts{hosts}"
    job = Job(tmp_path, data, jax_cache, name, hosts, workload=workload).start("--netns")
    kind, stats, seen = None, "", {}
    if shaped:
        deadline = time.monotonic() + TIMEOUT
        while "hosts" not in (job.status().get("attempts") or [{}])[-1]:
            assert time.monotonic() < deadline and job.proc.poll() is None
            time.sleep(0.05)
        host = job.host(1)
        kind = _shape(host["link"], host["netns"])  # before the workers connect: every byte goes through it
        while kind is not None and job.proc.poll() is None:  # the link goes with the attempt: keep the last reading
            shown = subprocess.run(["tc", "-s", "qdisc", "show", "dev", host["link"]], capture_output=True, text=True)
            stats = shown.stdout if shown.returncode == 0 and kind in shown.stdout else stats
            for step in (2, STEPS):
                if step not in seen and f"step {step}/{STEPS}" in job.log(0):
                    seen[step] = time.monotonic()
            time.sleep(0.05)
    out, _ = job.finish()
    pods = [f"{name}-slice-0-{i}" if workload == "jobset" else f"{name}-{i}" for i in range(hosts)]
    record = job.status()["attempts"][0]
    assert job.status()["restarts"] == 0
    assert record["coordinator_address"] == f"{pods[0]}.{name}:8476"  # the manifest's name, not an address
    assert [h["address"] for h in record["hosts"]] == [f"10.213.0.{i + 1}" for i in range(hosts)]
    for i in range(hosts):
        log = job.log(i)
        assert (
            f"host: process {i} hostname={pods[i]} address=10.213.0.{i + 1} coordinator={pods[0]}.{name}=10.213.0.1"
        ) in log
        sent = int(re.search(r"eth0_tx_bytes=(\d+)", log).group(1))
        assert sent > 100_000, sent  # the gradients went over the pod's own link
    job.params_equal(reference(hosts))
    assert _ours(_run_id(record["hosts"])) == set()  # every namespace, link and hosts file removed
    step_times = [float(t) for t in re.findall(r"step [2-9]/\d+ .*step_time_s=([0-9.e-]+)", out)]
    print(f"{hosts} hosts across namespaces: mean step time {np.mean(step_times):.3f}s over steps 2..{STEPS}")
    if shaped and kind is None:
        pytest.skip("neither sch_netem nor sch_tbf is available in this kernel: the link was not shaped")
    if shaped:
        _assert_shaped(kind, stats, seen[STEPS] - seen[2], reference(hosts))


@pytest.mark.slow
@needs_netns
def test_losing_the_coordinators_host_is_noticed_and_the_gang_resumes(host_losses, reference):
    """Process 0's host dies: its link goes down and its processes freeze (SIGSTOP), as when a
    machine loses power. Like Kubernetes, the launcher learns it only from the survivors."""
    job, cut = host_losses["coordlost"].result()
    detected = _detected_after(job, cut)
    assert detected < DETECTION_BOUND, detected
    first = job.status()["attempts"][0]
    assert first["exit_codes"][1] not in (0, None)  # the survivor gave up on its own
    _assert_restored_and_equal(job, 0, reference(2))
    print(f"coordinator lost: first worker exit after {detected:.1f}s (heartbeat timeout {HEARTBEAT}s)")
