"""A process that saves to an object store answering errors (spawned by
tests/train/test_checkpoint_gcs_failures.py; the emulator injects the faults).

    python tests/support/workers/ckpt_gcs_fail_worker.py gs://BUCKET/PATH TIMEOUT

Saves step 1 with ``Checkpointer(timeout=TIMEOUT)``, waits for it, then closes; prints
``SAVED``/``SAVE_FAILED``, then ``CLOSED``/``CLOSE_FAILED`` with the seconds since the save
started and the exception's type. A raw (non-CheckpointSaveError) exception from close()
is not caught. Exits 1 when the save or close failed, 0 otherwise.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
import support.ckpt as common  # noqa: E402

from roxxel.train.checkpoint import Checkpointer, CheckpointSaveError  # noqa: E402

directory, timeout = sys.argv[1], float(sys.argv[2])
ckpt = Checkpointer(directory, state=common.build(dropout=None), timeout=timeout, max_to_keep=1)
failed = False
start = time.monotonic()
print("SAVING", flush=True)
try:
    ckpt.save(1)
    ckpt.wait_until_finished()
    print(f"SAVED {time.monotonic() - start:.1f}", flush=True)
except CheckpointSaveError as err:
    failed = True
    print(f"SAVE_FAILED {time.monotonic() - start:.1f} {err}", flush=True)
try:
    ckpt.close()
    print(f"CLOSED {time.monotonic() - start:.1f}", flush=True)
except CheckpointSaveError as err:
    failed = True
    print(f"CLOSE_FAILED {time.monotonic() - start:.1f} {err}", flush=True)
sys.exit(1 if failed else 0)
