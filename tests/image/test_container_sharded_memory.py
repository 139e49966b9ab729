"""A model larger than one pod's memory limit (issue #48), as a user meets it: replicated, the
container is OOMKilled; sharded over 4 pods (``parallelism: {fsdp: 4}``), it trains.

The pods run as containers of the worker image (``submit --local --runtime podman``), each
with the spec's memory limit applied by the container engine as the kubelet applies it
(``--memory``, no swap), and real ``jax.distributed`` between them. The model: 6 pairs of
1024 x 4096 matrices, 51 M float32 parameters; with Adam's two moments its state is 582 MiB,
plus 194 MiB of gradients during a step, which does not fit a 768 MiB limit beside the
process itself (a few hundred MiB of Python, JAX and XLA). Sharded over 4 devices each pod
holds a quarter: 146 MiB.
"""

from __future__ import annotations

import pytest
import yaml

from support.container_job import launch, log, status
from support.image import IMAGE
from support.lm import make_dataset

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.timeout(1500)]

PROGRAM = """
import os
import jax, optax
from flax import nnx
import roxxel.distributed
from roxxel import Curriculum, Phase, Roxxel
from roxxel.sharding import default_mesh
from roxxel.train import Cadence, Trainer, sharded_state

roxxel.distributed.initialize()
W, H, PAIRS = 1024, 4096, 6
part, init = nnx.with_partitioning, nnx.initializers.lecun_normal()

class Big(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Embed(257, W, embedding_init=part(nnx.initializers.normal(0.02), (None, "fsdp")), rngs=rngs)
        self.up = nnx.List([nnx.Linear(W, H, kernel_init=part(init, ("fsdp", None)), use_bias=False, rngs=rngs) for _ in range(PAIRS)])
        self.down = nnx.List([nnx.Linear(H, W, kernel_init=part(init, (None, "fsdp")), use_bias=False, rngs=rngs) for _ in range(PAIRS)])
        self.out = nnx.Linear(W, 257, kernel_init=part(init, ("fsdp", None)), use_bias=False, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        for up, down in zip(self.up, self.down):
            x = x + down(nnx.relu(up(x))) / H
        return self.out(x)

def loss_fn(model, batch):
    logits = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

def make():
    model = Big(nnx.Rngs(0))
    return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

mesh = default_mesh()
model, optimizer = sharded_state(make, mesh)
held = sum(a.addressable_shards[0].data.nbytes for a in jax.tree.leaves((model, optimizer)))
print(f"state on this pod: {held / 2**20:.0f} MiB", flush=True)
curriculum = Curriculum(Roxxel(os.environ["ROXXEL_DATA_DIR"]), [Phase(steps=2, global_batch_size=4, seq_len=16)])
metrics = Trainer(model, optimizer, curriculum, loss_fn, mesh=mesh, cadence=Cadence(log_every=1)).run()
print(f"trained: loss {metrics['loss']:.3f}", flush=True)
"""


def _spec(tmp_path, name: str, parallelism: dict | None) -> str:
    data = {
        "apiVersion": "roxxel.dev/v1alpha1",
        "kind": "RoxxelJob",
        "name": name,
        "image": IMAGE,
        "command": ["python", "-c", PROGRAM],
        "accelerator": {"cpu": {"hosts": 4}},
        "resources": {"limits": {"memory": "768Mi"}},
        "data": {"gcsfuse": {"bucket": "my-datasets"}},  # --data-dir stands in for it
        "service_account": "roxxel-trainer",
        "checkpoint_dir": str(tmp_path / name / "checkpoints"),
        "max_restarts": 0,
        "termination_grace_period": 10,
    }
    if parallelism:
        data["parallelism"] = parallelism
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_replicated_is_oomkilled_and_sharded_over_four_pods_trains(worker_image, tmp_path):
    make_dataset(str(tmp_path / "data"))
    submit = ["--local", "--runtime", "podman", "--data-dir", str(tmp_path / "data")]

    out = launch(tmp_path, "submit", _spec(tmp_path, "replicated", None), *submit, check=None, timeout=900)
    record = status(tmp_path, "replicated")
    assert record["state"] == "Failed" and record["exit_code"] == 137, f"{record}\n{out.stdout[-3000:]}"
    assert "OOMKilled" in record["message"], record["message"]

    out = launch(tmp_path, "submit", _spec(tmp_path, "sharded", {"fsdp": 4}), *submit, check=None, timeout=900)
    record = status(tmp_path, "sharded")
    worker0 = log(tmp_path, "sharded")
    assert record["state"] == "Succeeded", f"{record}\n{worker0[-4000:]}\n{out.stderr[-2000:]}"
    assert "state on this pod: 146 MiB" in worker0 and "trained: loss" in worker0, worker0[-3000:]
