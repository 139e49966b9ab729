"""A process whose background checkpoint save fails (spawned by tests/train/test_train_checkpoint_failures.py).

    python tests/support/workers/ckpt_fail_worker.py DIR INJECTION PATH_OUT

INJECTION: ``file`` (the checkpoint directory is replaced by a file) or ``rename`` (the
commit that renames the finished step fails with ENOSPC). PATH_OUT, the way out after
the failed save: ``exit`` (none: the interpreter exits), ``wait`` (wait_until_finished),
``save`` (the next save), ``close``, ``preempt`` (the failing save is the preemption save).
Nothing is caught: the process must end promptly, non-zero, with one readable message.
"""

import errno
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/
import support.ckpt as common  # noqa: E402

from roxxel.train.checkpoint import Checkpointer  # noqa: E402

directory, injection, path_out = sys.argv[1:4]
ms = common.build(dropout=None)
ckpt = Checkpointer(directory, state=ms, timeout=20, max_to_keep=1)  # bounds a whole save, also on a busy machine
ckpt.save(1)
ckpt.wait_until_finished()

if injection == "file":
    shutil.rmtree(directory)
    with open(directory, "w") as f:
        f.write("not a directory")
else:
    from orbax.checkpoint._src.checkpointers import async_checkpointer

    def broken_commit(*args, **kwargs):
        raise OSError(errno.ENOSPC, "injected: no space left on device")

    async_checkpointer._on_commit_callback = broken_commit

print("INJECTED", flush=True)
if path_out == "preempt":
    ckpt.request_preemption()  # in one process: as the SIGTERM handler does
    ckpt.save_and_exit_if_preempted(2)
ckpt.save(2)
if path_out == "wait":
    ckpt.wait_until_finished()
elif path_out == "save":
    ckpt.save(3)
    ckpt.wait_until_finished()
elif path_out == "close":
    ckpt.close()
print("END OF SCRIPT", flush=True)
