"""The ``roxxel-launch`` command: the ``cli`` group and its commands, one module per verb group
(:mod:`.offline`, :mod:`.job_control`, :mod:`.observe`, :mod:`.pod_access`, :mod:`.image_build`).

Only click is imported at module level so that ``roxxel-launch --help`` starts fast; each
command imports what it needs (YAML, jinja2, schemas, the kubernetes client).

Job commands (``submit``, ``status``, ``logs``, ``list``, ``delete``, ``suspend``, ``resume``,
``wait``, ``exec``, ``port-forward``)
talk to a backend chosen by name with ``--backend`` (:data:`.backend_choice.BACKENDS`): ``kubernetes``, the
cluster of the current kubeconfig context, by default
(``roxxel_launch.backends.kubernetes``, imported only then), or ``local``, this machine
(``roxxel_launch.backends.local``); ``--local`` is short for ``--backend local``.

Exit codes:

* ``wait`` and ``resume --until-done`` say how the job ended: :data:`EXIT_SUCCEEDED` (0),
  :data:`EXIT_PREEMPTED` (42, the same code as :data:`roxxel.exit_codes.PREEMPTED_EXIT_CODE`:
  stopped after a checkpoint, evicted or preempted — ``resume`` continues it),
  :data:`EXIT_TIMED_OUT` (124, ``--timeout`` passed first; the job keeps running, as with
  coreutils' ``timeout``) and :data:`EXIT_FAILED` (125, any other end; the failing worker's
  own exit code is printed). A preempted job keeps its own code rather than 125 because
  "resume me" and "fix me" call for different actions in a script.
* ``exec``: the exit code of the command run in the pod (as ``kubectl exec``).
* ``submit --local`` (in the foreground) and ``resume --local`` without ``--until-done``:
  the job's own exit code, as :mod:`roxxel.exit_codes` defines it (0 done, 42 preempted
  after a checkpoint, else the failing worker's code), like running the program itself.
* 1 for an error of roxxel-launch itself (invalid spec, unknown job, no cluster access, ...),
  and before any command when the ``launch`` extra is not installed (``pip install
  'roxxel[launch]'``: :data:`LAUNCH_EXTRA`); 2 for a bad command line.
"""

from __future__ import annotations

import importlib.util
import logging
import sys

import click

from roxxel_launch.cli import image_build, job_control, observe, offline, pod_access
from roxxel_launch.cli.job_output import EXIT_FAILED, EXIT_PREEMPTED, EXIT_SUCCEEDED, EXIT_TIMED_OUT

__all__ = ["EXIT_FAILED", "EXIT_PREEMPTED", "EXIT_SUCCEEDED", "EXIT_TIMED_OUT", "LAUNCH_EXTRA", "cli", "main"]

LAUNCH_EXTRA = {
    "jinja2": "jinja2",
    "yaml": "PyYAML",
    "kubernetes": "kubernetes",
    "kubernetes_validate": "kubernetes-validate",
    "jsonschema": "jsonschema",
}
"""The ``launch`` extra of pyproject.toml, import name -> distribution: what only the launcher
imports. ``pip install roxxel`` (the worker image) leaves them out."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Render, validate and submit multi-host JAX training jobs on Kubernetes."""
    configure_logging(verbose)


class _WarnOnce(logging.Filter):
    """Shows each warning (and worse) once per command: submit and resume render and check a
    spec twice (the command line's offline check, then the backend's before it sends), and
    each pass logs the same render and Pod Security warnings."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: set[tuple[int, str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.levelno, record.name, record.getMessage())
        if key in self.shown:
            return False
        self.shown.add(key)
        return True


def configure_logging(verbose: int) -> None:
    """stderr logging at WARNING (-v INFO, -vv DEBUG), each warning shown once per command."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:  # basicConfig's, not a test's capture
            for old in [f for f in handler.filters if isinstance(f, _WarnOnce)]:
                handler.removeFilter(old)
            handler.addFilter(_WarnOnce())


for _command in (
    offline.render_command,
    offline.validate,
    offline.schema_command,
    job_control.submit,
    job_control.resume,
    job_control.suspend,
    job_control.delete,
    observe.status,
    observe.list_command,
    observe.logs,
    observe.wait,
    pod_access.exec_command,
    pod_access.port_forward,
    image_build.image,
):
    cli.add_command(_command)


def missing_launch_extra() -> list[str]:
    """The distributions of :data:`LAUNCH_EXTRA` that this Python cannot import (none are imported)."""
    return [dist for module, dist in LAUNCH_EXTRA.items() if importlib.util.find_spec(module) is None]


def main(argv: list[str] | None = None) -> None:
    """``roxxel-launch``: exits 1 in one line, before any command, when the launch extra is missing
    (the console script is installed with Roxxel's base, as in the worker image)."""
    missing = missing_launch_extra()
    if missing:
        sys.exit(
            f"roxxel-launch: the launcher's dependencies are not installed ({', '.join(missing)}): "
            "pip install 'roxxel[launch]'"
        )
    cli.main(args=argv, prog_name="roxxel-launch")
