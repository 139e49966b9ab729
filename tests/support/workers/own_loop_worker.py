"""One process of a 2-process job with its own training loop (not the Trainer), guarded by
``roxxel.train.watchdog.watch_loop`` (spawned by tests/train/test_watchdog.py under
``roxxel-worker``). Each step all-reduces a counter across the processes, as a data-parallel
step would; process STALL_PID blocks its main thread in Python after step STALL_STEP, alive.

argv: coordinator process_id num_processes stall_pid stall_step steps
Prints ``BLOCKING <step>`` before blocking and ``FINISHED <total>`` at the end.
"""

import sys
import time

import roxxel.distributed as rd

coordinator, pid, nproc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stall_pid, stall_step, steps = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
rd.initialize(
    coordinator, nproc, pid, initialization_timeout=60, heartbeat_timeout_seconds=100
)  # JAX's default heartbeat: the watchdog must act first; a peer's failed collective ends it at once

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

from roxxel.train.watchdog import watch_loop  # noqa: E402

mesh = jax.make_mesh((jax.device_count(),), ("d",))
replicated = NamedSharding(mesh, PartitionSpec())
step_fn = jax.jit(lambda x: jnp.sum(x) + 1, out_shardings=replicated)  # an all-reduce across the processes
total = jnp.zeros(())
with watch_loop() as watchdog:  # ROXXEL_WATCHDOG's bounds
    for step in range(1, steps + 1):
        local = np.full((jax.local_device_count(),), step, dtype=np.int32)
        spread = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("d")), local)
        total = jax.block_until_ready(step_fn(spread))
        watchdog.progress(step)
        if step == stall_step and pid == stall_pid:
            print(f"BLOCKING {step}", flush=True)
            time.sleep(3600)  # the main thread blocked in Python; the process and JAX's heartbeat stay alive
        time.sleep(0.02)
print(f"FINISHED {int(total)}", flush=True)
rd.shutdown()
