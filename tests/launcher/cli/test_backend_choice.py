"""The backends as rows (roxxel_launch/cli/backend_choice.py): each row's options reach its
factory alone, another backend's option is refused naming its backend, and a new row needs
nothing else in the CLI's plumbing."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import types
from typing import Any

import click
import pytest
from click.testing import CliRunner

from roxxel_launch import cli as C
from roxxel_launch.cli import backend_choice as B
from roxxel_launch.cli.options import for_backend


def test_each_factory_takes_exactly_its_rows_options_and_uses():
    for row in B.BACKENDS.values():
        params = inspect.signature(row.make).parameters.values()
        assert all(p.kind is p.KEYWORD_ONLY for p in params), row.name
        assert {p.name for p in params} == row.takes, row.name


def test_no_option_belongs_to_two_backends():
    names = [o.name for row in B.BACKENDS.values() for o in row.options]
    assert len(names) == len(set(names)), names


class _Made(Exception):
    """Raised by a test factory with what it was given, so that no backend is made."""


def _recording(**given):
    raise _Made(given)


def test_make_backend_gives_a_factory_only_its_own_settings(monkeypatch):
    monkeypatch.setitem(B.BACKENDS, "kubernetes", _with_factory(B.KUBERNETES))
    monkeypatch.setitem(B.BACKENDS, "local", _with_factory(B.LOCAL))
    with pytest.raises(_Made) as made:  # observe.py's call: None for the options not given
        B.make_backend("local", namespace=None, context=None, poll=2.0, dry_run=True, runtime="podman")
    assert made.value.args[0] == {"dry_run": True, "runtime": "podman"}  # poll is the Kubernetes row's
    with pytest.raises(_Made) as made:
        B.make_backend("kubernetes", namespace="ns", poll=2.0, dry_run=True, detach=False)
    assert made.value.args[0] == {"namespace": "ns", "poll": 2.0}  # detach at its default: not given


def _with_factory(row: B.BackendRow) -> B.BackendRow:
    return dataclasses.replace(row, make=_recording)


@pytest.mark.parametrize(
    ("name", "settings", "said"),
    [
        ("local", {"context": "prod"}, "--context applies to Kubernetes jobs only, not to --local runs"),
        ("local", {"skip_fit_check": True}, "--skip-fit-check applies to Kubernetes jobs only"),
        ("kubernetes", {"runtime": "podman"}, "--runtime applies to --local runs only, not to Kubernetes jobs"),
    ],
)
def test_make_backend_refuses_another_backends_option(name, settings, said):
    with pytest.raises(click.UsageError, match=said) as refused:
        B.make_backend(name, **settings)
    assert "\n" not in str(refused.value.message) and "drop it, or choose" in refused.value.message


def test_make_backend_names_a_setting_no_backend_takes():
    with pytest.raises(TypeError, match="no backend takes the setting 'nodes'"):
        B.make_backend("local", nodes=4)


def test_an_option_given_at_its_default_under_another_backend_is_refused_too(tmp_path):
    """`--runtime process` is the local row's: with Kubernetes it was accepted silently."""
    spec = tmp_path / "job.yaml"
    spec.write_text("apiVersion: roxxel.dev/v1alpha1\nkind: RoxxelJob\nname: j\nimage: i\ncommand: [python]\n")
    result = CliRunner().invoke(C.cli, ["submit", str(spec), "--runtime", "process"])
    assert result.exit_code == 2, result.output
    assert "--runtime applies to --local runs only, not to Kubernetes jobs: drop it, or choose --local" in result.output


def test_delete_with_local_refuses_the_namespace_naming_kubernetes(tmp_path, monkeypatch):
    monkeypatch.setenv("ROXXEL_LOCAL_ROOT", str(tmp_path))
    result = CliRunner().invoke(C.cli, ["delete", "lm", "--local", "-n", "team"])
    assert result.exit_code == 2
    assert "--namespace applies to Kubernetes jobs only, not to --local runs" in result.output


def test_resume_until_done_with_detach_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ROXXEL_LOCAL_ROOT", str(tmp_path))
    result = CliRunner().invoke(C.cli, ["resume", "lm", "--local", "--until-done", "--detach"])
    assert result.exit_code == 2 and "cannot be combined with --detach" in result.output


def test_the_local_factory_runs_a_dry_run_detached_on_loopback():
    from roxxel_launch.backends.local.backend import LocalBackend

    backend = B.make_backend("local", netns=True, dry_run=True, devices_per_worker=2)
    assert isinstance(backend, LocalBackend)
    options = backend.options
    assert (options.foreground, options.echo, options.network, options.devices_per_worker) == (
        False,
        None,
        "loopback",
        2,
    )
    foreground = B.make_backend("local")
    assert isinstance(foreground, LocalBackend) and foreground.options.foreground
    assert foreground.options.echo is sys.stdout


QUEUE = for_backend("--queue", default="default", help="The batch queue (queue backend only).")


def test_a_new_backend_is_one_row(monkeypatch):
    """A row with its own option: commands that offer it pass it to that factory alone, and
    refuse it under the other backends (and theirs under it)."""
    made: list[dict] = []

    def make_queue(*, queue: str = "default") -> Any:
        made.append({"queue": queue})
        return types.SimpleNamespace(queue=queue)  # a third backend, as far as the CLI sees it

    row = B.BackendRow(
        name="queue",
        chosen_by="--backend queue",
        jobs="queued jobs",
        help="a batch queue",
        options=(QUEUE,),
        uses=(),
        make=make_queue,
        cluster=False,
    )
    monkeypatch.setitem(B.BACKENDS, "queue", row)

    @click.command()
    @B.backend_options("queue", "namespace")
    def show(choice: B.BackendChoice) -> None:
        backend = choice.make()
        click.echo(f"{choice.name} {dict(choice.settings)} {backend.queue}")

    runner = CliRunner()
    result = runner.invoke(show, ["--backend", "queue", "--queue", "gpu"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "queue {'queue': 'gpu'} gpu" and made == [{"queue": "gpu"}]
    result = runner.invoke(show, ["--backend", "queue", "-n", "team"])
    assert result.exit_code == 2 and "--namespace applies to Kubernetes jobs only, not to queued jobs" in result.output
    result = runner.invoke(show, ["--queue", "gpu"])  # the default backend, Kubernetes
    assert result.exit_code == 2
    assert "--queue applies to queued jobs only, not to Kubernetes jobs: drop it, or choose --backend queue" in (
        result.output
    )


def test_a_command_cannot_offer_an_option_no_row_declares():
    with pytest.raises(ValueError, match="no backend row has an option 'nodes'"):
        B.backend_options("nodes")


def test_help_imports_no_backend():
    code = (
        "import sys\nfrom roxxel_launch.cli import main\n"
        "try:\n    main(['submit', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('roxxel_launch.backends.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['roxxel_launch.backends.base']"
