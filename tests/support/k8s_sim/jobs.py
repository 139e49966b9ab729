"""The pods a Job makes: an Indexed Job's one pod per completion index, from its pod
template, with the Job controller's labels and annotations (``job-name``,
``batch.kubernetes.io/job-name``, ``batch.kubernetes.io/job-completion-index``;
https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode), and the
child Jobs of a JobSet, whose pods carry the JobSet controller's labels too
(``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``,
``restart-attempt``; https://jobset.sigs.k8s.io/docs/concepts/).
"""

from __future__ import annotations

import copy
import time

from roxxel_launch.backends.local import policy

from support.k8s_sim.api import COMPLETION_INDEX, JOB_INDEX, JOBSET_NAME, RESTART_ATTEMPT, RJOB_NAME


class JobPods:
    """Starting and finding the pods of Jobs and JobSets (a mixin of ``FakeKubernetes``)."""

    def _start_pods(self, resource: str, obj: dict) -> None:
        name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if resource == "jobsets":
            # The controller stamps status.restarts on the new attempt's Jobs and pods.
            attempt = str((obj.get("status") or {}).get("restarts") or 0)
            for rjob in obj["spec"]["replicatedJobs"]:
                job_spec = rjob["template"]["spec"]
                template_labels = (job_spec["template"].get("metadata") or {}).get("labels") or {}
                for s in range(rjob.get("replicas", 1)):
                    for i in range(job_spec.get("completions", 1)):
                        labels = {
                            **template_labels,
                            JOBSET_NAME: name,
                            RJOB_NAME: rjob["name"],
                            JOB_INDEX: str(s),
                            RESTART_ATTEMPT: attempt,
                            COMPLETION_INDEX: str(i),
                            "job-name": f"{name}-{rjob['name']}-{s}",
                            "batch.kubernetes.io/job-name": f"{name}-{rjob['name']}-{s}",
                        }
                        self._put_pod(
                            f"{name}-{rjob['name']}-{s}-{i}-{next(self._ids):05d}",
                            ns,
                            labels,
                            started,
                            template=job_spec["template"],
                        )
        else:
            template_labels = (obj["spec"]["template"].get("metadata") or {}).get("labels") or {}
            for i in range(obj["spec"].get("completions", 1)):
                labels = {
                    **template_labels,
                    "job-name": name,
                    "batch.kubernetes.io/job-name": name,
                    COMPLETION_INDEX: str(i),
                }
                self._put_pod(
                    f"{name}-{i}-{next(self._ids):05d}", ns, labels, started, template=obj["spec"]["template"]
                )

    def _put_pod(self, name: str, ns: str, labels: dict, started: str, *, template: dict | None = None) -> None:
        # A pod is made from its Job's pod template: the template's annotations and spec (its
        # containers: kubectl logs picks the container from them), plus what the controllers add.
        template = template or {}
        annotations = {
            **((template.get("metadata") or {}).get("annotations") or {}),
            COMPLETION_INDEX: labels[COMPLETION_INDEX],
        }
        if RESTART_ATTEMPT in labels:
            annotations[RESTART_ATTEMPT] = labels[RESTART_ATTEMPT]
        spec = copy.deepcopy(template.get("spec") or {"containers": [{"name": "worker"}]})
        self.objects[("pods", ns, name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "annotations": annotations,
                "creationTimestamp": started,
                "uid": f"uid-{next(self._ids)}",
            },
            "spec": spec,
            "status": {
                "phase": "Running",
                "conditions": [],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "ready": True,
                        "restartCount": 0,
                        "containerID": f"containerd://{next(self._ids):064x}",
                        "state": {"running": {"startedAt": started}},
                    }
                    for c in spec.get("containers") or []
                ],
            },
        }

    def _ordered_pods(self, key: tuple[str, str, str]) -> list[dict]:
        """The live pods of a JobSet or Job, in process order (job index, completion index)."""
        resource, ns, name = key
        owner_label = JOBSET_NAME if resource == "jobsets" else "job-name"
        return sorted(
            (
                o
                for k, o in self.objects.items()
                if k[0] == "pods"
                and k[1] == ns
                and o["metadata"]["labels"].get(owner_label) == name
                and "deletionTimestamp" not in o["metadata"]
            ),
            key=lambda p: (
                int(p["metadata"]["labels"].get(JOB_INDEX, "0")),
                int(p["metadata"]["labels"][COMPLETION_INDEX]),
            ),
        )

    def pods(self, owner: str) -> list[dict]:
        """The pods of a JobSet or Job, by name."""
        with self._lock:
            return sorted(
                (
                    copy.deepcopy(o)
                    for (r, _, _), o in self.objects.items()
                    if r == "pods"
                    and owner in (o["metadata"]["labels"].get(JOBSET_NAME), o["metadata"]["labels"].get("job-name"))
                ),
                key=lambda p: p["metadata"]["name"],
            )


def pod_exit_of(pod: dict, code: int, disrupted: bool) -> policy.PodExit:
    """What the policy engine is told of ``pod``'s first container ending with ``code``."""
    labels = pod["metadata"]["labels"]
    return policy.PodExit(
        pod=f"{pod['metadata']['namespace']}/{pod['metadata']['name']}",
        job=labels["job-name"],
        exit_code=code,
        container=pod["status"]["containerStatuses"][0]["name"],
        replicated_job=labels.get(RJOB_NAME),
        disrupted=disrupted,
    )
