"""The progress watchdog (roxxel.train.watchdog): its bounds on a fake clock, and real
2-process jax.distributed runs (CPU, loopback) whose worker blocks its main thread, in the
Trainer and in a program's own loop under roxxel-worker; the straggler report
(roxxel.train.stragglers) on a real run whose worker is slow."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from roxxel.contract import STALLED_EXIT_CODE
from roxxel.exit_codes import describe
from roxxel.train.watchdog import ProgressWatchdog, WatchdogBounds
from support import processes
from support.lm import make_dataset
from support.net import free_port
from support.paths import TESTS, WORKERS


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _watchdog(**bounds):
    clock, fired = Clock(), []
    wd = ProgressWatchdog(WatchdogBounds(**bounds), process_index=3, on_stall=fired.append, clock=clock)
    return wd, clock, fired


def _steps(wd, clock, n, seconds, first=1):
    for step in range(first, first + n):
        clock.now += seconds
        assert wd.check() is None, (step, wd.step_bound())
        wd.step_done(step)


def test_a_healthy_run_ten_times_slower_under_load_never_trips_it():
    wd, clock, _ = _watchdog(step_floor_s=5, step_multiple=20)
    wd.first_step(0)
    clock.now += 100  # compiling: within first_step_s
    assert wd.check() is None
    wd.step_done(1, timed=False)
    _steps(wd, clock, 50, 0.5, first=2)
    assert wd.step_bound() == 10.0  # 20 x the 0.5 s median
    _steps(wd, clock, 200, 5.0, first=52)  # load arrives: every step 10x slower, the median follows
    assert wd.step_bound() == 100.0


def test_a_step_past_its_bound_is_named_once_with_process_step_and_activity():
    wd, clock, fired = _watchdog(step_floor_s=5, step_multiple=20)
    wd.step_done(1, timed=False)
    _steps(wd, clock, 10, 1.0, first=2)
    clock.now += 19.9
    assert wd.check() is None
    clock.now += 0.2
    message = wd.check()
    assert message is not None and wd.check() is None  # once
    assert message.startswith(
        "watchdog: process 3 made no progress for 20 s (bound 20 s) while running a step, after step 11"
    )
    assert f"exiting with {STALLED_EXIT_CODE}" in message


def test_evaluations_and_saves_have_their_own_bounds():
    wd, clock, _ = _watchdog(step_floor_s=5, step_multiple=2, eval_s=60)
    wd.step_done(1, timed=False)
    _steps(wd, clock, 5, 1.0, first=2)
    with wd.during("evaluating at step 6", wd.bounds.eval_s):
        clock.now += 59
        assert wd.check() is None
    clock.now += 4.9  # the step bound starts afresh after the evaluation
    assert wd.check() is None
    with wd.during("saving step 7", 30):
        clock.now += 31
        assert "while saving step 7, after step 6" in wd.check()


def test_as_a_listener_of_the_loops_sections_each_gets_its_bound():
    """The Trainer's sections drive it: a restore and the first step (compiling) have
    first_step_s, a save save_s; a compile stays out of the median, a step is progress."""
    from roxxel.train.sections import COMPILE, DATA_WAIT, RESTORE, SAVE, STEP, Section

    wd, clock, _ = _watchdog(step_floor_s=5, step_multiple=2, first_step_s=100, save_s=30)

    def section(name, step, seconds):
        wd.section_began(name, step)
        clock.now += seconds
        message = wd.check()
        wd.on_section(Section(name, step, clock.now - seconds, seconds))
        return message

    assert section(RESTORE, 0, 60) is None  # under first_step_s, not the 5 s step bound
    clock.now += 30  # the stream's set-up: still first_step_s after a restore
    assert section(DATA_WAIT, 1, 1) is None and section(COMPILE, 1, 50) is None
    assert section(DATA_WAIT, 2, 0.5) is None and section(STEP, 2, 0.5) is None
    assert wd.step_bound() == 5.0  # the floor over 2 x the one 1 s step: the 50 s compile is not in the median
    for step in range(3, 12):
        assert section(DATA_WAIT, step, 0.5) is None and section(STEP, step, 0.5) is None
    assert section(SAVE, 11, 29) is None
    assert "while saving step 12" in section(SAVE, 12, 31)


def test_roxxel_watchdog_sets_the_bounds_or_turns_the_watchdog_off():
    """The job spec's watchdog section reaches the Trainer as ROXXEL_WATCHDOG (JSON or off)."""
    import dataclasses

    from roxxel.contract import WATCHDOG_FIELDS
    from roxxel.exit_codes import ConfigValueError
    from roxxel.train.watchdog import DEFAULT_BOUNDS, bounds_from_env

    assert WATCHDOG_FIELDS == tuple(f.name for f in dataclasses.fields(WatchdogBounds))  # what the launcher renders
    assert bounds_from_env({}) is DEFAULT_BOUNDS
    assert bounds_from_env({"ROXXEL_WATCHDOG": "off"}) is None
    got = bounds_from_env({"ROXXEL_WATCHDOG": '{"step_floor_s": 5, "first_step_s": 60}'})
    assert (got.step_floor_s, got.first_step_s, got.eval_s) == (5, 60, DEFAULT_BOUNDS.eval_s)
    for bad in ("5", '{"step_flor_s": 5}', '{"step_floor_s": 0}', "{", '{"poll_s": 1e13}', '{"poll_s": Infinity}'):
        with pytest.raises(ConfigValueError, match="ROXXEL_WATCHDOG"):
            bounds_from_env({"ROXXEL_WATCHDOG": bad})


def test_a_trainer_left_at_the_default_reads_roxxel_watchdog(monkeypatch, tmp_path):
    from roxxel import Curriculum, Phase
    from roxxel.train import LoopOptions, Trainer
    from support.lm import loss_fn, make_model

    cur = Curriculum(
        make_dataset(str(tmp_path / "d")), [Phase(steps=2, global_batch_size=2, seq_len=16)], chunk_tokens=256
    )
    model, opt = make_model()
    monkeypatch.setenv("ROXXEL_WATCHDOG", "off")
    assert Trainer(model, opt, cur, loss_fn).watchdog_bounds is None
    explicit = WatchdogBounds(step_floor_s=7)
    assert (
        Trainer(model, opt, cur, loss_fn, loop=LoopOptions(watchdog=explicit)).watchdog_bounds is explicit
    )  # the argument wins


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="step_floor_s must be a positive number"):
        WatchdogBounds(step_floor_s=0)
    assert describe(STALLED_EXIT_CODE).startswith("stalled")


def _run_pair(tmp_path, stall_pid, stall_step):
    data = str(tmp_path / "data")
    make_dataset(data)
    coordinator = f"127.0.0.1:{free_port()}"
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(WORKERS / "stall_worker.py"),
                coordinator,
                str(i),
                "2",
                data,
                str(tmp_path / "run"),
                str(stall_pid),
                str(stall_step),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    return procs, [p.communicate(timeout=400) for p in procs]


@pytest.mark.slow
def test_a_slow_worker_is_named_as_a_straggler_and_nothing_restarts(tmp_path):
    """Process 1 spends 0.15 s of its own time more than process 0 on every step; both see the
    same step time (each step waits for the slowest), so only the host time names it."""
    procs, outs = _run_pair(tmp_path, stall_pid=1, stall_step=0)
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and "FINISHED" in out, f"process {i}: {p.returncode}\n{out[-2000:]}\n{err[-4000:]}"
    assert "process 1 is a straggler" in outs[0][1] and "of host time per step" in outs[0][1], outs[0][1][-3000:]
    assert "is a straggler" not in outs[1][1]  # rank 0 alone reports
    hosts = [line.split() for line in outs[0][0].splitlines() if line.startswith("HOST ")]  # the window metrics
    assert hosts and all(int(h[4]) == 1 and float(h[3]) > 0.14 for h in hosts if float(h[3]) > 0), hosts


@pytest.mark.slow
@pytest.mark.parametrize("stall_pid", [1])
def test_a_worker_blocked_in_python_ends_every_process_with_stacks_and_43(tmp_path, stall_pid):
    """Before: process 1 blocked at step 5 with its process and JAX's heartbeat alive, and the
    job stayed Running forever (worker 0 waiting in the step's collective). Now the blocked
    process's watchdog sees no step finish within its bound, writes its threads' stacks, and exits
    43. Its peer, waiting in the next step's collective, either passes its own bound and does the
    same, or, when the blocked process's exit comes first, fails in that collective (the peer's
    connection closed; JAX then ends it, SIGABRT) - under load either may come first (seen in a
    CI run). Neither may finish or hang."""
    started = time.monotonic()
    procs, outs = _run_pair(tmp_path, stall_pid, stall_step=5)
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert "FINISHED" not in out and p.returncode != 0, f"process {i}: {p.returncode}\n{out[-2000:]}\n{err[-4000:]}"
        if i == stall_pid or p.returncode == STALLED_EXIT_CODE:
            assert p.returncode == STALLED_EXIT_CODE, f"process {i}: {p.returncode}\n{err[-4000:]}"
            assert f"watchdog: process {i} made no progress" in err, err[-3000:]
            assert "the stacks of this process's threads follow" in err and "Thread 0x" in err, err[-3000:]
        else:
            assert "Connection closed by peer" in err or "another task died" in err, err[-4000:]
    blocked_err = outs[stall_pid][1]
    # step 5 ran (its section ended: progress) and its window's callback blocked; the stack shows where
    assert "while running a step, after step 5" in blocked_err and "in on_step" in blocked_err, blocked_err[-3000:]
    assert time.monotonic() - started < 380


def test_the_watchdog_runs_in_jobs_only(monkeypatch):
    """A notebook paused in a debugger is not ended: one process outside roxxel-worker has no
    watchdog; under roxxel-worker (which sets ROXXEL_CONFIG_ERROR_FILE for its child) it has."""
    from roxxel.train.watchdog import in_a_job

    monkeypatch.delenv("ROXXEL_CONFIG_ERROR_FILE", raising=False)
    assert not in_a_job()
    monkeypatch.setenv("ROXXEL_CONFIG_ERROR_FILE", "/tmp/report")
    assert in_a_job()


def _own_loop(tmp_path, name: str, bounds: str | list[str], stall_step: int, steps: int) -> list[processes.Process]:
    """A 2-process job with its own loop (tests/support/workers/own_loop_worker.py), each
    process under roxxel-worker, with ROXXEL_WATCHDOG as the job spec renders it (``bounds``:
    one for both, or one per process)."""
    worker = str(WORKERS / "own_loop_worker.py")
    per_process = [bounds] * 2 if isinstance(bounds, str) else bounds
    return processes.start(
        lambda i, coordinator: (
            ["env", f"ROXXEL_WATCHDOG={per_process[i]}", sys.executable, "-m", "roxxel.worker", "--"]
            + [sys.executable, worker, coordinator, str(i), "2", "1", str(stall_step), str(steps)]
        ),
        2,
        tmp_path / "logs",
        processes.cpu_env(1),
        name=name,
    )


def _bounds(floor: float) -> str:
    return f'{{"step_floor_s": {floor}, "step_multiple": 10, "first_step_s": 120, "poll_s": 0.25}}'


@pytest.mark.slow
def test_a_job_with_its_own_loop_and_a_worker_stuck_alive_ends_within_the_watchdogs_floor(tmp_path):
    """Issue #52: two workers of a program with its own loop, one blocked alive in it, held the
    job forever (no Trainer, no watchdog). With watch_loop() and one progress(step) call per step,
    the stuck worker writes its stacks and exits 43 through roxxel-worker about step_floor_s
    after its last step (the first step's longer bound ended at the first progress call); its
    peer, waiting in the next all-reduce, ends too.

    The peer is process 0, which hosts JAX's coordination service, and its bound ends 1 s
    before the stuck worker's: the order in which CI once saw the stuck worker abort (134,
    no stacks) when the coordinator went away first. Process 0 now lingers after its stacks."""
    floor = 3
    procs = _own_loop(tmp_path, "stuck", [_bounds(floor - 1), _bounds(floor)], stall_step=5, steps=10_000)
    deadline = time.monotonic() + 150
    while "BLOCKING 5" not in procs[1].out and procs[1].popen.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    blocked = time.monotonic()
    assert "BLOCKING 5" in procs[1].out, f"{procs[1].out[-2000:]}\n{procs[1].err[-4000:]}"
    procs[1].popen.wait(timeout=60)
    ended_s = time.monotonic() - blocked
    processes.finish(procs, expect=None, timeout=30)  # the peer: its own bound, or its all-reduce fails
    stuck, peer = procs[1], procs[0]
    assert stuck.returncode == STALLED_EXIT_CODE, f"{stuck.returncode}\n{stuck.err[-4000:]}"
    assert re.search(
        rf"watchdog: process 1 made no progress for \d+ s \(bound {floor} s\) while running a step, after step 5",
        stuck.err,
    ), stuck.err[-3000:]
    assert "Thread 0x" in stuck.err and "own_loop_worker.py" in stuck.err, stuck.err[-3000:]
    assert floor <= ended_s < floor + 20, ended_s  # the floor, the poll, the stacks, a loaded machine
    assert "FINISHED" not in peer.out, peer.out[-2000:]
    assert "watchdog: process 0 made no progress" in peer.err, peer.err[-3000:]
    assert "process 0 hosts the coordinator: exiting in 6 s" in peer.err, peer.err[-3000:]
    if peer.returncode != STALLED_EXIT_CODE:  # its collective broke first (roxxel.distributed's hook)
        assert peer.returncode == 1 and "Connection closed by peer" in peer.err, (
            f"{peer.returncode}\n{peer.err[-3000:]}"
        )


@pytest.mark.slow
def test_a_healthy_own_loop_under_the_watchdog_finishes(tmp_path):
    """Its progress calls keep the watchdog quiet: both workers finish, exit 0 through roxxel-worker."""
    procs = processes.finish(_own_loop(tmp_path, "healthy", _bounds(10), stall_step=0, steps=40), expect=0)
    for proc in procs:
        assert "FINISHED 81" in proc.out and "watchdog" not in proc.err, proc.err[-3000:]


def test_an_own_loop_outside_a_job_has_no_watchdog_and_bad_bounds_are_refused(monkeypatch):
    from roxxel.exit_codes import ConfigValueError
    from roxxel.train.watchdog import watch_loop

    monkeypatch.delenv("ROXXEL_CONFIG_ERROR_FILE", raising=False)
    with watch_loop() as watchdog:
        watchdog.progress(1)  # costs nothing
        with watchdog.during("saving step 1"):
            pass
    assert watchdog.watchdog is None
    with pytest.raises(ValueError, match="bound must be"), watchdog.during("x", "poll_s"):
        pass
    monkeypatch.setenv("ROXXEL_WATCHDOG", '{"step_flor_s": 1}')
    with pytest.raises(ConfigValueError, match="ROXXEL_WATCHDOG"), watch_loop():
        pass
