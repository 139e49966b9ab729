"""The language-model example runs end to end (short), so it cannot rot."""

import os
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
