"""A job spec loaded from the command line and its manifests rendered and checked; each
failure becomes one click error line (exit 1)."""

from __future__ import annotations

import click


def load_spec_arg(spec_path: str, overrides: tuple[str, ...]):
    from roxxel_launch.spec import SpecError, load_spec

    try:
        return load_spec(spec_path, overrides)
    except SpecError as err:
        raise click.ClickException(f"invalid job spec: {err}") from err


def check_manifests(spec, schema: bool, kubernetes_version: str, *, cluster: bool = True):
    from roxxel_launch.render import render
    from roxxel_launch.spec import SpecError
    from roxxel_launch.validate import ManifestError, validate

    try:
        rendered = render(spec, cluster=cluster)
    except SpecError as err:
        raise click.ClickException(f"invalid job spec: {err}") from err
    try:
        validate(rendered.objects, schema=schema, kubernetes_version=kubernetes_version)
    except ManifestError as err:
        raise click.ClickException(str(err)) from err
    return rendered


def render_and_check(spec_path: str, overrides: tuple[str, ...], schema: bool, kubernetes_version: str):
    return check_manifests(load_spec_arg(spec_path, overrides), schema, kubernetes_version)
