"""The straggler report's cost across processes: one ``StragglerReport.observe`` (an all-gather
of one float64 per process, then a few numpy operations) against a training step.

Two ``jax.distributed`` processes on loopback (CPU devices), each timing 300 calls of
``observe`` after 20 unmeasured ones, and, in the same run, the step of a small dense model
(a jitted forward + backward + SGD update of a 4x1024x1024 MLP on a 64x1024 batch, the
baseline). The report runs once per logging window, so its cost per step is the call's
time divided by ``log_every`` (the main job logs every 20 steps: examples/lm/train.py). Target: < 1% of the step.

Usage: python bench/stragglers.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CALLS, WARMUP, LOG_EVERY = 300, 20, 20


def worker(coordinator: str, pid: int, out: str) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.distributed.initialize(coordinator, num_processes=2, process_id=pid, initialization_timeout=120)
    from roxxel.train.stragglers import StragglerReport

    report = StragglerReport()
    times = []
    for i in range(WARMUP + CALLS):
        started = time.perf_counter()
        report.observe(i, 0.01)
        times.append(time.perf_counter() - started)
    observe_s = float(np.median(times[WARMUP:]))

    keys = jax.random.split(jax.random.key(pid), 5)
    params = [jax.random.normal(k, (1024, 1024), jnp.float32) / 32 for k in keys[:4]]
    x = jax.random.normal(keys[4], (64, 1024), jnp.float32)

    @jax.jit
    def step(params, x):
        def loss(params):
            h = x
            for w in params:
                h = jnp.tanh(h @ w)
            return jnp.mean(h**2)

        grads = jax.grad(loss)(params)
        return [w - 1e-3 * g for w, g in zip(params, grads)]

    jax.block_until_ready(step(params, x))
    steps = []
    for _ in range(50):
        started = time.perf_counter()
        params = jax.block_until_ready(step(params, x))
        steps.append(time.perf_counter() - started)
    Path(out).write_text(json.dumps({"observe_s": observe_s, "step_s": float(np.median(steps))}))


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "tests"))
    import tempfile

    from _measure import load_average, record
    from _table import print_table
    from support.net import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROXXEL_", "JAX_"))}
    env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    coordinator = f"127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory() as work:
        outs = [os.path.join(work, f"{i}.json") for i in range(2)]
        procs = [
            subprocess.Popen([sys.executable, __file__, "--worker", coordinator, str(i), outs[i]], env=env)
            for i in range(2)
        ]
        if [p.wait(timeout=600) for p in procs] != [0, 0]:
            raise SystemExit("a worker failed")
        results = [json.loads(Path(o).read_text()) for o in outs]
    observe_s = max(r["observe_s"] for r in results)
    step_s = max(r["step_s"] for r in results)
    per_step = observe_s / LOG_EVERY
    print_table(
        f"straggler report on 2 processes ({load_average()}); milliseconds",
        [
            ("training step", step_s * 1e3),
            ("observe() per call", observe_s * 1e3),
            (f"observe() per step (log_every={LOG_EVERY})", per_step * 1e3),
        ],
        "ms",
        "training step",
        higher_is_better=False,
    )
    share = per_step / step_s
    print(f"cost: {100 * share:.3f}% of the step (target < 1%)")
    record("straggler report cost", f"{100 * share:.3f}% of a step", "< 1%", share < 0.01)


if __name__ == "__main__":
    main()
