"""The launcher/worker contract stays light: ``roxxel-launch`` loads no numpy, JAX or data package.

Each check runs in a fresh interpreter (a subprocess), because the test process itself has
long imported numpy and JAX.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.paths import REPO

HEAVY = ("numpy", "jax", "roxxel.data", "roxxel.train", "roxxel.format")


def _modules_after(code: str) -> list[str]:
    """The heavy modules loaded once ``code`` has run in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import roxxel, roxxel.contract, roxxel.exit_codes, roxxel.distributed, roxxel.worker",
        "import roxxel_launch.cli, roxxel_launch.contract, roxxel_launch.render, roxxel_launch.spec, "
        "roxxel_launch.validate, roxxel_launch.backends.local.backend, roxxel_launch.backends.kubernetes.backend",
        # A whole command: load, render and validate an example spec (what `roxxel-launch render` does).
        "from click.testing import CliRunner\nfrom roxxel_launch.cli import cli\n"
        "r = CliRunner().invoke(cli, ['render', 'k8s/examples/cpu-smoke.yaml'])\nassert r.exit_code == 0, r.output",
    ],
)
def test_launcher_and_contract_import_no_numpy_jax_or_data(code):
    assert _modules_after(code) == []


def test_public_names_of_roxxel_load_on_first_use():
    loaded = _modules_after("from roxxel import Roxxel, Curriculum, Phase, Stream")
    assert "numpy" in loaded and "roxxel.data" in loaded
    assert "roxxel.train" not in loaded


@pytest.mark.parametrize(
    "code",
    [
        "import roxxel.pack, roxxel.cli, roxxel.data.dataset",
        "from roxxel.cli import main\nfrom click.testing import CliRunner\n"
        "assert CliRunner().invoke(main, ['info', '--help']).exit_code == 0",
    ],
)
def test_the_shard_tools_load_no_jax(code):
    """roxxel pack / info / verify / cat read and write shards only: importing JAX (through
    roxxel.data's streamer) added ~0.6 s to each command and forced a forkserver pool."""
    loaded = _modules_after(code)
    assert "jax" not in loaded and "roxxel.train" not in loaded


def test_no_exit_code_or_variable_is_defined_twice():
    """The launcher's names are the contract's objects, not copies."""
    import roxxel.contract as shared
    import roxxel.distributed as distributed
    import roxxel.exit_codes as exit_codes
    import roxxel.worker as worker
    from roxxel_launch import cli, contract

    assert cli.EXIT_PREEMPTED == contract.PREEMPTED_EXIT_CODE == exit_codes.PREEMPTED_EXIT_CODE == 42
    assert contract.CONFIG_ERROR_EXIT_CODE is shared.CONFIG_ERROR_EXIT_CODE is exit_codes.CONFIG_ERROR_EXIT_CODE
    assert shared.CONFIG_ERROR_EXIT_CODE == 78
    assert worker.ENV_RESTART_ATTEMPT is shared.ENV_RESTART_ATTEMPT
    assert contract.DEFAULT_COORDINATOR_PORT is shared.DEFAULT_COORDINATOR_PORT
    assert distributed.JOBSET_DOWNWARD_API is shared.JOBSET_DOWNWARD_API
    names = [v for k, v in vars(shared).items() if k.startswith("ENV_")]
    assert len(names) == len(set(names)), "two contract constants name the same variable"
