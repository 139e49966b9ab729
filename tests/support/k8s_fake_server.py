"""The simulated Kubernetes API server of the launcher tests, by its old name: the names the
tests import, re-exported from ``support.k8s_sim`` (one module per resource or concern; see
its package docstring for what it simulates and the docs each behaviour follows)."""

from support.k8s_sim import (
    FOLLOW_LIMIT_S,
    RESTART_ATTEMPT,
    TOKEN,
    FakeKubernetes,
    count_preemptions,
    status_object,
    use_cluster,
)

__all__ = [
    "FOLLOW_LIMIT_S",
    "RESTART_ATTEMPT",
    "TOKEN",
    "FakeKubernetes",
    "count_preemptions",
    "status_object",
    "use_cluster",
]
