"""Commands that need no cluster: ``render``, ``validate`` and ``schema`` work on a job spec alone."""

from __future__ import annotations

import click

from roxxel_launch.cli.options import (
    schema_option,
    set_option,
    version_option,
)
from roxxel_launch.cli.spec_checks import check_manifests, load_spec_arg, render_and_check


@click.command("render")  # the function's own name would shadow roxxel_launch.render.render
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@set_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="Write the manifests to this file instead of standard output.",
)
@schema_option
@version_option
def render_command(
    spec_path: str, overrides: tuple[str, ...], output: str | None, schema: bool, kubernetes_version: str
) -> None:
    """Print the manifests of a job spec, ready for `kubectl apply -f -`."""
    rendered = render_and_check(spec_path, overrides, schema, kubernetes_version)
    if output is None:
        click.echo(rendered.yaml, nl=False)
    else:
        with open(output, "w", encoding="utf-8") as f:
            f.write(rendered.yaml)


@click.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@set_option
@schema_option
@version_option
def validate(spec_path: str, overrides: tuple[str, ...], schema: bool, kubernetes_version: str) -> None:
    """Check a job spec and the manifests it renders, without contacting a cluster."""
    from roxxel_launch.validate import pod_security_line

    spec = load_spec_arg(spec_path, overrides)
    rendered = check_manifests(spec, schema, kubernetes_version)
    kinds = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in rendered.objects)
    click.echo(f"ok: {kinds}")
    click.echo(pod_security_line(rendered.objects, _profile_source(spec)))


def _profile_source(spec) -> str:
    """The spec's Pod Security profile and where it comes from, e.g. "'baseline' (the TPU default)"."""
    if spec.security.profile is not None:
        return f"{spec.security.profile!r} (security.profile)"
    gpu = spec.accelerator.gpu
    what = (
        "host-network pods"
        if spec.uses_host_network
        else "GPU networking presets"
        if gpu is not None and gpu.networking not in (None, "none")
        else spec.accelerator.kind.upper()
    )
    return f"{spec.security_profile!r} (the default for {what})"


@click.command("schema")
def schema_command() -> None:
    """Print the job spec schema (JSON) from which the spec reference is generated."""
    import json

    from roxxel_launch.spec import spec_schema

    click.echo(json.dumps(spec_schema(), indent=2))
