"""Training: the Trainer, the model state, Orbax checkpoints, and the rank-0 logger."""

from roxxel.train.checkpoint import (
    CheckpointCorruptError,
    Checkpointer,
    CheckpointRestoreError,
    CheckpointSaveError,
    ModelChangeError,
    Preempted,
    RunMismatchError,
    describe_changes,
)
from roxxel.train.logger import Logger
from roxxel.train.options import Cadence, DataOptions, LoopOptions, RestoreOptions
from roxxel.train.state import ModelState
from roxxel.train.state_placement import sharded_state
from roxxel.train.trainer import Callback, NaNLossError, Trainer

__all__ = [
    "Cadence",
    "Callback",
    "CheckpointCorruptError",
    "CheckpointRestoreError",
    "CheckpointSaveError",
    "Checkpointer",
    "DataOptions",
    "describe_changes",
    "Logger",
    "LoopOptions",
    "ModelChangeError",
    "ModelState",
    "NaNLossError",
    "Preempted",
    "RestoreOptions",
    "RunMismatchError",
    "Trainer",
    "sharded_state",
]
