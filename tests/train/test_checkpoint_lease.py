"""The writer lease of a ``gs://`` checkpoint directory (roxxel.train.checkpoint.lease),
against gcp-storage-emulator with GCS's generation preconditions
(tests/support/gcs_emulator.py: ``ifGenerationMatch`` on uploads and deletes, 412 on a
mismatch, as https://cloud.google.com/storage/docs/request-preconditions documents). No
real GCS is reachable here: the emulator stands in for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

BUCKET = "roxxel-test"  # the gcs_emulator fixture's (tests/conftest.py)
TTL = 1.5


@pytest.fixture
def store(gcs_emulator, monkeypatch):
    """This process pointed at the emulator; the lease module's client reads the environment."""
    for key, value in gcs_emulator.items():
        monkeypatch.setenv(key, value)
    from google.cloud import storage

    return storage.Client().bucket(BUCKET)


def _take(directory, who, ttl=TTL):
    from roxxel.train.checkpoint.lease import GcsLease

    return GcsLease.take(directory, {"holder": who}, ttl_s=ttl)


def test_one_writer_takes_the_lease_and_a_second_is_refused_naming_the_holder(store):
    from roxxel.train.checkpoint.lease import GcsLease

    first = _take(f"gs://{BUCKET}/a", "run 'lm', host h0, pid 1")
    assert isinstance(first, GcsLease)
    record = json.loads(store.blob("a/.roxxel-writer.lease").download_as_text())
    assert record["holder"] == "run 'lm', host h0, pid 1"
    started = time.monotonic()
    second = _take(f"gs://{BUCKET}/a", "run 'lm', host h1, pid 2")
    assert second == "run 'lm', host h0, pid 1"  # renewed while the newcomer watched: refused
    assert time.monotonic() - started < TTL + 1
    first.release()
    assert not store.blob("a/.roxxel-writer.lease").exists()
    third = _take(f"gs://{BUCKET}/a", "run 'lm', host h1, pid 3")  # released: taken at once
    assert isinstance(third, GcsLease)
    third.release()


def test_a_crashed_holders_lease_is_taken_over_after_its_ttl_and_the_old_holder_learns_it_lost(store):
    from roxxel.train.checkpoint.lease import GcsLease

    crashed = _take(f"gs://{BUCKET}/b", "crashed")
    assert isinstance(crashed, GcsLease)
    crashed._stop.set()  # as a SIGKILLed process: no more renewals, no release
    crashed._thread.join()
    started = time.monotonic()
    heir = _take(f"gs://{BUCKET}/b", "heir")
    waited = time.monotonic() - started
    assert isinstance(heir, GcsLease), heir
    assert TTL <= waited < TTL + 2, waited
    assert json.loads(store.blob("b/.roxxel-writer.lease").download_as_text())["holder"] == "heir"
    # Were the crashed one only paused, its next renewal finds the lease taken: it stops, never overwrites.
    assert crashed.renew() is False and "taken over" in crashed.lost
    assert json.loads(store.blob("b/.roxxel-writer.lease").download_as_text())["holder"] == "heir"
    heir.release()


SECOND_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from roxxel.train.checkpoint import Checkpointer, CheckpointOwnerError
    from support.ckpt import MODEL_DIMS, build
    try:
        Checkpointer(sys.argv[1], state=build(MODEL_DIMS, 0), run_name="lm").close()
    except CheckpointOwnerError as err:
        print("REFUSED", err)
        sys.exit(78)
    print("OPENED")
""")


@pytest.mark.slow
def test_two_trainers_on_one_gs_directory_the_second_is_refused_in_one_line(store, gcs_emulator, tmp_path):
    """The Checkpointer takes the lease on gs:// as it takes the flock on a local disk."""
    from roxxel.train.checkpoint import Checkpointer
    from support.ckpt import MODEL_DIMS, build
    from support.paths import TESTS

    env = {**os.environ, **gcs_emulator, "ROXXEL_CHECKPOINT_LEASE_S": "3", "JAX_PLATFORMS": "cpu"}
    os.environ["ROXXEL_CHECKPOINT_LEASE_S"] = "3"
    try:
        with Checkpointer(f"gs://{BUCKET}/c", state=build(MODEL_DIMS, 0), run_name="lm") as ckpt:
            ckpt.restore()
            ckpt.save(1, {"loss": 1.0}, force=True)
            out = subprocess.run(
                [sys.executable, "-c", SECOND_WRITER, f"gs://{BUCKET}/c", str(TESTS)],
                capture_output=True,
                text=True,
                timeout=180,
                env=env,
            )
            assert out.returncode == 78, out.stdout + out.stderr[-3000:]
            line = [x for x in out.stdout.splitlines() if x.startswith("REFUSED")]
            assert line and "being written by another trainer (run 'lm', host" in line[0], out.stdout
    finally:
        del os.environ["ROXXEL_CHECKPOINT_LEASE_S"]
    assert not store.blob("c/.roxxel-writer.lease").exists()  # released at close
    out = subprocess.run(
        [sys.executable, "-c", SECOND_WRITER, f"gs://{BUCKET}/c", str(TESTS)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert out.returncode == 0 and "OPENED" in out.stdout, out.stdout + out.stderr[-3000:]
