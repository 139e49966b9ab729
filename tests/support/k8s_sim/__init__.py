"""A simulated Kubernetes API server (a test double): a small HTTP server on 127.0.0.1, in a thread.

This is NOT a Kubernetes API server and no real controller runs behind it. It answers the
subset of the REST API that ``roxxel_launch.backends.kubernetes.backend`` uses, over real HTTP, so
the official ``kubernetes`` client is exercised end to end (kubeconfig loading, URL and
query building, bearer token, JSON bodies, chunked log streams, error Status objects):

* JobSets (``/apis/jobset.x-k8s.io/v1alpha2/namespaces/NS/jobsets[/NAME]``, the
  CustomObjects API), Jobs (``/apis/batch/v1/...``), Services and Pods (``/api/v1/...``):
  create (``POST``, with ``dryRun=All`` persisting nothing), read, list (equality and
  existence label selectors) and delete (``propagationPolicy`` recorded; the object and
  its pods go at once, or after ``linger`` reads to mimic foreground deletion);
* pod logs (``/api/v1/namespaces/NS/pods/NAME/log``), with ``follow=true`` streamed as a
  chunked response that ends when the pod has terminated or :meth:`FakeKubernetes.end_log`
  is called (and after at most ``FOLLOW_LIMIT_S`` seconds in any case);
* errors as the API server sends them (a ``Status`` object): 401 for a wrong token, 404
  for a missing object or an unknown path, 409 ``AlreadyExists``, 422 ``Invalid`` for an
  object name that is not a DNS-1123 label, and any status injected with
  :meth:`FakeKubernetes.fail`.

In place of the JobSet, Job and Kueue controllers, a scripted stand-in: creating a JobSet
or Job also creates its worker pods (Running, with the labels the controllers put on
them), and :meth:`FakeKubernetes.plan` says how each successive submission of a job ends
— ``succeed``, ``fail`` (a worker exits 1 in every attempt), ``preempt`` (a pod gets the
DisruptionTarget condition and exits 42 after its checkpoint), ``evict`` (Kueue suspends
it and its pods go) or ``run`` (keeps running) — applied when the object has been read
``after`` times (status polls), so that tests are deterministic and need no sleeps. Worker
exits, those of ``fail`` and ``preempt`` as those scripted with
:meth:`FakeKubernetes.exit_worker`, are decided by the stored object's own policies
(``podFailurePolicy``, ``backoffLimit``, the JobSet's ``failurePolicy`` rules and
``maxRestarts``) through ``roxxel_launch.backends.local.policy``, the engine the local backend
runs the same manifest with, and carried out as the JobSet controller does
(kubernetes-sigs/jobset@08dfbdfd682714a9ab929633eca8dc95315187e7,
pkg/controllers/failure_policy.go and jobset_controller.go; see
:meth:`FakeKubernetes._gang_restart`): a preempted JobSet of the launcher's manifest is
restarted in place for free, and its next planned outcome applies to the new attempt.
:func:`count_preemptions` renders a rule that counts instead, the one way a preemption
ends a JobSet (Preempted, for the tests of ``resume``). Child Jobs of a JobSet are not
stored: their names, failure reasons and messages appear in the decisions, conditions
and events the fake writes.

Enough for ``kubectl`` too (tests/launcher/kubernetes/test_kubectl_referee.py; ``tls=True``, since
kubectl sends its token only over TLS, see ``k8s_tls``): discovery and OpenAPI v3 documents
(``k8s_discovery``); every create decoded, defaulted and validated against the official
schemas and the JobSet CRD with its CEL rules, honouring ``fieldValidation`` (``k8s_schema``;
warnings go out as ``Warning`` headers); ``fieldSelector`` on ``metadata.name`` /
``metadata.namespace``; the same watch for ``kubectl wait`` as for the launcher; DELETE
answering with the deleted object for pods, services and custom resources and with a
Success Status otherwise, as the API server's registries do; pods made from their Job's pod
template (containers, annotations); JSON merge patches; JobSets printed as a Table with the
CRD's columns (``k8s_table``); :meth:`FakeKubernetes.settle` ends a job at once.

It is the one API double of the launcher tests (tests/launcher/kubernetes/test_kubernetes_backend.py
included), so it also takes objects stored directly (:meth:`FakeKubernetes.put`, as a
controller or an earlier submit left them), namespaces that do not exist
(``namespaces``), Nodes with labels, taints and allocatable resources, listed cluster-wide
(:meth:`FakeKubernetes.add_node`; none unless a test adds them), a cluster without JobSet
(``jobset_api``), raw-text answers and faults
on watches only (:meth:`FakeKubernetes.fail`) and raw log chunks
(:meth:`FakeKubernetes.log_bytes`).

What it is still for, now that the Kubernetes backend is also tested against a real control
plane (tests/support/control_plane, tests/launcher/cluster: the API server, the Job, JobSet and
Kueue controllers, the scheduler, kwok nodes), and why each part cannot be the real thing there:

* container output and streams (logs, ``follow``, exec and port-forward channels): kwok runs
  no container and no kubelet answers a node's address;
* faults on demand (dropped connections, 5xx answers, 410 on an expired continue token, a
  watch that breaks): a healthy API server does not fail when a test asks it to;
* GKE's own admission and facts: Autopilot's Warden refusals, the TPU environment webhook,
  ``/version`` strings with ``-gke.`` builds (the GCS FUSE host-network gate), GKE's node
  names for Autopilot and node auto-provisioning; their code is not public, or not a module;
* other releases: JobSet CRDs before v0.10.0 (no ``onJobFailureMessagePatterns``), a Kueue
  that serves only ``v1beta1``: the control plane pins one release of each;
* scripted outcomes on a fake clock (``plan``, ``exit_worker``, ``settle``): the retry, wait
  and resume loops tested in milliseconds, where the real controllers take real seconds. The
  decisions themselves (the failure policy's free and counted restarts, Kueue's eviction and
  re-admission) are observed on the real controllers in the cluster tier, and where the two
  disagree, the real one is right.

One module per resource or concern, each citing the Kubernetes, JobSet or Kueue docs its
behaviours follow: ``server`` (``FakeKubernetes``: lifecycle, authentication, routing,
discovery, injected faults), ``handler`` (the HTTP side), ``request`` (a parsed request),
``api`` (kinds, labels, Status objects), ``store`` (objects, resourceVersions, selectors,
pagination, patches, garbage collection), ``watch``, ``rbac``, ``jobs`` (the pods of
Indexed Jobs), ``workloads`` (the scripted Job and JobSet controllers: plans, worker exits
through the policy engine, suspension), ``jobsets`` (gang restarts, the CRD), ``pods``
(logs, containers, exec and port-forward), ``events``, ``nodes`` and ``kueue``.
``FakeKubernetes`` is made of one mixin class per module; they share its state.
"""

from support.k8s_sim.api import FOLLOW_LIMIT_S, RESTART_ATTEMPT, status_object
from support.k8s_sim.jobsets import count_preemptions
from support.k8s_sim.server import TOKEN, FakeKubernetes, use_cluster

__all__ = [
    "FOLLOW_LIMIT_S",
    "RESTART_ATTEMPT",
    "TOKEN",
    "FakeKubernetes",
    "count_preemptions",
    "status_object",
    "use_cluster",
]
