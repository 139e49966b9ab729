"""The built-in callbacks (roxxel/train/callbacks/), each alone, and composed with a user's list
in a real Trainer run: throughput and MFU from a window, the schedule's learning rate, a
profiler trace over its window of steps, and the Trainer's shortcuts that build them."""

import glob

import jax
import optax
import pytest

from roxxel import Curriculum, Phase
from roxxel.deprecation import RoxxelDeprecationWarning
from roxxel.exit_codes import ConfigurationError
from roxxel.train import Cadence, Trainer
from roxxel.train.callbacks import Callback, LearningRate, Profile, Throughput, Window
from roxxel.train.callbacks.base import bound_hooks
from roxxel.train.callbacks.throughput import peak_flops
from roxxel.train.logger import read_metrics
from roxxel.train.stragglers import StragglerReport
from support.lm import loss_fn, make_dataset, make_model

SCHEDULE = optax.linear_schedule(1e-2, 1e-3, 8)


@pytest.fixture(scope="module")
def cur(tmp_path_factory):
    return Curriculum(
        make_dataset(str(tmp_path_factory.mktemp("d") / "data")),
        [Phase(steps=6, global_batch_size=4, seq_len=32)],
        chunk_tokens=256,
    )


# -- Throughput ---------------------------------------------------------------------------


def test_throughput_gives_rates_model_flops_and_mfu_of_a_window():
    n = jax.device_count()
    got = Throughput(flops_per_token=100.0, peak_flops_per_device=1e3).window_metrics(8, Window(4, 512, 2.0))
    assert got == pytest.approx(
        {
            "tokens_per_sec": 256.0,
            "tokens_per_sec_per_device": 256.0 / n,
            "step_time_s": 0.5,
            "model_tflops_per_device": 256.0 / n * 100 / 1e12,
            "mfu": 256.0 / n * 100 / 1e3,
        }
    )


def test_throughput_takes_six_flops_per_parameter_and_needs_a_peak_for_mfu():
    got = Throughput(num_params=10).window_metrics(8, Window(1, 100, 1.0))
    assert got["model_tflops_per_device"] == pytest.approx(100 / jax.device_count() * 60 / 1e12)
    assert ("mfu" in got) == (peak_flops(jax.devices()[0].device_kind) is not None)  # CPUs have no known peak
    assert set(Throughput().window_metrics(8, Window(1, 100, 1.0))) == {
        "tokens_per_sec",
        "tokens_per_sec_per_device",
        "step_time_s",
    }


def test_a_window_of_only_the_compiling_step_has_no_throughput():
    assert Throughput(flops_per_token=1.0).window_metrics(1, Window(0, 0, 0.0)) == {}


def test_peak_flops_matches_the_longest_device_kind_prefix():
    assert peak_flops("TPU v5 lite") == 197e12
    assert peak_flops("TPU v5p chip") == 459e12
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("cpu") is None


@pytest.mark.parametrize("kwargs", [{"flops_per_token": 0}, {"num_params": -1}, {"peak_flops_per_device": "fast"}])
def test_throughput_refuses_a_flop_count_that_is_not_positive(kwargs):
    with pytest.raises(ValueError, match=f"{next(iter(kwargs))} must be a positive number") as err:
        Throughput(**kwargs)
    assert isinstance(err.value, ConfigurationError)


# -- LearningRate -------------------------------------------------------------------------


def test_learning_rate_logs_the_schedule_of_the_windows_last_update():
    window = Window(1, 1, 1.0)
    for step in (1, 5, 8):  # optax counts updates from 0: step s applied update s - 1
        assert LearningRate(SCHEDULE).window_metrics(step, window) == {
            "learning_rate": pytest.approx(float(SCHEDULE(step - 1)))
        }
    assert LearningRate(3e-4).window_metrics(5, window) == {"learning_rate": 3e-4}


def test_learning_rate_refuses_what_is_no_schedule():
    with pytest.raises(TypeError, match="learning_rate must be an optax schedule .* got dict"):
        LearningRate({"lr": 1e-3})


# -- Profile ------------------------------------------------------------------------------


class FakeProfiler:
    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(jax.profiler, "start_trace", lambda d: self.calls.append(("start", d)))
        monkeypatch.setattr(jax.profiler, "stop_trace", lambda: self.calls.append(("stop",)))


def test_profile_traces_steps_first_to_last_and_waits_for_the_last(monkeypatch):
    fake = FakeProfiler(monkeypatch)
    prof = Profile((2, 3), "runs/x/profile")
    waited = []

    class Loss:
        def __init__(self, step):
            self.step = step

        def block_until_ready(self):
            waited.append(self.step)

    for step in range(5):  # the loop: begin(step), dispatch, end(step + 1)
        prof.on_batch_begin(step)
        fake.calls.append(("step", step + 1))
        prof.on_batch_end(step + 1, Loss(step + 1))
    prof.on_run_end()
    assert fake.calls == [
        ("step", 1),
        ("start", "runs/x/profile"),
        ("step", 2),
        ("step", 3),
        ("stop",),
        ("step", 4),
        ("step", 5),
    ]
    assert waited == [3]  # the trace holds step 3's device work


def test_profile_stops_when_the_run_ends_inside_its_window(monkeypatch):
    fake = FakeProfiler(monkeypatch)
    prof = Profile((1, 10), "trace")
    prof.on_batch_begin(0)
    prof.on_run_end()
    prof.on_run_end()  # once only
    assert fake.calls == [("start", "trace"), ("stop",)]


@pytest.mark.parametrize("steps", [(0, 2), (3, 2), (1.0, 2), "12", None])
def test_profile_refuses_a_bad_window(steps):
    with pytest.raises(ValueError, match=r"profile_steps must be \(first, last\) with 1 <= first <= last"):
        Profile(steps, "trace")


def test_bound_hooks_skip_defaults_and_missing_hooks():
    class Mine(Callback):
        def on_step(self, step, metrics):
            pass

    class DuckTyped:  # written before the per-step hooks existed, without subclassing Callback
        def on_step(self, step, metrics):
            pass

    mine, duck = Mine(), DuckTyped()
    assert [h.__self__ for h in bound_hooks([mine, duck], "on_step")] == [mine, duck]
    assert bound_hooks([mine, duck], "on_batch_begin") == []


# -- composed in a Trainer ----------------------------------------------------------------


class Recorder(Callback):
    """Records what the Trainer gives it, and adds a metric of its own."""

    def __init__(self):
        self.steps, self.begun = [], []

    def on_batch_begin(self, step):
        self.begun.append(step)

    def window_metrics(self, step, window):
        return {"timed_steps": window.steps}

    def on_step(self, step, metrics):
        self.steps.append((step, dict(metrics)))


def test_user_callbacks_compose_with_the_built_in_ones(cur, tmp_path):
    model, opt = make_model()
    rec = Recorder()
    trainer = Trainer(
        model,
        opt,
        cur,
        loss_fn,
        save_path=str(tmp_path),
        cadence=Cadence(log_every=3, save_interval_steps=3),
        callbacks=[LearningRate(SCHEDULE), Throughput(flops_per_token=1e6, peak_flops_per_device=1e12), rec],
    )
    assert [type(cb) for cb in trainer.callbacks] == [
        StragglerReport,
        LearningRate,
        Throughput,
        Recorder,
    ]  # the user's Throughput replaces the built-in; the straggler report is always there
    trainer.run()
    m = {k: dict(v) for k, v in read_metrics(str(tmp_path)).items()}
    assert rec.begun == list(range(6))
    assert [s for s, _ in rec.steps] == [3, 6]
    assert m["timed_steps"] == {3: 2.0, 6: 3.0}  # the first step compiles: not timed
    assert m["learning_rate"][6] == pytest.approx(float(SCHEDULE(5)))
    assert m["mfu"][6] == pytest.approx(m["tokens_per_sec_per_device"][6] * 1e6 / 1e12)
    assert rec.steps[-1][1] == {k: pytest.approx(v[6]) for k, v in m.items() if 6 in v}  # on_step sees the logged row


def test_a_trace_window_beyond_the_run_ends_with_it(cur, tmp_path):
    model, opt = make_model()
    trace = Profile((2, 100), str(tmp_path / "profile"))
    Trainer(model, opt, cur, loss_fn, save_path=str(tmp_path), cadence=Cadence(log_every=3), callbacks=[trace]).run(
        stop_at_step=3
    )
    assert glob.glob(str(tmp_path / "profile" / "plugins" / "profile" / "*" / "*.xplane.pb"))


@pytest.mark.parametrize(
    "kwargs, callback, named",
    [
        ({"learning_rate": 1e-3}, LearningRate(1e-3), "learning_rate"),
        ({"num_params": 10}, Throughput(), "num_params"),
        ({"profile_steps": (1, 2), "save_path": "runs/p"}, Profile((1, 2), "trace"), "profile_steps"),
    ],
)
def test_a_shortcut_and_its_callback_are_not_both_given(cur, kwargs, callback, named):
    """The deprecated shortcuts (they warn) beside the callback each stands for."""
    model, opt = make_model()
    with (
        pytest.raises(ValueError, match=f"Trainer: {named} and a {type(callback).__name__} in callbacks= both given"),
        pytest.warns(RoxxelDeprecationWarning, match=f"{named}= is deprecated, use callbacks="),
    ):
        Trainer(model, opt, cur, loss_fn, callbacks=[callback], **kwargs)


def test_profile_steps_need_a_run_directory(cur):
    model, opt = make_model()
    with pytest.raises(ValueError, match="profile_steps needs save_path"), pytest.warns(RoxxelDeprecationWarning):
        Trainer(model, opt, cur, loss_fn, profile_steps=(1, 2))


def test_two_callbacks_logging_one_name_is_an_error(cur):
    class Clash(Callback):
        def window_metrics(self, step, window):
            return {"loss": 0.0}

    model, opt = make_model()
    with pytest.raises(
        ValueError, match="callback Clash logs 'loss', which the loss or an earlier callback already logs"
    ):
        Trainer(model, opt, cur, loss_fn, cadence=Cadence(log_every=2), callbacks=[Clash()]).run(stop_at_step=2)


def test_the_core_arguments_are_named_when_missing(cur):
    model, opt = make_model()
    with pytest.raises(TypeError, match=r"Trainer needs loss_fn: Trainer\(model, optimizer, curriculum, loss_fn"):
        Trainer(model, opt, cur)
    with pytest.raises(TypeError, match="Trainer needs curriculum and loss_fn"):
        Trainer(model, opt)
