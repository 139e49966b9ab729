"""The LM example's last step (the loss plot, the TensorBoard hint) degrades to a one-line note
when matplotlib or TensorBoard is missing: training is done by then, and a failed exit would make
the launcher restart a finished run (issue 19: the base install exited 1 at the plot)."""

import importlib.util
import sys

import pytest

from support.paths import REPO

_MATPLOTLIB = ("matplotlib", "matplotlib.backends", "matplotlib.backends.backend_agg", "matplotlib.figure")


@pytest.fixture(scope="module")
def train():
    spec = importlib.util.spec_from_file_location("lm_train_example", REPO / "examples/lm/train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_dir(tmp_path):
    from roxxel.train import Logger

    logger = Logger(tmp_path, tensorboard=False, progress=False)
    for step in (1, 2, 3):
        logger.log_metrics_summary(step, {"loss": 5.0 - step})
    logger.close()
    return str(tmp_path)


def test_without_matplotlib_or_tensorboard_the_end_is_a_note(train, run_dir, monkeypatch):
    for name in _MATPLOTLIB:
        monkeypatch.setitem(sys.modules, name, None)  # import matplotlib -> ImportError
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else find_spec(name, *a)
    )
    plot, board = train.optional_outputs(run_dir, 2.4)
    assert plot.startswith("loss plot: not drawn (") and "matplotlib" in plot and "\n" not in plot
    assert plot.endswith(f"roxxel plot {run_dir} --baseline 2.4000")  # the image has no matplotlib: on the host
    assert board.startswith("TensorBoard logs: ") and "pip install tensorboard" in board


def test_a_container_runs_outputs_go_where_the_launcher_binds_them(train, monkeypatch, tmp_path):
    """Before, a container run wrote them to the pod's tmpfs $HOME, gone with the job."""
    monkeypatch.setenv("ROXXEL_OUTPUT_DIR", str(tmp_path / "outputs"))
    assert train.parse_args([]).run_dir == str(tmp_path / "outputs")
    monkeypatch.delenv("ROXXEL_OUTPUT_DIR")
    monkeypatch.chdir(tmp_path)
    assert train.parse_args([]).run_dir == "runs/lm"


def test_with_matplotlib_the_end_names_the_plot(train, run_dir):
    pytest.importorskip("matplotlib")
    plot, _ = train.optional_outputs(run_dir)
    assert plot == f"loss plot: {run_dir}/roxxel_metrics.png"


def test_without_the_tokenizers_package_the_sample_and_the_loss_per_byte_are_left_out(train, tmp_path, monkeypatch):
    """The data is BPE (DATA/tokenizer.json): training needs only its ids, the sample and the loss per
    byte need the tokenizer. The worker image installs the base, without `tokenizers`."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from roxxel import Roxxel
    from roxxel.pack import pack
    from roxxel.tokenizers import ByteTokenizer

    texts = ["def f(self):\n    return self.x\n", "class A:\n    pass\n"] * 10
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "a.py").write_text(texts[0])
    pack([str(tmp_path / "a.py")], str(tmp_path / "code"), tokenizer=str(tmp_path / "tokenizer.json"))
    pack([str(tmp_path / "a.py")], str(tmp_path / "bytes"))
    found, why = train.data_tokenizer(str(tmp_path), Roxxel(str(tmp_path / "code")))
    assert found is not None and why == "" and found.decode(Roxxel(str(tmp_path / "code"))[0]) == texts[0]
    assert train.bytes_per_token(found, Roxxel(str(tmp_path / "code"))) > 1
    assert isinstance(train.data_tokenizer(str(tmp_path), Roxxel(str(tmp_path / "bytes")))[0], ByteTokenizer)

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    found, why = train.data_tokenizer(str(tmp_path), Roxxel(str(tmp_path / "code")))
    assert found is None and "pip install 'roxxel[main]'" in why
    line = train.loss_summary(4.0, 5.8, None)
    assert line == "held-out loss 4.000 nats/token (perplexity 54.60), unigram baseline 5.800"
    assert train.loss_summary(4.0, 5.8, 2.5).endswith("per byte of text: 1.600 against 2.320 (2.50 bytes a token)")
