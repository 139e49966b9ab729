"""A real JAX cluster of OS processes over loopback, wired by roxxel.distributed.initialize()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import roxxel.distributed as rd

from support.net import free_port

pytestmark = pytest.mark.slow

TIMEOUT = 120  # seconds for a whole subprocess run; JAX's own timeouts below are much lower

WORKER_SCRIPT = textwrap.dedent(
    """
    import json
    import logging
    import numpy as np
    import roxxel.distributed as rd

    logging.basicConfig(level=logging.INFO)
    info = rd.initialize()
    again = rd.initialize()
    assert again == info, (again, info)

    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    gathered = multihost_utils.process_allgather(np.array([info.process_id + 1]))
    mesh = Mesh(np.array(jax.devices()), ("d",))
    local = np.full((jax.local_device_count(),), info.process_id + 1, dtype=np.int32)
    global_array = jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")), local)
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(global_array)
    print(json.dumps({
        "info": info.__dict__,
        "again_is_same": again is info,
        "allgather_sum": int(np.sum(gathered)),
        "psum": int(total),
    }), flush=True)
    rd.shutdown()
    """
)


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_", "TPU_", "JOB"))}
    env.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        PYTHONUNBUFFERED="1",
    )
    return env


def _run_all(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def test_two_processes_form_a_cluster_over_loopback():
    port = free_port()
    procs = []
    for pid in range(2):
        env = _base_env() | {
            rd.ENV_COORDINATOR_ADDRESS: f"127.0.0.1:{port}",
            rd.ENV_NUM_PROCESSES: "2",
            rd.ENV_PROCESS_ID: str(pid),
            rd.ENV_INIT_TIMEOUT: "60",
            rd.ENV_HEARTBEAT_TIMEOUT: "30",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER_SCRIPT],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = _run_all(procs)
    for pid, (code, out, err) in enumerate(results):
        assert code == 0, f"process {pid} exited with {code}:\n{err}"
        report = json.loads(out.strip().splitlines()[-1])
        assert report["info"] == {
            "process_id": pid,
            "num_processes": 2,
            "coordinator_address": f"127.0.0.1:{port}",
            "source": "roxxel",
            "local_device_count": 2,
            "global_device_count": 4,
        }
        assert report["again_is_same"] is True
        assert report["allgather_sum"] == 1 + 2
        assert report["psum"] == 2 * 1 + 2 * 2  # each process fills its 2 devices with pid + 1
    # Process 0 alone logs the detected identity at INFO.
    assert "source=roxxel" in results[0][2]
    assert "source=roxxel" not in results[1][2]


EXTERNAL_SCRIPT = textwrap.dedent(
    """
    import json, logging, sys
    import jax
    import roxxel.distributed as rd

    jax.distributed.initialize(sys.argv[1], num_processes=1, process_id=0, initialization_timeout=30)
    info = rd.initialize()
    rd.shutdown()
    print(json.dumps({"info": info.__dict__, "still_up": jax.distributed.is_initialized()}), flush=True)
    jax.distributed.shutdown()
    """
)


def test_initialize_accepts_a_runtime_that_other_code_started():
    port = free_port()
    env = _base_env() | {rd.ENV_JOB_INDEX: "not looked at"}
    proc = subprocess.Popen(
        [sys.executable, "-c", EXTERNAL_SCRIPT, f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ((code, out, err),) = _run_all([proc])
    assert code == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["info"]["source"] == "external"
    assert report["info"]["coordinator_address"] == f"127.0.0.1:{port}"
    assert (report["info"]["process_id"], report["info"]["num_processes"]) == (0, 1)
    assert report["still_up"] is True  # rd.shutdown() leaves other code's runtime alone


@pytest.mark.parametrize("raise_pid", [0, 1])
def test_a_process_that_raises_ends_at_once_and_so_does_its_peer(tmp_path, raise_pid):
    """Before: the process that raised waited at JAX's shutdown barrier (300 s) for a peer
    that waited in turn for it in a collective, and both died by SIGABRT 5 minutes later
    (seen with the worker image run as containers). Now it reports the exception, says
    why it ends, and exits 1 at once; its peer's collective fails soon after."""
    from support.paths import WORKERS
    import time

    coordinator = f"127.0.0.1:{free_port()}"
    env = dict(_base_env(), XLA_FLAGS="--xla_force_host_platform_device_count=1", ROXXEL_HEARTBEAT_TIMEOUT="10")
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS / "raise_worker.py"), coordinator, str(i), "2", str(raise_pid)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    ended = [0.0, 0.0]
    deadline = time.monotonic() + TIMEOUT
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if p.poll() is not None and not ended[i]:
                ended[i] = time.time()
        time.sleep(0.05)
    outs = [p.communicate(timeout=10) for p in procs]
    ended = [e or time.time() for e in ended]
    failed_out, failed_err = outs[raise_pid]
    assert procs[raise_pid].returncode == 1, failed_err[-3000:]
    assert "RuntimeError: this process fails before its first step" in failed_err
    assert f"roxxel: process {raise_pid} ends now (exit 1) after an uncaught RuntimeError" in failed_err
    raised = float(failed_out.split("RAISING AT ")[1].split()[0])
    # Before: 30 s and more (JAX's exit function waited at the shutdown barrier for the peer).
    assert ended[raise_pid] - raised < 10, f"the raising process took {ended[raise_pid] - raised:.1f} s to exit"
    peer = procs[1 - raise_pid]
    assert peer.returncode != 0 and "PEER PASSED" not in outs[1 - raise_pid][0], outs[1 - raise_pid]
    assert ended[1 - raise_pid] - raised < 60, f"the peer took {ended[1 - raise_pid] - raised:.1f} s to exit"


DRAIN_SCRIPT = """
import jax, jax.numpy as jnp
from roxxel.distributed import leaving

@jax.jit
def slow(x):  # ~1 s of work on one CPU device
    return jax.lax.fori_loop(0, 300, lambda i, a: jnp.tanh(a @ a), x)

busy = slow(jax.device_put(jnp.eye(256) * 0.5, jax.local_devices()[1]))
queued_while_busy = not busy.is_ready()
leaving._finish_local_work(timeout=60)
print("queued", queued_while_busy, "ready after", busy.is_ready())
"""


def test_leaving_waits_for_arrays_still_computed_on_any_local_device():
    """What shutdown() waits for before its barrier: an array still being computed on the second
    local device (devices run independently: a small computation on that device finishes first)
    is ready when ``_finish_local_work`` returns. A process that left with part of a collective
    still running hung its peer's exit forever (2-process CPU job: the CPU client's destructor
    joined a thread waiting in Gloo's connect)."""
    env = dict(_base_env(), XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run([sys.executable, "-c", DRAIN_SCRIPT], env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert "ready after True" in out.stdout, out.stdout
