"""Failed saves, then wait_until_finished() and close(): does any Orbax thread write afterwards?
(spawned by tests/train/test_checkpoint_close_after_failure.py)

    python tests/support/workers/ckpt_close_worker.py WORKDIR ROUNDS SLOW_S

Each round: a Checkpointer saves step 1; the checkpoint directory is then replaced by a
file, so the save of step 2 fails (the thread creating its directory fails while Orbax's
writers wait for it); ``wait_until_finished()`` raises, ``close()`` returns; the directory
is re-created at once and watched for ``SLOW_S`` + 0.5 s. Orbax's sharding-file writer is
slowed by ``SLOW_S`` before it writes (a busy machine), so a writer that outlives close()
writes into the re-created directory every round instead of sometimes. Prints ``ROUND <i>
<json>`` per round (``written``: paths found in the re-created directory; ``threads``:
Orbax's threads alive when close() returned), then ``DONE``.
"""

import asyncio
import json
import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
import support.ckpt as common  # noqa: E402

from orbax.checkpoint._src.serialization import jax_array_handlers  # noqa: E402

from roxxel.train.checkpoint import CheckpointSaveError, Checkpointer  # noqa: E402

work, rounds, slow_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
write_shardings = jax_array_handlers._async_serialize_shardings


async def slow_write_shardings(*args, **kwargs):
    await asyncio.sleep(slow_s)
    return await write_shardings(*args, **kwargs)


jax_array_handlers._async_serialize_shardings = slow_write_shardings

ms = common.build()
for i in range(rounds):
    directory = os.path.join(work, f"ckpt{i}")
    ckpt = Checkpointer(directory, state=ms, timeout=20, max_to_keep=1)
    ckpt.save(1)
    ckpt.wait_until_finished()
    shutil.rmtree(directory)
    with open(directory, "w") as f:
        f.write("not a directory")
    ckpt.save(2)
    raised = []
    for call in (ckpt.wait_until_finished, ckpt.close):
        try:
            call()
        except CheckpointSaveError as err:
            raised.append(f"{call.__name__}: {err}"[:200])
    threads = sorted(t.name for t in threading.enumerate() if type(t).__name__ == "_SignalingThread" and t.is_alive())
    os.unlink(directory)
    os.mkdir(directory)
    time.sleep(slow_s + 0.5)
    written = sorted(
        os.path.relpath(os.path.join(r, n), directory) for r, ds, fs in os.walk(directory) for n in ds + fs
    )
    print("ROUND", i, json.dumps({"written": written, "threads": threads, "raised": raised}), flush=True)
print("DONE", flush=True)
