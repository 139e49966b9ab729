"""`roxxel-launch list --local` says where it looked: local state is per directory, so an
empty table from another directory must name the directory it read (issue 19)."""

import os

from click.testing import CliRunner

from roxxel_launch import cli


def test_empty_local_list_names_the_state_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("ROXXEL_LOCAL_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.cli, ["list", "--local"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["NAME  STATE  PROCESSES  RESTARTS  EXIT  CREATED"]  # stdout stays a table
    assert f"no local jobs in {tmp_path / 'runs' / 'local'}: " in result.stderr
    assert "$ROXXEL_LOCAL_ROOT" in result.stderr


def test_local_list_names_the_root_from_the_environment(tmp_path, monkeypatch):
    root = tmp_path / "elsewhere"
    (root / "somejob").mkdir(parents=True)
    monkeypatch.setenv("ROXXEL_LOCAL_ROOT", str(root))
    result = CliRunner().invoke(cli.cli, ["list", "--local"])
    assert result.exit_code == 0, result.output
    assert str(root) in result.stderr and os.getcwd() not in result.stderr.replace(str(root), "")
