"""One process of a 2-process jax.distributed job (CPU, loopback) in which process RAISE_PID
raises an uncaught exception right after initialising, while its peer goes on into a
collective (spawned by tests/distributed/test_distributed_multiprocess.py).

argv: coordinator process_id num_processes raise_pid
"""

import sys
import time

import jax.numpy as jnp
from jax.experimental import multihost_utils

import roxxel.distributed

coordinator, pid, nproc, raise_pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
roxxel.distributed.initialize(coordinator_address=coordinator, num_processes=nproc, process_id=pid)
if pid == raise_pid:
    print(f"RAISING AT {time.time()}", flush=True)
    raise RuntimeError("this process fails before its first step")
print("PEER IN COLLECTIVE", flush=True)
multihost_utils.process_allgather(jnp.ones(1))
print("PEER PASSED", flush=True)
