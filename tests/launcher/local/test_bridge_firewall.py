"""The ACCEPT rule for a local run's bridge (roxxel_launch.backends.local.bridge_firewall).

Where Docker's daemon runs, bridged frames go through iptables and its FORWARD policy is DROP:
a local run's pods on their own bridge did not reach their coordinator and waited until
jax.distributed's initialisation timeout (the container tier and the --netns tests failed so
on a machine whose CI started dockerd). These tests use a stand-in ``iptables`` on PATH and a
switch file of their own; test_netns.py runs the real rule against a real DROP.
"""

from __future__ import annotations

import os
import pathlib
import shlex

import pytest

from roxxel_launch.backends.base import BackendError
from roxxel_launch.backends.local import bridge_firewall


def _switch(tmp_path: pathlib.Path, value: str | None) -> pathlib.Path:
    path = tmp_path / "bridge-nf-call-iptables"
    if value is not None:
        path.write_text(value + "\n")
    return path


def _fake_iptables(
    tmp_path: pathlib.Path, monkeypatch, *, check_rc: int = 1, insert_rc: int = 0, listed: str = ""
) -> pathlib.Path:
    """An ``iptables`` that logs its arguments: ``-C`` answers check_rc, ``-I`` insert_rc,
    ``-S`` prints ``listed``, ``-D`` succeeds."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (tmp_path / "listed").write_text(listed)
    script = f"""#!/bin/sh
echo "$*" >> {shlex.quote(str(log))}
case "$3" in
  -C) exit {check_rc} ;;
  -I) [ {insert_rc} = 0 ] || echo "iptables: Permission denied (you must be root)." >&2; exit {insert_rc} ;;
  -S) cat {shlex.quote(str(tmp_path / "listed"))} ;;
esac
exit 0
"""
    (bin_dir / "iptables").write_text(script)
    (bin_dir / "iptables").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


@pytest.mark.parametrize("value", [None, "0"])
def test_a_host_that_does_not_filter_bridges_gets_no_rule(tmp_path, monkeypatch, value):
    log = _fake_iptables(tmp_path, monkeypatch)
    assert bridge_firewall.allow("rxlabcdefb", "abcdef", switch=_switch(tmp_path, value)) is False
    assert not log.exists()


def test_a_filtering_host_gets_one_accept_rule_at_the_head_of_forward(tmp_path, monkeypatch):
    log = _fake_iptables(tmp_path, monkeypatch)
    assert bridge_firewall.allow("rxlabcdefb", "abcdef", switch=_switch(tmp_path, "1")) is True
    check, insert = log.read_text().splitlines()
    rule = "-i rxlabcdefb -o rxlabcdefb -m comment --comment roxxel-launch run abcdef -j ACCEPT"
    assert check == f"-w 10 -C FORWARD {rule}"
    assert insert == f"-w 10 -I FORWARD 1 {rule}"


def test_a_rule_already_there_is_not_added_twice(tmp_path, monkeypatch):
    log = _fake_iptables(tmp_path, monkeypatch, check_rc=0)
    assert bridge_firewall.allow("rxlabcdefb", "abcdef", switch=_switch(tmp_path, "1")) is True
    assert [line.split()[2] for line in log.read_text().splitlines()] == ["-C"]


def test_a_rule_that_cannot_be_added_refuses_the_run_in_one_line_naming_the_fixes(tmp_path, monkeypatch):
    _fake_iptables(tmp_path, monkeypatch, insert_rc=4)
    with pytest.raises(BackendError) as err:
        bridge_firewall.allow("podman3", "abcdef", switch=_switch(tmp_path, "1"))
    message = str(err.value)
    assert "\n" not in message
    assert "bridge podman3" in message and "Permission denied" in message
    assert "sysctl -w net.bridge.bridge-nf-call-iptables=0" in message and "as root" in message


def test_without_iptables_a_filtering_host_refuses_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no iptables anywhere
    with pytest.raises(BackendError, match="bridge-nf-call-iptables=1"):
        bridge_firewall.allow("podman3", "abcdef", switch=_switch(tmp_path, "1"))


def test_remove_deletes_every_rule_of_its_run_and_no_other(tmp_path, monkeypatch):
    listed = "\n".join(
        [
            "-P FORWARD DROP",
            '-A FORWARD -i rxlabcdefb -o rxlabcdefb -m comment --comment "roxxel-launch run abcdef" -j ACCEPT',
            '-A FORWARD -i podman3 -o podman3 -m comment --comment "roxxel-launch run abcdef" -j ACCEPT',
            '-A FORWARD -i rxl123456b -o rxl123456b -m comment --comment "roxxel-launch run 123456" -j ACCEPT',
            "-A FORWARD -j DOCKER-USER",
        ]
    )
    log = _fake_iptables(tmp_path, monkeypatch, listed=listed)
    assert bridge_firewall.remove("abcdef") == 2
    deletes = [line for line in log.read_text().splitlines() if " -D " in line]
    assert deletes == [
        "-w 10 -D FORWARD -i rxlabcdefb -o rxlabcdefb -m comment --comment roxxel-launch run abcdef -j ACCEPT",
        "-w 10 -D FORWARD -i podman3 -o podman3 -m comment --comment roxxel-launch run abcdef -j ACCEPT",
    ]


def test_remove_without_iptables_is_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert bridge_firewall.remove("abcdef") == 0
