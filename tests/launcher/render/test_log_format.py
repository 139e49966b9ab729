"""The spec's log_format renders ROXXEL_LOG_FORMAT (json on Kubernetes, text for --local), and
`logs` shows the workers' JSON log lines as text (roxxel.log_format)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from roxxel.contract import ENV_LOG_FORMAT
from roxxel.log_format import json_line
from roxxel_launch import cli as C
from roxxel_launch import render as R
from roxxel_launch.cli import backend_choice
from roxxel_launch.spec import SpecError
from support.specs import job_spec


def _log_format(objects, kind: str) -> str | None:
    (workload,) = [obj for obj in objects if obj["kind"] == kind]
    spec = workload["spec"]
    if kind == "JobSet":
        spec = spec["replicatedJobs"][0]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}
    return env.get(ENV_LOG_FORMAT)


@pytest.mark.parametrize(
    ("fields", "cluster", "expected"),
    [
        ({}, True, "json"),
        ({}, False, "text"),
        ({"log_format": "text"}, True, "text"),
        ({"log_format": "json"}, False, "json"),
        ({"workload": "indexed-job"}, True, "json"),
    ],
)
def test_log_format_renders_the_env_var(fields, cluster, expected):
    spec = job_spec(**fields)
    kind = "Job" if spec.workload == "indexed-job" else "JobSet"
    assert _log_format(R.render(spec, cluster=cluster).objects, kind) == expected


def test_log_format_is_one_of_json_and_text():
    with pytest.raises(SpecError, match="log_format"):
        job_spec(log_format="yaml")


def test_the_env_var_is_the_launchers():
    with pytest.raises(SpecError, match=ENV_LOG_FORMAT):
        job_spec(env={ENV_LOG_FORMAT: "text"})


class _Lines:
    def __init__(self, lines: list[str]):
        self.lines = lines

    def logs(self, name, **kwargs):
        yield from self.lines


def test_logs_shows_json_lines_as_text(monkeypatch):
    lines = [
        json_line("ERROR", "save failed\nTraceback ...", process_index=0, wall=0.0, logger="roxxel.checkpoint") + "\n",
        json_line("INFO", "step 3/10  loss=2.5", process_index=0, wall=1.0) + "\n",
        "a plain line\n",
        "[rank 1] " + json_line("WARNING", "slow host", process_index=1, wall=2.0) + "\n",
    ]
    monkeypatch.setattr(backend_choice, "make_backend", lambda *args, **kwargs: _Lines(lines))
    result = CliRunner().invoke(C.cli, ["logs", "lm"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "1970-01-01T00:00:00.000000Z ERROR [process 0] save failed",
        "Traceback ...",
        "1970-01-01T00:00:01.000000Z [process 0] step 3/10  loss=2.5",
        "a plain line",
        "[rank 1] 1970-01-01T00:00:02.000000Z WARNING [process 1] slow host",
    ]
