"""The HTTP side of the simulated API server: a ``BaseHTTPRequestHandler`` that parses each
request, asks ``FakeKubernetes.answer`` and writes the answer as the API server does — JSON
with ``Warning`` headers (https://www.rfc-editor.org/rfc/rfc7234#section-5.5), chunked
streams for logs and watches, plain text, dropped connections, and the WebSocket upgrade of
exec and port-forward (``k8s_streams``).
"""

from __future__ import annotations

import http.server
import json
from typing import TYPE_CHECKING, Any

from support import k8s_streams
from support.k8s_sim.request import Request

if TYPE_CHECKING:
    from support.k8s_sim.server import FakeKubernetes


class ApiHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeKubernetes

    def log_message(self, format, *args):  # noqa: A002 - quiet: tests read fake.requests instead
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(self.command, self.path, body)
        request.content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        request.accept = self.headers.get("Accept") or ""
        request.headers = list(self.headers.items())
        code, payload = self.server_fake.answer(request, self.headers.get("Authorization"))
        if self._serve_client_side(code, payload):
            return
        if isinstance(payload, tuple) and payload[0] == "stream":
            _, ns, pod, follow, previous, key = payload
            self._stream(
                code, "text/plain", lambda write: self.server_fake.stream_log(ns, pod, follow, write, previous, key)
            )
            return
        if isinstance(payload, tuple) and payload[0] == "upgrade":
            self._upgrade(request, payload)
            return
        data = json.dumps(payload).encode()
        self.send_response(code)
        for warning in request.warnings:  # https://www.rfc-editor.org/rfc/rfc7234#section-5.5
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _upgrade(self, request: Request, payload: tuple) -> None:
        """The connection becomes a WebSocket session of exec or portforward (``k8s_streams``)."""
        self.close_connection = True
        self.wfile.flush()
        if payload[1] == "exec":
            session = k8s_streams.accept(self.connection, self.path, request.headers, k8s_streams.EXEC_PROTOCOLS)
            if session is not None:
                k8s_streams.serve_exec(session, payload[2], payload[3])
        else:
            session = k8s_streams.accept(self.connection, self.path, request.headers, k8s_streams.PORTFORWARD_PROTOCOLS)
            if session is not None:
                k8s_streams.serve_portforward(session, payload[2], payload[3], payload[4])

    def _stream(self, code: int, content_type: str, produce) -> None:
        """A chunked response whose chunks ``produce(write)`` writes; when ``produce`` returns
        False the stream is dropped (no terminating chunk), as a broken connection would."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        try:
            if produce(write) is False:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # broken pipe, reset, or over TLS an SSLEOFError
            self.close_connection = True  # the client stopped reading

    def _serve_client_side(self, code: int, payload: Any) -> bool:
        """Answers that are not a plain JSON body: raw text, a dropped connection, an
        answer with headers (429 + Retry-After), a watch stream. False for anything else."""
        if not isinstance(payload, tuple):
            return False
        if payload[0] == "raw":  # plain text, not a Status
            data = payload[1]
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return True
        if payload[0] == "drop":  # the connection closes with no answer (a reset, a proxy)
            self.close_connection = True
            self.connection.shutdown(2)
            return True
        if payload[0] == "headers":
            _, body, headers = payload
            data = json.dumps(body).encode()
            self.send_response(code)
            for key, value in {"Content-Type": "application/json", "Content-Length": str(len(data)), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            return True
        if payload[0] == "watch":  # ("watch", request): kubectl's and the launcher's
            self._stream(code, "application/json", lambda write: self.server_fake.stream_watch(payload[1], write))
            return True
        return False

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve
