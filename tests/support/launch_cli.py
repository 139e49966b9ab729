"""``roxxel-launch`` run in the test's own process (click's CliRunner), and spec files."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner, Result

from roxxel_launch.cli import cli


def launch(*args, code: int = 0) -> Result:
    """``roxxel-launch ARGS``; asserts its exit code (the output and exception in the message)."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    return result


def write_spec(directory: Path, spec: dict) -> Path:
    """``spec`` as a spec file in ``directory`` (named after its name and namespace)."""
    path = directory / f"{spec['name']}-{spec.get('namespace', 'default')}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
