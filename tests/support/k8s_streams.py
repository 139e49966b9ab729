"""The exec and portforward subresources of the simulated API server, over WebSocket.

What a client meets (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/
#get-connect-exec-of-pod and #get-connect-portforward-of-pod; the framing of
k8s.io/apimachinery/pkg/util/httpstream/wsstream, "channel.k8s.io"):

* the client asks for an upgrade (``GET`` with ``Upgrade: websocket``, RFC 6455) offering
  sub-protocols in order of preference; the server takes the first it supports
  (exec: ``v5.channel.k8s.io``, ``v4.channel.k8s.io``; portforward: ``v4.channel.k8s.io``,
  as the kubelet's portforward websocket handler) and refuses with 400 when it supports none;
* every binary message is one channel byte then data. exec: 0 stdin, 1 stdout, 2 stderr,
  3 error: one ``metav1.Status`` JSON when the command has ended (``Success``, or
  ``Failure`` / ``NonZeroExitCode`` with a cause ``ExitCode`` whose message is the code);
  v5 adds 255, a client's "close this channel". portforward: channel 0 data, channel 1
  error, each first sent a frame of the port (two bytes, little-endian);
* then the server closes the WebSocket (close code 1000).

The WebSocket protocol itself is wsproto's (python-hyper), not ours.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import threading
from collections.abc import Callable, Sequence

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
)

EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
PORTFORWARD_PROTOCOLS = ("v4.channel.k8s.io",)
STDOUT, STDERR, ERROR = 1, 2, 3


def exit_status(code: int, command: Sequence[str]) -> dict:
    """The error channel's Status for an ended command (the kubelet's words for a non-zero code)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
        f"[{' '.join(command)}], exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class Session:
    """One upgraded connection: sends channel frames; a thread-safe writer."""

    def __init__(self, connection: socket.socket, ws: WSConnection, protocol: str):
        self.connection, self.ws, self.protocol = connection, ws, protocol
        self._lock = threading.Lock()
        self.closed = False

    def send(self, channel: int, data: bytes) -> None:
        with self._lock:
            if not self.closed:
                self.connection.sendall(self.ws.send(BytesMessage(data=bytes([channel]) + data)))

    def receive(self, timeout: float | None = None) -> list[tuple[int, bytes]] | None:
        """The channel frames that arrived (waiting up to ``timeout``); None once the client
        closed or the connection ended."""
        pending = getattr(self.connection, "pending", lambda: 0)()
        if not pending:
            ready, _, _ = select.select([self.connection], [], [], timeout)
            if not ready:
                return []
        try:
            data = self.connection.recv(1 << 16)
        except OSError:
            data = b""
        with self._lock:
            self.ws.receive_data(data or None)
            frames: list[tuple[int, bytes]] = []
            ended = not data
            for event in self.ws.events():
                if isinstance(event, BytesMessage) and event.data:
                    frames.append((event.data[0], bytes(event.data[1:])))
                elif isinstance(event, Ping):
                    self.connection.sendall(self.ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    if not self.closed:
                        self.connection.sendall(self.ws.send(event.response()))
                        self.closed = True
                    ended = True
        return None if ended and not frames else frames

    def close(self) -> None:
        """A normal close (1000); waits briefly for the client's close frame."""
        with self._lock:
            if self.closed:
                return
            with contextlib.suppress(OSError):
                self.connection.sendall(self.ws.send(CloseConnection(code=1000)))
            self.closed = True
        for _ in range(20):
            with contextlib.suppress(OSError):
                if self.receive(timeout=0.1) is None:
                    break


def accept(
    connection: socket.socket, path: str, headers: list[tuple[str, str]], supported: Sequence[str]
) -> Session | None:
    """The server's side of the handshake: a Session, or None after answering 400 when the
    client offers no supported sub-protocol (as wsstream refuses it)."""
    ws = WSConnection(ConnectionType.SERVER)
    ws.initiate_upgrade_connection([(k.encode(), v.encode()) for k, v in headers], path)
    request = next(e for e in ws.events() if isinstance(e, Request))
    offered = [p.strip() for p in request.subprotocols]
    chosen = next((p for p in offered if p in supported), None)
    if chosen is None:
        body = json.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"requested protocol(s) are not supported: {offered}; supports {list(supported)}",
                "reason": "BadRequest",
                "code": 400,
            }
        ).encode()
        connection.sendall(
            ws.send(
                RejectConnection(
                    status_code=400,
                    headers=[(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                    has_body=True,
                )
            )
            + ws.send(RejectData(data=body))
        )
        return None
    connection.sendall(ws.send(AcceptConnection(subprotocol=chosen)))
    return Session(connection, ws, chosen)


class ConnectionLost(Exception):
    """Raised by an exec runner: the connection ends after ``output`` on stdout, with no Status
    and no close frame, as a client sees it when the API server, the kubelet or a proxy between
    them goes away mid-command (RFC 6455 section 7.1.5: closed abnormally, code 1006)."""

    def __init__(self, output: bytes = b""):
        super().__init__("connection lost")
        self.output = output


def serve_exec(session: Session, command: Sequence[str], run: Callable[[Sequence[str]], subprocess.Popen]) -> None:
    """Runs ``command`` through ``run`` (a Popen with stdout and stderr pipes), streams its
    output on channels 1 and 2 as it comes, then its Status on channel 3, then closes. A
    runner raising :class:`ConnectionLost` ends the connection there, without Status or close."""
    try:
        process = run(command)
    except ConnectionLost as lost:
        if lost.output:
            session.send(STDOUT, lost.output)
        with session._lock:
            session.closed = True
            with contextlib.suppress(OSError):
                session.connection.shutdown(socket.SHUT_RDWR)
        return
    except OSError as err:  # the runtime's answer for a missing executable
        session.send(
            ERROR,
            json.dumps(
                {
                    "metadata": {},
                    "status": "Failure",
                    "reason": "InternalError",
                    "message": f"OCI runtime exec failed: exec failed: unable to start container process: "
                    f'exec: "{command[0]}": {err.strerror}: unknown',
                }
            ).encode(),
        )
        session.close()
        return

    def pump(stream, channel: int) -> None:
        for chunk in iter(lambda: stream.read1(1 << 16), b""):
            session.send(channel, chunk)

    pumps = [
        threading.Thread(target=pump, args=(process.stdout, STDOUT), daemon=True),
        threading.Thread(target=pump, args=(process.stderr, STDERR), daemon=True),
    ]
    for thread in pumps:
        thread.start()
    for thread in pumps:
        thread.join()
    code = process.wait()
    session.send(ERROR, json.dumps(exit_status(code, command)).encode())
    session.close()


def serve_portforward(session: Session, port: int, target: tuple[str, int] | None, refused: str) -> None:
    """Opens both channels with the port number, then copies channel 0 to and from a TCP
    connection to ``target`` (the pod's port); no listener there (``target`` None or the
    connection refused): ``refused`` on channel 1, then close."""
    opening = port.to_bytes(2, "little")
    session.send(0, opening)
    session.send(1, opening)
    upstream = None
    if target is not None:
        with contextlib.suppress(OSError):
            upstream = socket.create_connection(target, timeout=5)
    if upstream is None:
        session.send(1, refused.encode())
        session.close()
        return
    with upstream:
        upstream.settimeout(None)

        def downstream() -> None:  # the pod's answer to the client
            for chunk in iter(lambda: _recv(upstream), b""):
                session.send(0, chunk)
            session.close()

        thread = threading.Thread(target=downstream, daemon=True)
        thread.start()
        while not session.closed:
            frames = session.receive(timeout=0.2)
            if frames is None:
                break
            for channel, data in frames:
                if channel == 0 and data:
                    upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)
        thread.join(timeout=5)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 16)
    except OSError:
        return b""
