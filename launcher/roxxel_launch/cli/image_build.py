"""The ``image`` command group: build the worker image, or the user's code on top of it."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def image() -> None:
    """Build the worker image, or your own code on top of it, with podman or docker."""


@image.command("build")
@click.option(
    "--accelerator",
    type=click.Choice(["cpu", "tpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="The JAX variant (the Dockerfile's ACCELERATOR build argument).",
)
@click.option(
    "--tag",
    default=None,
    help="The image's name (default: roxxel/worker:ACCELERATOR; with --context, roxxel/DIRNAME:ACCELERATOR).",
)
@click.option(
    "--base",
    default=None,
    help="The image to build on: the worker image's Python base (default: the Dockerfile's "
    "python:3.11-slim-bookworm; docker/make-base.sh makes a local one), or, with "
    "--context, the worker image (default: roxxel/worker:ACCELERATOR).",
)
@click.option(
    "--context",
    "context_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Build your code in DIR into an image FROM the worker image (DIR is copied to "
    "its working directory, /home/roxxel) instead of building the worker image.",
)
@click.option("--push", is_flag=True, help="Push the tag after the build.")
@click.option(
    "--source",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Roxxel's source tree with the Dockerfile (default: the one roxxel-launch is "
    "installed from, else the working directory or a parent).",
)
@click.option(
    "--engine",
    type=click.Choice(["podman", "docker"]),
    default=None,
    help="Build with this engine (default: $ROXXEL_CONTAINER_ENGINE, else podman, else docker).",
)
@click.option(
    "--pip-cert",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    envvar="PIP_CERT",
    help="A CA bundle for pip's downloads in the build (behind a TLS-intercepting proxy), "
    "passed as a build secret and kept in no layer (default: $PIP_CERT).",
)
@click.option("--dry-run", is_flag=True, help="Print the commands, run nothing.")
def image_build(
    accelerator: str,
    tag: str | None,
    base: str | None,
    context_dir: Path | None,
    push: bool,
    source: Path | None,
    engine: str | None,
    pip_cert: str | None,
    dry_run: bool,
) -> None:
    """Build the worker image (or, with --context, your code on it); print the size and largest layers."""
    from roxxel_launch import image as images

    try:
        chosen = engine if dry_run and engine else images.find_engine(engine)
        if context_dir is not None:
            build = images.user_build(chosen, accelerator=accelerator, context=context_dir, tag=tag, base=base)
        else:
            build = images.worker_build(
                chosen,
                accelerator=accelerator,
                source=source or images.find_source(),
                tag=tag,
                base=base,
                pip_cert=pip_cert,
            )
        images.run_build(build, push=push, dry_run=dry_run, echo=click.echo)
    except images.ImageError as err:
        raise click.ClickException(str(err)) from err
