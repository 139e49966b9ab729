"""roxxel_launch.spec.owned: every rule of what a spec may not set, with its exact message."""

import pytest

from roxxel_launch import spec as S
from roxxel_launch.spec import owned
from support.specs import spec_dict

TPU = {"tpu": {"type": "v5p", "topology": "2x2x4"}}
GPU = {"gpu": {"type": "nvidia-l4", "count": 1}}
EMPTY = {"empty_dir": {}}
OWN = "uses a key or prefix that roxxel-launch or its controllers own. Pick a key under your own prefix."
IDP = "https://container.googleapis.com/v1/projects/p/locations/us-central2/clusters/c"
FROM_ACCELERATOR = "is set from the accelerator block. Remove it"

# (the rule's field, spec fields that break it, the whole error message)
CASES = [
    (
        "env",
        {"env": {"JOB_COMPLETION_INDEX": "0"}},
        "env.JOB_COMPLETION_INDEX: is set by roxxel-launch. Remove it from env.",
    ),
    (
        "env_refs",
        {"env_refs": {"JOBSET_NAME": {"key": "k", "secret": "s"}}},
        "env_refs.JOBSET_NAME: is already set (by roxxel-launch or in env)",
    ),
    (
        "env_refs",
        {"env": {"FOO": "1"}, "env_refs": {"FOO": {"key": "k", "config_map": "c"}}},
        "env_refs.FOO: is already set (by roxxel-launch or in env)",
    ),
    (
        "node_selectors",
        {"accelerator": GPU, "node_selectors": {"cloud.google.com/gke-accelerator": "x"}},
        f"node_selectors.cloud.google.com/gke-accelerator: {FROM_ACCELERATOR} from node_selectors.",
    ),
    (
        "node_selectors",
        {"accelerator": TPU, "node_selectors": {"cloud.google.com/gke-tpu-topology": "2x2x4"}},
        f"node_selectors.cloud.google.com/gke-tpu-topology: {FROM_ACCELERATOR} from node_selectors.",
    ),
    (
        "node_selectors",
        {"queue": "q", "queue_provisioning": {}, "node_selectors": {"cloud.google.com/gke-queued": "false"}},
        "node_selectors.cloud.google.com/gke-queued: is set from queue_provisioning. Remove it from node_selectors.",
    ),
    (
        "resources",
        {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
        f"resources.limits.nvidia.com/gpu: {FROM_ACCELERATOR}; set accelerator.tpu or accelerator.gpu.count instead.",
    ),
    (
        "resources",
        {"resources": {"requests": {"google.com/tpu": "4"}}},
        f"resources.requests.google.com/tpu: {FROM_ACCELERATOR}; set accelerator.tpu or accelerator.gpu.count instead.",
    ),
    ("labels", {"labels": {"roxxel.dev/run": "x"}}, f"labels.roxxel.dev/run: {OWN}"),
    ("labels", {"labels": {"app.kubernetes.io/managed-by": "me"}}, f"labels.app.kubernetes.io/managed-by: {OWN}"),
    (
        "annotations",
        {"annotations": {"kubectl.kubernetes.io/default-container": "x"}},
        f"annotations.kubectl.kubernetes.io/default-container: {OWN}",
    ),
    ("annotations", {"annotations": {"jobset.sigs.k8s.io/x": "y"}}, f"annotations.jobset.sigs.k8s.io/x: {OWN}"),
    (
        "metadata.labels",
        {"queue": "q", "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}},
        "metadata.labels.kueue.x-k8s.io/queue-name: is set from queue. Set queue instead.",
    ),
    (
        "metadata.labels",
        {"metadata": {"labels": {"kueue.x-k8s.io/priority-class": "hi"}}},
        "metadata.labels.kueue.x-k8s.io/priority-class: is set from workload_priority_class. Set "
        "workload_priority_class instead.",
    ),
    (
        "metadata.labels",
        {"metadata": {"labels": {"roxxel.dev/run-name": "x"}}},
        f"metadata.labels.roxxel.dev/run-name: {OWN}",
    ),
    (
        "metadata.annotations",
        {"queue": "q", "metadata": {"annotations": {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "60"}}},
        "metadata.annotations.provreq.kueue.x-k8s.io/maxRunDurationSeconds: is set from "
        "queue_provisioning.max_run_duration_seconds. Set queue_provisioning.max_run_duration_seconds instead.",
    ),
    (
        "metadata.annotations",
        {"metadata": {"annotations": {"provreq.kueue.x-k8s.io/ValidUntilSeconds": "60"}}},
        "metadata.annotations.provreq.kueue.x-k8s.io/ValidUntilSeconds: is read by Kueue only from a job it "
        "manages (one with queue): it would do nothing. Set queue to your LocalQueue too, or remove it.",
    ),
    (
        "metadata.annotations",
        {"metadata": {"annotations": {"roxxel.dev/spec": "{}"}}},
        f"metadata.annotations.roxxel.dev/spec: {OWN}",
    ),
    (
        "volumes[].name",
        {"volumes": [{"name": "dshm", "mount_path": "/scratch", **EMPTY}]},
        "volumes[0].name: 'dshm' is used by roxxel-launch. Pick another name.",
    ),
    (
        "volumes[].mount_path",
        {"volumes": [{"name": "v", "mount_path": "/dev/shm/", **EMPTY}]},
        "volumes[0].mount_path: '/dev/shm/' is where roxxel-launch mounts a volume of its own. Pick another path.",
    ),
    (
        "volumes[].mount_path",
        {"data": {"pvc": {"claim": "c"}}, "volumes": [{"name": "v", "mount_path": "/data", **EMPTY}]},
        "volumes[0].mount_path: '/data' is where roxxel-launch mounts a volume of its own. Pick another path.",
    ),
    (
        "data.gcsfuse.mount_options",
        {"data": {"gcsfuse": {"bucket": "my-data", "mount_options": ["implicit-dirs", "only-dir:x"]}}},
        "data.gcsfuse.mount_options[1]: 'only-dir:x' is set by roxxel-launch. Use file_cache_mb, its cache fields "
        "(file_cache_for_range_read, parallel_downloads, ...) or only_dir instead.",
    ),
    ("host_network", {"host_network": True}, "host_network: is offered for TPU slices and GPU hosts only. Remove it."),
    (
        "host_network",
        {"accelerator": GPU, "host_network": True, "security": {"profile": "baseline"}},
        "host_network: needs security.profile: privileged (host-network pods break Pod Security baseline, Host "
        "Namespaces, and the TPU and GPU references run them privileged). Set security.profile: privileged, or "
        "remove host_network.",
    ),
    (
        "host_network",
        {"accelerator": TPU, "host_network": True, "security": {"profile": "restricted"}},
        "host_network: needs security.profile: privileged (host-network pods break Pod Security baseline, Host "
        "Namespaces, and the TPU and GPU references run them privileged). Set security.profile: privileged, or "
        "remove host_network.",
    ),
    (
        "data.gcsfuse.identity_provider",
        {
            "accelerator": TPU,
            "num_slices": 2,
            "host_network": False,
            "data": {"gcsfuse": {"bucket": "my-data", "identity_provider": IDP}},
        },
        "data.gcsfuse.identity_provider: is read only for host-network pods (the GCS FUSE CSI driver's "
        "hostNetworkPodKSA opt-in). Remove it, or set host_network: true.",
    ),
    (
        "host_network",
        {"accelerator": TPU, "workload": "indexed-job", "host_network": True},
        "host_network: needs workload: jobset (an indexed-job's headless Service DNS names do not cover "
        "host-network pods)",
    ),
]


@pytest.mark.parametrize(("rule", "fields", "message"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_refused_value_is_named_with_why_and_what_to_do_instead(rule, fields, message):
    with pytest.raises(S.SpecError) as err:
        S.spec_from_dict(spec_dict(**fields))
    assert str(err.value) == message


def test_every_rule_has_a_case():
    def fired(rule, message):
        return any(piece.strip() in message for piece in rule.why.split("{value!r}") if piece.strip())

    untested = [
        (rule.field, rule.why)
        for rule in owned.RULES
        if not any(field == rule.field and fired(rule, message) for field, _, message in CASES)
    ]
    assert not untested, f"rules without a case here: {untested}"


@pytest.mark.parametrize(
    "fields",
    [
        {"env": {"MY_VAR": "1"}, "env_refs": {"TOKEN": {"key": "k", "secret": "s"}}},
        {"accelerator": GPU, "node_selectors": {"cloud.google.com/machine-family": "g2"}},
        {"resources": {"limits": {"cpu": "8", "memory": "32Gi"}}},
        {"labels": {"app.kubernetes.io/name": "lm", "team.example.com/owner": "me"}},
        {"annotations": {"example.com/note": "x"}},
        {"volumes": [{"name": "scratch", "mount_path": "/data", **EMPTY}]},  # /data is free without a data mount
        {"data": {"gcsfuse": {"bucket": "my-data", "mount_options": ["implicit-dirs", "metadata-cache:ttl-secs:-1"]}}},
        {"accelerator": TPU, "host_network": True},
        {"accelerator": GPU, "host_network": False},
        {"accelerator": GPU, "host_network": True},  # the profile then defaults to privileged
        # GCS FUSE on the host network: the driver's hostNetworkPodKSA opt-in is rendered.
        {
            "accelerator": TPU,
            "host_network": True,
            "data": {"gcsfuse": {"bucket": "my-data", "identity_provider": IDP}},
        },
    ],
    ids=lambda fields: "+".join(fields),
)
def test_what_the_launcher_does_not_own_is_allowed(fields):
    S.spec_from_dict(spec_dict(**fields))


def test_refuse_names_the_path_it_is_given():
    with pytest.raises(S.SpecError) as err:
        owned.refuse("labels", "roxxel.dev/x", None, at="labels.roxxel.dev/x")
    assert (err.value.field, err.value.fix) == ("labels.roxxel.dev/x", "Pick a key under your own prefix.")
    owned.refuse("labels", "example.com/x", None)
    with pytest.raises(KeyError, match="no-such-field"):
        owned.refuse("no-such-field", "anything", None)
