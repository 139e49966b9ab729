"""Training: the Trainer, the model state, Orbax checkpoints, and the rank-0 logger."""

from roxxel.train.checkpoint import Checkpointer, Preempted, RunMismatchError
from roxxel.train.logger import Logger
from roxxel.train.state import ModelState
from roxxel.train.trainer import NaNLossError, Trainer

__all__ = ["Checkpointer", "Logger", "ModelState", "NaNLossError", "Preempted", "RunMismatchError", "Trainer"]
