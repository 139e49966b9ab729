"""Nodes, as the kubelet registers them
(https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/): labels,
taints, allocatable resources; cluster-scoped.
"""

from __future__ import annotations


class Nodes:
    """Adding Nodes (a mixin of ``FakeKubernetes``)."""

    def add_node(
        self, name: str, *, labels: dict[str, str], allocatable: dict[str, str], taints: tuple[dict, ...] = ()
    ) -> dict:
        """Store a Node as the kubelet registers it (the Node API,
        https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/):
        ``metadata.labels`` (GKE's node-pool and accelerator labels among them),
        ``spec.taints`` and ``status.allocatable`` (quantities as strings, ``capacity`` the
        same). Listed by ``GET /api/v1/nodes`` (cluster-scoped: authorized by the ClusterRole)."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": dict(labels),
                "uid": f"uid-{next(self._ids)}",
                "resourceVersion": str(next(self._ids)),
                "creationTimestamp": "2025-01-01T00:00:00Z",
            },
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)},
        }
        with self._lock:
            self.objects[("nodes", "", name)] = node
        return node
