"""The worker platform table (roxxel.distributed.platforms): its order of precedence, and what each row
carries; each platform's reader is tested through detect() in test_distributed_detect.py."""

from __future__ import annotations

import roxxel.distributed as rd
from roxxel.distributed.platforms import COORDINATOR_FROM_JAX, PLATFORMS, SINGLE, platform_for


def test_rows_are_in_precedence_order():
    assert [p.source for p in PLATFORMS] == ["roxxel", "jobset", "indexed-job", "roxxel", "gke-tpu", "slurm", "single"]


def test_sources_follow_the_table():
    assert rd.SOURCES == ("explicit", "roxxel", "jobset", "indexed-job", "gke-tpu", "slurm", "single")


def test_every_row_says_where_its_convention_comes_from():
    assert all(p.convention.strip() for p in PLATFORMS)


def test_the_last_row_always_applies():
    assert PLATFORMS[-1] is SINGLE
    assert platform_for({}) is SINGLE
    assert platform_for({"HOME": "/root"}) is SINGLE


def test_only_gke_tpu_leaves_the_coordinator_to_jax():
    assert COORDINATOR_FROM_JAX == {"gke-tpu"}


def test_the_first_row_that_applies_wins():
    both = {rd.ENV_PROCESS_ID: "0", rd.ENV_TPU_WORKER_HOSTNAMES: "h0"}
    assert platform_for(both) is PLATFORMS[0]
    assert platform_for({rd.ENV_NUM_PROCESSES: "2", rd.ENV_JOB_NAME: "lm"}).source == "indexed-job"
    assert platform_for({rd.ENV_NUM_PROCESSES: "2"}).source == "roxxel"
