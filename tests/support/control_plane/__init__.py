"""A real Kubernetes control plane on this machine, built from the upstream Go modules.

``./dev.sh cluster up`` (or ``python -m support.control_plane up`` with ``tests/`` on the path)
builds once, then starts: etcd (its embed package), ``kube-apiserver`` (RBAC and Node
authorisation, the default admission chain with PodSecurity, ResourceQuota, Priority and
ServiceAccount), ``kube-controller-manager`` (Job, garbage collector, namespace, service
accounts, resource quota, ...), ``kube-scheduler``, the JobSet and Kueue controllers with their
webhooks, and kwok, which plays the kubelet of nodes shaped like GKE node pools (:mod:`.nodes`).
The versions are the pins of ``k8s/cluster/go.mod``. The cluster tests (``-m cluster``) start
one per test session (:mod:`.session`).

What this cannot give, and stays simulated in ``tests/support/k8s_sim``: containers and their
logs (kwok runs none), GKE's own admission (Autopilot's Warden, the TPU environment webhook),
and the GCS FUSE CSI driver.
"""

from .build import BuildError, build, built
from .cluster import ClusterError, ControlPlane

__all__ = ["BuildError", "ClusterError", "ControlPlane", "build", "built"]
