"""The click options that several commands share (one definition, one help text each)."""

from __future__ import annotations

import click

SET_HELP = (
    "Override a spec field: --set key.path=value (repeatable; escape dots in keys "
    "as '\\.', e.g. --set resources.limits.memory=64Gi)."
)


skip_fit_option = click.option(
    "--skip-fit-check",
    is_flag=True,
    help="Do not compare the workers' requests with the cluster's nodes before submitting: for an "
    "account that may not list nodes, or a node pool scaled to zero that would hold the job "
    '(docs/kubernetes.md, "Fit check").',
)
schema_option = click.option(
    "--schema/--no-schema",
    default=True,
    show_default=True,
    help="Check built-in kinds against the official Kubernetes schema (needs kubernetes-validate).",
)
version_option = click.option(
    "--kubernetes-version",
    default="1.30.0",
    show_default=True,
    help="Kubernetes version whose schema to check against.",
)
set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=SET_HELP)


context_option = click.option(
    "--context", default=None, help="kubeconfig context (Kubernetes only; default: the current one)."
)
namespace_option = click.option(
    "-n", "--namespace", default=None, help="Kubernetes namespace (Kubernetes only; default: the context's)."
)


container_option = click.option(
    "-c",
    "--container",
    default=None,
    help="Another container of the worker's pod than the worker, e.g. the GCS FUSE sidecar "
    "gke-gcsfuse-sidecar (Kubernetes only; an unknown name lists the pod's containers).",
)


pod_option = click.option(
    "-p",
    "--pod",
    "--process",
    "process",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which worker's pod: its JAX process id (on a JobSet, slice * hosts_per_slice + completion index).",
)


poll_option = click.option(
    "--poll", type=click.FloatRange(min=0.1), default=2.0, show_default=True, help="Seconds between status checks."
)
