"""Free-form spec values (pod_patch, affinity) of the wrong shape give a clear error, never a crash.

Found by kubectl's referee tests: ``--set "pod_patch.spec.containers=[{...}]"`` kept the list as
a string, and the offline checks crashed with ``AttributeError`` on it. The kind: any value
inside a free-form field reaching the checks with a type they do not expect, from ``--set``
or from the spec file, with or without the schema check.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from roxxel_launch import spec as S
from roxxel_launch.cli import cli

from support.paths import REPO

SMOKE = str(REPO / "k8s" / "examples" / "cpu-smoke.yaml")


def test_set_inside_a_free_form_field_reads_yaml_as_the_spec_file_would():
    data = S.apply_overrides(
        {},
        [
            "pod_patch.spec.containers=[{name: worker, bogusField: 1}]",
            "pod_patch.spec.terminationGracePeriodSeconds=60",
            "affinity.nodeAffinity={}",
        ],
    )
    assert data["pod_patch"]["spec"]["containers"] == [{"name": "worker", "bogusField": 1}]
    assert data["pod_patch"]["spec"]["terminationGracePeriodSeconds"] == 60
    assert data["affinity"]["nodeAffinity"] == {}


@pytest.mark.parametrize(
    "override",
    [
        "pod_patch.spec.containers=[{name: worker, volumeMounts: [x]}]",
        "pod_patch.spec.tolerations=[x]",
        "pod_patch.spec.volumes=[x]",
    ],
)
@pytest.mark.parametrize("schema", [True, False])
def test_wrong_shapes_are_errors_that_name_the_problem(override, schema):
    args = ["render", SMOKE, "--set", override] + ([] if schema else ["--no-schema"])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    assert not isinstance(result.exception, (AttributeError, TypeError)), result.exception
    assert "Error:" in result.output and "Traceback" not in result.output
    assert "pod_patch" in result.output or "spec.template.spec." in result.output
