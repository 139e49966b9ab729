"""Commands that reach into a worker's pod: ``exec`` and ``port-forward`` (as kubectl's)."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from roxxel_launch.cli import backend_choice
from roxxel_launch.cli.backend_choice import backend_errors, backend_option
from roxxel_launch.cli.options import (
    container_option,
    context_option,
    namespace_option,
    pod_option,
)


@click.command("exec")
@click.argument("name")
@click.argument("command", nargs=-1, metavar="-- COMMAND [ARG]...")
@backend_option
@pod_option
@container_option
@namespace_option
@context_option
@click.pass_context
def exec_command(
    ctx: click.Context,
    name: str,
    command: tuple[str, ...],
    backend_name: str,
    process: int,
    container: str | None,
    namespace: str | None,
    context: str | None,
) -> None:
    """Run a command in a worker's pod, as `kubectl exec` (no shell, no stdin, no TTY).

    Its output is streamed; the exit code is the command's. For example, the GCS FUSE
    sidecar's view of the bucket: roxxel-launch exec NAME -c gke-gcsfuse-sidecar -- ls /data
    """
    if not command:
        raise click.UsageError("give the command after --, e.g. roxxel-launch exec NAME -- nvidia-smi")
    stdout, stderr = sys.stdout.buffer, sys.stderr.buffer

    def sink(stream):
        def write(data: bytes) -> None:
            stream.write(data)
            stream.flush()

        return write

    backend = backend_choice.make_backend(backend_name, namespace=namespace, context=context)
    try:
        with backend_errors():
            code = backend.exec(name, command, process=process, container=container, out=sink(stdout), err=sink(stderr))
    except BrokenPipeError:
        # Whoever read the output stopped (exec ... | head): end quietly, as a program killed by
        # SIGPIPE would (128 + 13), with nothing more written to the closed pipe
        # (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        ctx.exit(141)
    ctx.exit(code)


def _ports(text: str) -> tuple[int, int]:
    """(local, remote) of PORT, LOCAL:REMOTE or :REMOTE (local 0: any free port), as kubectl
    port-forward takes them."""
    local, _, remote = text.rpartition(":") if ":" in text else (text, ":", text)
    try:
        ports = int(local or 0), int(remote)
    except ValueError:
        ports = (-1, -1)
    if not (0 <= ports[0] <= 65535 and 1 <= ports[1] <= 65535):
        raise click.BadParameter(
            f"{text!r} is not PORT, LOCAL:REMOTE or :REMOTE with ports 1-65535 (e.g. 6006 or 8080:6006)",
            param_hint="PORT",
        )
    return ports


@click.command("port-forward")
@click.argument("name")
@click.argument("ports", metavar="PORT[:REMOTE]")
@backend_option
@pod_option
@namespace_option
@context_option
def port_forward(
    name: str, ports: str, backend_name: str, process: int, namespace: str | None, context: str | None
) -> None:
    """Forward a local port to a worker pod's port until Ctrl-C, as `kubectl port-forward`.

    PORT listens on 127.0.0.1:PORT and reaches the same port of the pod; LOCAL:REMOTE maps
    one to the other, :REMOTE picks a free local port. E.g. TensorBoard or the JAX
    profiler of process 0: roxxel-launch port-forward NAME 6006
    """
    local_port, remote_port = _ports(ports)
    backend = backend_choice.make_backend(backend_name, namespace=namespace, context=context)

    def listening(address: str) -> None:
        click.echo(f"forwarding {address} to port {remote_port} of {name}'s process {process}; Ctrl-C stops", err=True)

    with backend_errors(), contextlib.suppress(KeyboardInterrupt):
        backend.port_forward(name, local_port, remote_port, process=process, on_listen=listening)
