"""Train a small Transformer LM on Python's own standard library with Roxxel.

Runs the same on one process, on N local processes (``roxxel-launch submit --local``) and
on a pod: ``roxxel.distributed.initialize()`` finds the others from the environment.

Data: the datasets of ``prepare.py`` — ``code`` blended with a little ``text`` (less in
phase 2), ``code-eval`` held out. Both phases have rows of 64 tokens (``--seq-len`` changes
them per phase; positions are learned, so a later phase with longer rows starts its new
positions untrained). Every process reads only its rows.

The defaults are sized for about a minute on 2 CPU cores (./dev.sh main): a small model
(width 64, 2 layers; 500 steps of 32 x 64 tokens, 1M in all) at a high peak learning rate
(1e-2, warmup then cosine decay). Measured in that minute (one process, the same arithmetic
as the pod, with the codec tables still in the data): held out, 1.66 nats per byte of text (the
unigram baseline: 2.40); width 80, 4 s longer, 1.60; width 96, 18 s longer, 1.59; 3 layers, 8 s
longer, 1.65; rows of 128 tokens or a peak of 2e-2, worse. Byte-level tokens (vocabulary 257)
reached only 1.93 in the same time: a BPE token carries ~2.4 bytes, so each step sees 2.4x the
text and each row 2.4x the context. Without the codec tables (``prepare.is_codec_table``), the
2-process main job: 1.62 against 2.43. The sample (after ``    def ``, top 3 at temperature
0.7) reads as Python: a ``def`` line with ``(self):``, a docstring's quotes, comments,
``self.assertRaises(`` / ``self.assertEqual(`` calls, indentation; 87% of its identifiers are
names found in the held-out sources (three seeds; byte-level: under half). Those settings were
chosen by looking at samples of the trained model (prompts ``def ``, ``class ``, ``import ``,
``    if ``, a ``main()``; temperatures 0.5-1.0; top 1-10): top 1 repeats itself (``# varies``
lines, ``_exection_exection``), temperature 1.0 or top 10 misspells most names, ``class `` and
``    if `` drift into runs of backticks or capitals. With the codec tables in the data (before
#51), this sample and 8 of the 35 others drifted into their rows (``0x00,     #  LATIN SMALL
LETTER``). Batches of 32 rows: each step of a 2-process CPU pod pays a fixed cost (an
all-reduce over TCP per parameter array, Python dispatch), so fewer, larger steps train the
same tokens sooner.

The layout comes from the job spec: ``parallelism: {fsdp: 2, tensor: 2}`` reaches every pod as
``ROXXEL_PARALLELISM``, ``roxxel.sharding.default_mesh()`` builds that mesh, and the model and its
Adam moments are born sharded on it (``roxxel.train.sharded_state`` with the model's
``AXIS_RULES``). Without it every device is on one ``data`` axis and the state is replicated.

Paths come from the launcher's environment when present: ROXXEL_DATA_DIR (the data),
ROXXEL_CHECKPOINT_DIR (checkpoints: a local path or gs://), ROXXEL_RUN_NAME.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import AXIS_RULES, DecoderLM, lm_loss  # noqa: E402
from report import loss_chart, side_by_side, text_lines  # noqa: E402

import roxxel.distributed  # noqa: E402
from roxxel import Curriculum, Phase, Roxxel, exit_codes  # noqa: E402
from roxxel.run import run_info  # noqa: E402
from roxxel.sharding import default_mesh  # noqa: E402
from roxxel.train import Cadence, Checkpointer, DataOptions, Logger, Trainer, sharded_state  # noqa: E402
from roxxel.tokenizers import ByteTokenizer, HFTokenizer, packing_tokenizer  # noqa: E402
from roxxel.train.logger import read_metrics  # noqa: E402


# The sample starts a method: most of the standard library is methods of classes (and most of
# the sources are tests: the sample's methods call self.assertEqual). Chosen with the
# temperature and top-k defaults by looking at samples: the module docstring says what they showed.
SAMPLE_PROMPT = "    def "
# Rows are cut from shuffled chunks of this many tokens. The library's default (16k tokens)
# suits large batches; with this job's 1k-token batches it would take a whole batch, and
# the next several, from one stretch of one file: noisy, correlated gradients.
CHUNK_TOKENS = 256


def default_run_dir(run_name: str, output_dir: str | None = None) -> str:
    """Where the launcher asks for outputs (``ROXXEL_OUTPUT_DIR``: a host directory in a local
    container run), else ``runs/RUN_NAME`` in the working directory, or under ``$HOME`` where
    the working directory cannot be written (the worker image's read-only root)."""
    if output_dir:
        return output_dir
    if os.access(".", os.W_OK) or not os.environ.get("HOME"):
        return os.path.join("runs", run_name)
    return os.path.join(os.environ["HOME"], "runs", run_name)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    run = run_info(run_name="lm", data_dir="runs/data/lm")  # what the launcher set, else these
    p.add_argument("--data", default=run.data_dir, help="datasets packed by prepare.py")
    p.add_argument(
        "--run-name",
        default=run.run_name,
        help="the run the checkpoint directory belongs to (another run's is refused)",
    )
    p.add_argument(
        "--run-dir",
        default=default_run_dir(run.run_name, run.output_dir),
        help="logs, metrics, plot (default $ROXXEL_OUTPUT_DIR where the launcher sets it, else "
        "runs/RUN_NAME, or $HOME/runs/RUN_NAME where the working directory is read-only, as in "
        "the worker image, whose pods mount an emptyDir at $HOME)",
    )
    p.add_argument("--checkpoint-dir", default=run.checkpoint_dir, help="default RUN_DIR/checkpoints")
    p.add_argument(
        "--restore-from",
        default=run.restore_from,
        help="another run's checkpoint directory to start from while this run's holds no step",
    )
    p.add_argument("--steps", type=int, nargs=2, default=[350, 150], metavar=("PHASE1", "PHASE2"))
    p.add_argument(
        "--batch",
        type=int,
        nargs=2,
        default=[32, 32],
        metavar=("PHASE1", "PHASE2"),
        help="global batch size (rows) per phase",
    )
    p.add_argument(
        "--seq-len", type=int, nargs=2, default=[64, 64], metavar=("PHASE1", "PHASE2"), help="tokens per row per phase"
    )
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-2, help="peak learning rate (warmup, then cosine decay to 1/10)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--batch-rows",
        choices=("independent", "consecutive"),
        default="independent",
        help="each row of a batch from its own place (default), or rows as consecutive windows of the "
        "shuffled stream (what runs saved before the option took)",
    )
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument(
        "--verbose",
        action="store_true",
        help="print every metric on the progress lines (step and compile times, per-device rates, the "
        "straggler report); the metrics CSV and TensorBoard always hold them",
    )
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.7, help="of the sample printed at the end")
    p.add_argument(
        "--top-k",
        type=int,
        default=3,
        help="the sample draws each token from the K likeliest (0: from all; more: more misspelt names)",
    )
    p.add_argument("--save-params", help="write the final parameters to this .npz (process 0)")
    return p.parse_args(argv)


Tokenizer = ByteTokenizer | HFTokenizer


def data_tokenizer(data: str, dataset: Roxxel) -> tuple[Tokenizer | None, str]:
    """The tokenizer that packed ``dataset`` (DATA/code), found beside it and checked against the
    identity it records (:func:`roxxel.tokenizers.packing_tokenizer`; none needed for byte-level
    data), or None and why, when the ``tokenizers`` package is missing (the sample and the loss
    per byte need it; training does not).

    Raises:
        ValueError: no tokenizer.json in DATA/code or DATA is the one the data was packed with.
    """
    try:
        return packing_tokenizer(os.path.join(data, "code"), dataset.tokenizer, dataset.eos_id), ""
    except ImportError:
        return None, "the data's tokenizer needs the tokenizers package: pip install 'roxxel[main]'"


def bytes_per_token(tok: Tokenizer, dataset: Roxxel) -> float:
    """UTF-8 bytes of ``dataset``'s text per token (EOS counted as a token): turns nats per token into per byte."""
    return len(tok.decode(dataset.read(0, dataset.num_tokens)).encode("utf-8")) / dataset.num_tokens


def unigram_cross_entropy(train: Roxxel, held_out: Roxxel, sample: int = 4_000_000) -> float:
    """Nats per token of a unigram model fitted on ``train`` and scored on ``held_out``: the bar to beat."""
    counts = np.bincount(train.read(0, min(sample, train.num_tokens)), minlength=train.vocab_size or 0) + 1.0
    logp = np.log(counts / counts.sum())
    tokens = held_out.read(0, min(sample, held_out.num_tokens))
    return float(-logp[tokens].mean())


def make_eval(curriculum_eval: Curriculum, sharding):
    """``eval_fn(state)``: mean loss over a fixed set of held-out batches (same on every process)."""
    batches = list(curriculum_eval.stream(seed=0, sharding=sharding, outputs="documents", prefetch_size=0))
    loss_of = nnx.jit(lambda model, batch: lm_loss(model, batch)[0])

    def eval_fn(state):
        loss = float(jnp.mean(jnp.stack([loss_of(state.model, b) for b in batches])))
        return {"eval_loss": loss, "eval_perplexity": float(np.exp(loss))}

    return eval_fn


def layout_line(mesh, state) -> str:
    """One line: the mesh's axes (those over 1 device) and the share of ``state`` one device holds."""
    arrays = [x for x in jax.tree.leaves(state) if isinstance(x, jax.Array)]
    whole = sum(a.nbytes for a in arrays)
    on_device = sum(a.addressable_shards[0].data.nbytes for a in arrays)
    axes = " x ".join(f"{name}={size}" for name, size in mesh.shape.items() if size > 1) or "one device"
    return f"mesh {axes}: a device holds {on_device / 2**20:.2f} MiB of the state's {whole / 2**20:.2f} MiB"


def host_copy(model: DecoderLM) -> DecoderLM:
    """``model`` with every array whole on this process's first device, for process-local use
    (sampling, saving). A collective: every process calls it. Sharded arrays are all-gathered
    (``process_allgather``); replicated ones are read from a local replica."""
    from jax.experimental import multihost_utils

    def whole(x):
        if not isinstance(x, jax.Array):
            return x
        if x.is_fully_replicated:
            return x.addressable_data(0)
        return jax.device_put(multihost_utils.process_allgather(x, tiled=True), jax.local_devices()[0])

    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(whole, state))


def sample_text(
    model: DecoderLM,
    tok: Tokenizer,
    prompt: str,
    n: int = 120,
    seed: int = 0,
    context: int = 64,
    temperature: float = 0.7,
    top_k: int = 3,
) -> str:
    """Sample up to ``n`` tokens after ``prompt`` at ``temperature`` from ``model`` (a process-local
    copy: :func:`host_copy`), each drawn from the ``top_k`` likeliest tokens (top-k sampling; 0: from all): a small
    model's unlikely tail is mostly misspellings. Returns the prompt and the sample, as text; stops
    early at an EOS.

    The context is a fixed window (at most the longest rows trained: learned positions beyond
    them are untrained), left-padded with a segment of its own, so one compiled forward pass
    serves every step.
    """
    idx = np.arange(context)

    @jax.jit
    def next_token(window, length, key):
        # One compiled call per token: the forward pass and the draw (eager random ops cost more).
        real = idx >= context - length
        segments = jnp.where(real, 1, 0)[None]
        positions = jnp.maximum(idx - (context - length), 0)[None]
        logits = model(window, segments, positions)[0, -1]
        key, sub = jax.random.split(key)
        if top_k:
            logits, ids = jax.lax.top_k(logits, top_k)
            return ids[jax.random.categorical(sub, logits / temperature)], key
        return jax.random.categorical(sub, logits / temperature), key

    key = jax.random.key(seed)
    tokens = [int(t) for t in tok.encode(prompt)]
    window = np.zeros((1, context), np.int32)
    for _ in range(n):
        recent = tokens[-context:]
        window[:] = 0
        window[0, context - len(recent) :] = recent
        nxt, key = next_token(window, len(recent), key)
        if int(nxt) == tok.eos_id:
            break
        tokens.append(int(nxt))
    return tok.decode(tokens)


def main(argv=None) -> dict:
    args = parse_args(argv)
    info = roxxel.distributed.initialize()
    try:
        code, text, held_out = (Roxxel(os.path.join(args.data, n)) for n in ("code", "text", "code-eval"))
        (s1, s2), (b1, b2), (l1, l2) = args.steps, args.batch, args.seq_len
        curriculum = Curriculum(
            {"primary": code, "text": text},
            [
                Phase(steps=s1, global_batch_size=b1, seq_len=l1, weights={"primary": 0.9, "text": 0.1}),
                Phase(steps=s2, global_batch_size=b2, seq_len=l2, weights={"primary": 0.95, "text": 0.05}),
            ],
            chunk_tokens=CHUNK_TOKENS,
            batch_rows=args.batch_rows,
        )
        # Held out at the longest rows trained (learned positions beyond them are untrained).
        eval_curriculum = Curriculum(held_out, [Phase(steps=8, global_batch_size=b2, seq_len=l2)])
        tok, no_tok = data_tokenizer(args.data, code)
    except (OSError, ValueError) as err:
        # A missing or unreadable dataset, a bad phase: every restart would fail the same way.
        exit_codes.exit_config_error(f"{type(err).__name__}: {err}")

    warmup = max(1, min(20, (s1 + s2) // 5))
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.lr, warmup, max(s1 + s2, warmup + 1), args.lr / 10)

    def create():
        model = DecoderLM(
            vocab=code.vocab_size, width=args.width, depth=args.depth, max_len=max(l1, l2), rngs=nnx.Rngs(args.seed)
        )
        return model, nnx.Optimizer(model, optax.adamw(schedule, weight_decay=0.01), wrt=nnx.Param)

    # The job spec's layout (ROXXEL_PARALLELISM); one compiled program creates every parameter and
    # Adam moment in its sharding, so no host holds more than its devices' shards.
    mesh = default_mesh()
    try:
        model, optimizer = sharded_state(create, mesh, axis_rules=AXIS_RULES)
    except ValueError as err:  # a width that does not divide over the layout's axes
        exit_codes.exit_config_error(f"{type(err).__name__}: {err}")
    if info.process_id == 0:
        print(layout_line(mesh, (model, optimizer)))
    ckpt_dir = args.checkpoint_dir or os.path.join(os.path.abspath(args.run_dir), "checkpoints")
    cadence = Cadence(log_every=args.log_every, save_interval_steps=args.checkpoint_every, eval_every=args.eval_every)
    checkpointer = Checkpointer(
        ckpt_dir,
        model,
        optimizer,
        cadence=cadence,  # the Trainer's: one save interval and max_to_keep for both
        fingerprint=curriculum.describe(),
        run_name=args.run_name,
        restore_from=args.restore_from,
    )
    logger = Logger(args.run_dir, total_steps=curriculum.total_steps, verbose=args.verbose)
    trainer = Trainer(
        model,
        optimizer,
        curriculum,
        lm_loss,
        checkpointer=checkpointer,
        logger=logger,
        cadence=cadence,
        data=DataOptions(outputs="documents", seed=args.seed),
        mesh=mesh,
        axis_rules=AXIS_RULES,
    )
    trainer.eval_fn = make_eval(eval_curriculum, trainer.data_sharding)
    final = trainer.run()

    local_model = host_copy(model)  # every process takes part: sharded weights are gathered
    if args.save_params and info.process_id == 0:
        flat = {"/".join(map(str, k)): np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(local_model, nnx.Param))}
        np.savez(args.save_params, **flat)
    if info.process_id == 0:
        baseline = unigram_cross_entropy(code, held_out)
        print("\n" + loss_summary(final["eval_loss"], baseline, bytes_per_token(tok, held_out) if tok else None))
        if tok is not None:
            sample = sample_text(
                local_model, tok, SAMPLE_PROMPT, context=max(l1, l2), temperature=args.temperature, top_k=args.top_k
            )
        else:
            sample = f"(not drawn: {no_tok})"
        how = f"temperature {args.temperature}" + (f", top {args.top_k}" if args.top_k else "")
        print(final_report(args.run_dir, sample, how, baseline))
        for line in optional_outputs(args.run_dir, baseline):
            print(line)
    roxxel.distributed.shutdown()  # leave the cluster together
    return final


def loss_summary(loss: float, baseline: float, per_token: float | None) -> str:
    """The held-out loss and the unigram baseline, in nats per token and (``per_token``: bytes per
    token, when known) per byte, which compares across tokenizers."""
    line = f"held-out loss {loss:.3f} nats/token (perplexity {np.exp(loss):.2f}), unigram baseline {baseline:.3f}"
    if per_token:
        line += f"; per byte of text: {loss / per_token:.3f} against {baseline / per_token:.3f} ({per_token:.2f} bytes a token)"
    return line


def final_report(run_dir: str, sample: str, how: str, baseline: float) -> str:
    """The loss curve (text, topped at the unigram baseline) beside the sample, with a heading over each."""
    data = read_metrics(run_dir)
    chart = loss_chart(data.get("loss", []), data.get("eval_loss", []), ceiling=baseline)
    sample_lines = text_lines(sample)
    return side_by_side(
        ["loss (nats/token): * training, o held out", "(top: the unigram baseline)"] + chart,
        [f"sample ({how}, after {SAMPLE_PROMPT!r}):", ""] + sample_lines,
    )


def optional_outputs(run_dir: str, baseline: float | None = None) -> list[str]:
    """Where the loss plot (with ``baseline``, the unigram loss, on its loss panel) and the
    TensorBoard logs are, one line each.

    Both are extras (``pip install 'roxxel[main]'``): without matplotlib or TensorBoard the
    line says so and how to get it. Training is done by then, so nothing here may fail the
    job: a non-zero exit would make the launcher restart a finished run.
    """
    from roxxel.train.plot import plot_run

    try:
        plot = f"loss plot: {plot_run(run_dir, baseline=baseline)}"
    except ImportError as err:  # the worker image has no matplotlib: the metrics are on the host
        again = f"roxxel plot {run_dir}" + ("" if baseline is None else f" --baseline {baseline:.4f}")
        plot = f"loss plot: not drawn ({err}); where matplotlib is: {again}"
    except (OSError, ValueError) as err:
        plot = f"loss plot: not drawn ({err})"
    logdir = os.path.join(run_dir, "tensorboard")
    if importlib.util.find_spec("tensorboard") is not None:
        board = f"TensorBoard: tensorboard --logdir {logdir}"
    else:
        board = f"TensorBoard logs: {logdir} (to view them: pip install tensorboard; tensorboard --logdir {logdir})"
    return [plot, board]


if __name__ == "__main__":
    main()
