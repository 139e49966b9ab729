"""roxxel-launch's stderr logging: each warning once per command (submit renders and checks a
spec twice, once on the command line and once in the backend, and both passes warn)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import logging
    from roxxel_launch.cli import configure_logging

    for command in range(2):  # two commands in one process (as CliRunner runs them): each shows it
        configure_logging(0)
        log = logging.getLogger("roxxel_launch.render")
        for _ in range(3):
            log.warning("host network: the node's service account writes gs://b/ckpt")
        log.warning("another warning")
        log.info("not shown at the default level")
    logging.getLogger("roxxel_launch.validate").warning("host network: the node's service account writes gs://b/ckpt")
    """
)


def test_a_warning_repeated_within_a_command_is_shown_once():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    repeated = "WARNING roxxel_launch.render: host network: the node's service account writes gs://b/ckpt"
    assert lines.count(repeated) == 2, lines  # once per command
    assert lines.count("WARNING roxxel_launch.render: another warning") == 2, lines
    # the same words from another module are another warning
    assert lines[-1] == "WARNING roxxel_launch.validate: host network: the node's service account writes gs://b/ckpt"
    assert not any("not shown" in line for line in lines)
