"""What only the JobSet controller and its CRD do: gang restarts in place
(kubernetes-sigs/jobset@08dfbdfd682714a9ab929633eca8dc95315187e7,
pkg/controllers/failure_policy.go and jobset_controller.go;
https://jobset.sigs.k8s.io/docs/concepts/#failure-policy), the ``RestartingJobSet``
condition, the CRD served (or not: a cluster without JobSet) and an older CRD's schema
under ``fieldValidation``
(https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation).
"""

from __future__ import annotations

import copy
import functools
import time
from typing import Any

import yaml

from roxxel_launch.backends.local import policy

from support.k8s_sim.api import JOBSET_NAME, status_object
from support.k8s_sim.request import Request


class JobSets:
    """The JobSet controller and CRD (a mixin of ``FakeKubernetes``)."""

    @property
    def jobset_api(self) -> bool:
        """Is JobSet installed? Without it its CRD is not served and every JobSet path is
        unknown to the API server: 404 with the mux's plain ``404 page not found``."""
        return self._real.crd

    @jobset_api.setter
    def jobset_api(self, installed: bool) -> None:
        self._real.crd = installed

    def serve_jobset_crd(self, *, without: tuple[str, ...] = (), release: str | None = None) -> None:
        """Serve the JobSet CRD (tests/fixtures), with the named properties of
        ``spec.failurePolicy`` removed (``restartStrategy``, ``rules``): an older JobSet; or
        the CRD of JobSet ``release`` (``v0.8.0``, ``v0.9.1``, ``v0.10.0``: a release's own
        CRD, trimmed; support.paths.OLD_JOBSET_CRDS)."""
        with self._lock:
            self._real.crd_without = tuple(without)
            self._real.crd_release = release
            self._real.crd = True

    def restart(self, name: str) -> None:
        """A gang restart of JobSet ``name`` now, as its ``preemption`` rule makes one (see
        :meth:`_gang_restart`)."""
        with self._lock:
            self._gang_restart(("jobsets", self.namespace, name))

    def plan_restarts(self, name: str, *afters: int) -> None:
        """Gang restarts of the next submission of JobSet ``name``, each when the JobSet
        has been read or watched ``after`` more times, before its planned outcome."""
        with self._lock:
            self._real.restart_plans.setdefault(name, []).extend(afters)

    def _crd_answer(self, name: str | None) -> tuple[int, Any]:
        """``GET`` of a CustomResourceDefinition: the JobSet CRD while JobSet is installed."""
        real = self._real
        if not real.crd or name != "jobsets.jobset.x-k8s.io":
            return 404, status_object(
                404, "NotFound", f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found', name=name
            )
        return 200, jobset_crd(real.crd_without, real.crd_release)

    def _strict_jobset(self, request: Request) -> tuple[int, dict] | None:
        """An older JobSet CRD (:meth:`serve_jobset_crd`): under ``fieldValidation=Strict`` a
        field of ``spec.failurePolicy`` (its rules included) that its schema lacks is an error,
        else it is pruned silently
        (https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation;
        https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#field-pruning)."""
        real = self._real
        if not real.crd_without and real.crd_release is None:
            return None
        policy = ((request.body or {}).get("spec") or {}).get("failurePolicy")
        if not isinstance(policy, dict):
            return None
        version = next(
            v for v in jobset_crd(real.crd_without, real.crd_release)["spec"]["versions"] if v["name"] == "v1alpha2"
        )
        schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"].get("failurePolicy") or {}
        unknown = list(_undeclared(policy, schema, ".spec.failurePolicy"))
        if not unknown:
            return None
        if request.query.get("fieldValidation") == "Strict":
            return 400, status_object(
                400, "BadRequest", "; ".join(f"{path}: field not declared in schema" for path, _, _ in unknown)
            )
        for _, parent, key in unknown:
            del parent[key]
        return None

    def _gang_restart(
        self,
        key: tuple[str, str, str],
        *,
        counted: bool = False,
        decision: policy.Decision | None = None,
        failed_job: str = "",
    ) -> None:
        """A JobSet gang restart, as the JobSet controller does it (kubernetes-sigs/jobset
        @08dfbdfd682714a9ab929633eca8dc95315187e7, pkg/controllers/failure_policy.go
        ``failurePolicyRecreateAll`` and jobset_controller.go ``getChildJobs`` /
        ``deleteJobs`` / ``labelAndAnnotateObject``; https://jobset.sigs.k8s.io/docs/concepts/
        #failure-policy):

        * ``status.restarts`` grows by one, and ``status.restartsCountTowardsMax`` too when
          ``counted`` (``RestartJobSet``; ``RestartJobSetAndIgnoreMaxRestarts`` does not
          count); the latter is ``omitempty`` in the API type, so it is absent while 0;
        * condition ``RestartingJobSet`` True, reason ``FailurePolicy_<rule>`` (or
          ``DefaultFailurePolicy`` when no rule matched), message "applying <action> failure
          policy action (first failed job: <job>)", and a Warning event with reason
          ``<action>FailurePolicyAction`` on the JobSet; :meth:`_restarting_done` sets the
          condition False (``JobsReady``) once the new pods run;
        * the child Jobs of the old attempt (label ``restart-attempt`` below
          ``status.restarts``) are deleted with foreground propagation, their pods with them,
          and every Job is created again from its template with the new attempt on the Job's
          and pods' ``jobset.sigs.k8s.io/restart-attempt`` label and annotation; here the old
          pods go at once, so ``BlockingRecreate`` (new pods only once the old are gone)
          holds trivially.

        ``decision`` (the policy engine's, whose ``rule`` names the JobSet rule) and
        ``failed_job`` say why; without them (:meth:`restart`) the restart is the
        ``preemption`` rule's."""
        obj = self.objects.get(key)
        if obj is None:
            return
        resource, ns, name = key
        status = obj.setdefault("status", {})
        attempt = int(status.get("restarts") or 0) + 1
        status["restarts"] = attempt
        towards_max = int(status.get("restartsCountTowardsMax") or 0) + counted
        status.pop("restartsCountTowardsMax", None)
        if towards_max:
            status["restartsCountTowardsMax"] = towards_max
        rule = decision.rule if decision is not None else "preemption"
        action = "RestartJobSet" if counted else "RestartJobSetAndIgnoreMaxRestarts"
        if not failed_job:
            rjob = obj["spec"]["replicatedJobs"][0]["name"]
            failed_job = f"{name}-{rjob}-0"
        message = f"applying {action} failure policy action (first failed job: {failed_job})"
        self._set_restarting(obj, "True", f"FailurePolicy_{rule}" if rule else "DefaultFailurePolicy", message)
        self._real.job_failures = {
            j: n for j, n in self._real.job_failures.items() if j[0] != key
        }  # the child Jobs are new: no failures yet
        for pod_key in [
            k
            for k, o in self.objects.items()
            if k[0] == "pods" and k[1] == ns and o["metadata"]["labels"].get(JOBSET_NAME) == name
        ]:
            del self.objects[pod_key]
            self._log_ended.add(pod_key[2])
        self._start_pods(resource, obj)
        self._real.gang_restarts += 1
        self.event(obj, f"{action}FailurePolicyAction", message, component="jobset-controller")
        self._lock.notify_all()

    @staticmethod
    def _set_restarting(obj: dict, state: str, reason: str, message: str) -> None:
        """The JobSet condition ``RestartingJobSet`` (jobset_types.go ``JobSetRestarting``)."""
        status = obj.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "RestartingJobSet"] + [
            {
                "type": "RestartingJobSet",
                "status": state,
                "reason": reason,
                "message": message,
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ]

    def _restarting_done(self, key: tuple[str, str, str]) -> None:
        """The controller's next reconcile after a gang restart: once every pod of the new
        attempt runs (``allJobsReady``), ``RestartingJobSet`` goes False with reason
        ``JobsReady`` ("all jobs are ready"; jobset_controller.go
        ``setRestartingConditionFalse``)."""
        obj = self.objects.get(key)
        if key[0] != "jobsets" or obj is None:
            return
        conditions = (obj.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "RestartingJobSet" and c.get("status") == "True" for c in conditions):
            return
        if all(p["status"]["phase"] == "Running" for p in self._ordered_pods(key)):
            self._set_restarting(obj, "False", "JobsReady", "all jobs are ready")


@functools.lru_cache(maxsize=1)
def _parsed_jobset_crd() -> dict:
    """The JobSet CRD fixture, parsed once (a second of YAML parsing per read otherwise)."""
    from support.paths import JOBSET_CRD

    return yaml.safe_load(JOBSET_CRD.read_text())


@functools.lru_cache(maxsize=4)
def _parsed_release_crd(release: str) -> dict:
    from support.paths import OLD_JOBSET_CRDS

    return yaml.safe_load(OLD_JOBSET_CRDS[release].read_text())


def _undeclared(obj: dict, schema: dict, path: str):
    """(path, parent, key) of each key of ``obj`` (and of its lists' objects) that ``schema``'s
    ``properties`` do not declare, as a structural schema prunes them."""
    properties = schema.get("properties") or {}
    for key, value in obj.items():
        if key not in properties:
            yield f"{path}.{key}", obj, key
            continue
        sub = properties[key]
        if isinstance(value, dict):
            yield from _undeclared(value, sub, f"{path}.{key}")
        elif isinstance(value, list) and isinstance(sub.get("items"), dict):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _undeclared(item, sub["items"], f"{path}.{key}[{i}]")


def jobset_crd(without: tuple[str, ...], release: str | None = None) -> dict:
    crd = copy.deepcopy(_parsed_jobset_crd() if release is None else _parsed_release_crd(release))
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        policy = spec["properties"].get("failurePolicy") or {}
        for field in without:
            (policy.get("properties") or {}).pop(field, None)
    return crd


def count_preemptions(monkeypatch) -> None:
    """Render JobSets whose failure-policy rule ``preemption`` is ``RestartJobSet`` instead
    of ``RestartJobSetAndIgnoreMaxRestarts`` (a manifest edited after rendering): each
    preemption then counts against ``maxRestarts``, and the one after them ends the JobSet
    Failed (``ReachedMaxRestarts``) with its workers preempted, which the launcher reports
    as Preempted and ``resume`` continues. With the rendered rule a preemption never ends a
    JobSet (kubernetes-sigs/jobset@08dfbdf pkg/controllers/failure_policy.go
    ``restartJobSetAndIgnoreMaxRestartsActionApplier`` does not check ``maxRestarts``)."""
    from roxxel_launch.backends.kubernetes import backend as kubernetes_backend

    real = kubernetes_backend.render

    def counting(spec):
        rendered = real(spec)
        for obj in rendered.objects:
            for rule in ((obj.get("spec") or {}).get("failurePolicy") or {}).get("rules") or ():
                if obj.get("kind") == "JobSet" and rule.get("name") == "preemption":
                    rule["action"] = "RestartJobSet"
        return rendered

    monkeypatch.setattr(kubernetes_backend, "render", counting)
