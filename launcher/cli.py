"""The ``roxxel-launch`` command.

Only click is imported at module level so that ``roxxel-launch --help`` starts fast; each
command imports what it needs (YAML, jinja2, schemas, the kubernetes client).
"""

from __future__ import annotations

import logging
import sys

import click

SET_HELP = ("Override a spec field: --set key.path=value (repeatable; escape dots in keys "
            "as '\\.', e.g. --set resources.limits.memory=64Gi).")


def _load(spec_path: str, overrides: tuple[str, ...]):
    from roxxel_launch.spec import SpecError, load_spec

    try:
        return load_spec(spec_path, overrides)
    except SpecError as err:
        raise click.ClickException(f"invalid job spec: {err}") from err


def _render_and_check(spec_path: str, overrides: tuple[str, ...], schema: bool,
                      kubernetes_version: str):
    from roxxel_launch.render import render
    from roxxel_launch.validate import ManifestError, validate

    rendered = render(_load(spec_path, overrides))
    try:
        validate(rendered.objects, schema=schema, kubernetes_version=kubernetes_version)
    except ManifestError as err:
        raise click.ClickException(str(err)) from err
    return rendered


_schema_option = click.option("--schema/--no-schema", default=True, show_default=True,
                              help="Check built-in kinds against the official Kubernetes "
                                   "schema (needs kubernetes-validate).")
_version_option = click.option("--kubernetes-version", default="1.30.0", show_default=True,
                               help="Kubernetes version whose schema to check against.")
_set_option = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=SET_HELP)


@click.group()
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Render, validate and submit multi-host JAX training jobs on Kubernetes."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@_set_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="Write the manifests to this file instead of standard output.")
@_schema_option
@_version_option
def render(spec_path: str, overrides: tuple[str, ...], output: str | None, schema: bool,
           kubernetes_version: str) -> None:
    """Print the manifests of a job spec, ready for `kubectl apply -f -`."""
    rendered = _render_and_check(spec_path, overrides, schema, kubernetes_version)
    if output is None:
        click.echo(rendered.yaml, nl=False)
    else:
        with open(output, "w", encoding="utf-8") as f:
            f.write(rendered.yaml)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(exists=True, dir_okay=False))
@_set_option
@_schema_option
@_version_option
def validate(spec_path: str, overrides: tuple[str, ...], schema: bool,
             kubernetes_version: str) -> None:
    """Check a job spec and the manifests it renders, without contacting a cluster."""
    rendered = _render_and_check(spec_path, overrides, schema, kubernetes_version)
    kinds = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in rendered.objects)
    click.echo(f"ok: {kinds}")


@cli.command("schema")
def schema_command() -> None:
    """Print the job spec schema (JSON) from which the spec reference is generated."""
    import json

    from roxxel_launch.spec import spec_schema

    click.echo(json.dumps(spec_schema(), indent=2))


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv, prog_name="roxxel-launch")


if __name__ == "__main__":
    sys.exit(main())
