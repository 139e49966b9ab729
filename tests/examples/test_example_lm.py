"""The language-model example runs end to end (short), so it cannot rot."""

import os
import re
import subprocess
import sys

import pytest

from support.paths import REPO

ROOT = str(REPO)


@pytest.mark.slow
def test_prepare_and_train_briefly(tmp_path, lm_data):
    data, run = str(lm_data), str(tmp_path / "run")  # lm_data: examples/lm/prepare.py's output
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    assert sorted(os.listdir(data)) == ["code", "code-eval", "text", "tokenizer.json"]
    out = subprocess.run(
        [
            sys.executable,
            "examples/lm/train.py",
            "--data",
            data,
            "--run-dir",
            run,
            "--steps",
            "6",
            "4",
            "--batch",
            "4",
            "2",
            "--log-every",
            "2",
            "--eval-every",
            "5",
            "--checkpoint-every",
            "5",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "held-out loss" in out.stdout and "unigram baseline" in out.stdout and "sample (temperature" in out.stdout
    assert "per byte of text" in out.stdout and "bytes a token)" in out.stdout
    assert os.path.exists(os.path.join(run, "roxxel_metrics.png"))
    assert max(int(n) for n in os.listdir(os.path.join(run, "checkpoints")) if n.isdigit()) == 10


@pytest.mark.slow
def test_a_tokenizer_other_than_the_datas_is_a_config_error(tmp_path, lm_data):
    """The sample is decoded, and the loss turned per byte, with DATA/tokenizer.json: one that did not
    pack the data would give wrong text and numbers, so the job refuses it before training."""
    import shutil

    from tokenizers import Tokenizer

    data = tmp_path / "data"
    shutil.copytree(lm_data, data)
    tok = Tokenizer.from_file(str(data / "tokenizer.json"))
    tok.add_tokens(["assertEqual"])
    tok.save(str(data / "tokenizer.json"))
    out = subprocess.run(
        [sys.executable, "examples/lm/train.py", "--data", str(data), "--run-dir", str(tmp_path / "run")],
        cwd=ROOT,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 78, out.stderr[-3000:]  # the launcher's config-error exit: no restart
    assert "was packed with the tokenizer 'tokenizer.json' (SHA-256" in out.stderr and "decode wrong" in out.stderr


@pytest.mark.slow
def test_the_layout_from_the_spec_shards_the_model_and_computes_the_same_losses(tmp_path, lm_data):
    """The main job's spec with ``parallelism: {fsdp: 2, tensor: 2}`` on 2 workers x 2 CPU
    devices (the local backend runs the rendered JobSet): the model is born sharded over the
    4 devices (no process holds a whole matrix), trains, and its saved parameters are whole
    (gathered from both processes). The same job replicated (every device on ``data``) sees the
    same global batches from the same initial weights: the first step's loss agrees to float
    tolerance, and so does the curve."""
    import numpy as np
    import yaml

    from roxxel.train.metrics_file import read_metrics

    def run(name: str, parallelism: str | None) -> tuple[list[float], dict]:
        spec = yaml.safe_load(open(os.path.join(ROOT, "examples/lm/job.yaml")))
        spec.update(name=name, checkpoint_dir=str(tmp_path / name / "checkpoints"))
        if parallelism:
            spec["parallelism"] = yaml.safe_load(parallelism)
        spec["command"] += ["--steps", "4", "2", "--batch", "8", "8", "--log-every", "1", "--eval-every", "1000"]
        spec["command"] += ["--run-dir", str(tmp_path / name / "logs"), "--save-params", str(tmp_path / f"{name}.npz")]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        out = subprocess.run(
            [sys.executable, "-m", "roxxel_launch.cli", "submit", str(path), "--local"]
            + ["--devices-per-worker", "2", "--data-dir", str(lm_data)],
            cwd=ROOT,
            env=dict(os.environ, ROXXEL_LOCAL_ROOT=str(tmp_path / "local")),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        losses = [v for _, v in read_metrics(tmp_path / name / "logs")["loss"]]
        return losses, dict(np.load(tmp_path / f"{name}.npz"))

    sharded, sharded_params = run("sharded", "{fsdp: 2, tensor: 2}")
    replicated, replicated_params = run("replicated", None)
    assert len(sharded) == len(replicated) == 6
    assert sharded[0] == pytest.approx(replicated[0], rel=1e-5)  # same weights, same batch
    assert sharded == pytest.approx(replicated, rel=1e-3)
    assert {k: v.shape for k, v in sharded_params.items()} == {k: v.shape for k, v in replicated_params.items()}
    layouts = [(tmp_path / "local" / name / "worker-0.log").read_text() for name in ("sharded", "replicated")]
    assert "training steps 0..6 on 2 processes, 4 devices" in layouts[0]
    (held, whole), (held_replicated, whole_replicated) = (
        map(float, re.search(r"a device holds ([\d.]+) MiB of the state's ([\d.]+) MiB", log).groups())
        for log in layouts
    )
    assert "mesh fsdp=2 x tensor=2:" in layouts[0] and "mesh data=4:" in layouts[1]
    assert whole == whole_replicated and held_replicated == whole
    assert held < 0.45 * whole  # 40%: matrices split 4 ways, the tables (vocabulary whole) 2 ways
