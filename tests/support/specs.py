"""One job-spec factory for the launcher tests: a valid ``roxxel.dev/v1alpha1`` RoxxelJob."""

import copy

from roxxel_launch.spec import JobSpec, spec_from_dict

IMAGE = "us-docker.pkg.dev/proj/repo/worker:1"
COMMAND = ("python", "-m", "examples.lm")
TPU_V5P = {"tpu": {"type": "v5p", "topology": "2x2x4"}}
"""A v5p slice of 2x2x4 = 16 chips: 4 hosts of 4 chips."""
NO_NETWORK_POLICY = {"network_policy": False}
"""For tests of other objects: the NetworkPolicy is tested in test_pod_security.py."""


def spec_dict(**fields) -> dict:
    """A job spec as plain data (what a spec file holds): job ``lm`` running :data:`COMMAND`
    in :data:`IMAGE` on one CPU host; ``fields`` add or replace top-level fields (copied, so
    that a test may edit the result, nested parts included)."""
    return copy.deepcopy(
        {
            "apiVersion": "roxxel.dev/v1alpha1",
            "kind": "RoxxelJob",
            "name": "lm",
            "image": IMAGE,
            "command": list(COMMAND),
            "accelerator": "cpu",
            **fields,
        }
    )


def job_spec(**fields) -> JobSpec:
    """:func:`spec_dict` parsed and validated into a :class:`~roxxel_launch.spec.JobSpec`."""
    return spec_from_dict(spec_dict(**fields))
