"""Run gcp-storage-emulator with the object generation in media download headers.

    python tests/support/gcs_emulator.py start -H 127.0.0.1 --port PORT --default-bucket B --in-memory

Real GCS answers every object download with ``x-goog-generation``. The emulator
(gcp-storage-emulator 2026.7.19) leaves it out, and TensorStore's GCS driver takes the
generation of a ranged read from that header: without it the generation is 0, which
TensorStore rejects as "Malformed StorageGeneration" when it next writes that object
conditionally -- which it does for every OCDBT manifest update after the first, so
Orbax saves of more than a few arrays fail. This wrapper adds the header (and
``x-goog-metageneration``) to the emulator's download handler, then runs its CLI.

Real GCS also serves a bucket's storage layout (``GET /storage/v1/b/BUCKET/storageLayout``,
https://cloud.google.com/storage/docs/json_api/v1/buckets/getStorageLayout), which
``gcloud storage cp`` reads before every upload to a bucket; the emulator answers 404, so
gcloud gives up with "HTTPError 404". This wrapper serves it: a flat namespace (no
hierarchical namespace), in the bucket's location.

``gcloud storage cp`` sends small files as one multipart upload whose boundary is quoted
with single quotes (``boundary='===...=='``). GCS accepts it; the emulator's MIME parser
(Python's ``email``, which follows RFC 2045 and strips only double quotes) then sees no
parts and fails the upload with a dropped connection. This wrapper re-quotes the boundary
with double quotes before the body is parsed.

Real GCS honours generation preconditions on uploads and deletes
(``ifGenerationMatch``, https://cloud.google.com/storage/docs/request-preconditions:
``0`` means "only if the object does not exist"; a mismatch answers 412 Precondition
Failed). The emulator ignores them; this wrapper checks them for simple and multipart
uploads and for deletes, which the checkpoint writer lease relies on.

Fault injection, for the tests of what a save does when the object store fails:
``ROXXEL_GCS_FAULT=STATUS:RATE:PREFIX`` (e.g. ``500:1:faulty/`` or ``503:0.5:faulty/``)
makes the emulator answer STATUS, with the probability RATE, to every write (POST, PUT,
PATCH, DELETE) whose decoded URL contains PREFIX; reads and other writes are served.

Imported, it offers :func:`start` / :func:`stop` / :func:`client_env`, shared by the
checkpoint tests and ``bench/checkpoint.py``.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import time
from http import HTTPStatus
from pathlib import Path
from urllib.parse import unquote

from gcp_storage_emulator import server, settings
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_original_download = objects.download


def download_with_generation(request, response, storage, *args, **kwargs):
    _original_download(request, response, storage, *args, **kwargs)
    try:
        obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    except NotFound:
        return
    response["x-goog-generation"] = str(obj["generation"])
    response["x-goog-metageneration"] = str(obj.get("metageneration", "1"))


def storage_layout(request, response, storage, *args, **kwargs):
    """A bucket's storage layout, as GCS's ``buckets.getStorageLayout`` answers it."""
    bucket = storage.buckets.get(request.params["bucket_name"])
    if bucket is None:
        response.status = HTTPStatus.NOT_FOUND
        return
    response.json(
        {
            "kind": "storage#storageLayout",
            "bucket": bucket["name"],
            "location": bucket.get("location", "US"),
            "locationType": bucket.get("locationType", "multi-region"),
            "hierarchicalNamespace": {"enabled": False},
        }
    )


_SINGLE_QUOTED_BOUNDARY = re.compile(r"boundary='([^']*)'")
_original_read_data = server._read_data


def read_data_with_any_quotes(request_handler, query):
    """The emulator's body parser, after re-quoting a single-quoted multipart boundary."""
    content_type = request_handler.headers.get("Content-Type") or ""
    if content_type.startswith("multipart/") and _SINGLE_QUOTED_BOUNDARY.search(content_type):
        del request_handler.headers["Content-Type"]
        request_handler.headers["Content-Type"] = _SINGLE_QUOTED_BOUNDARY.sub(r'boundary="\1"', content_type)
    return _original_read_data(request_handler, query)


def _generation_mismatch(request, storage, object_id: str | None) -> bool:
    """True when the request's ``ifGenerationMatch`` does not match the object's live generation."""
    wanted = request.query.get("ifGenerationMatch")
    if not wanted or object_id is None:
        return False
    try:
        current = int(storage.get_file_obj(request.params["bucket_name"], object_id)["generation"])
    except NotFound:
        current = 0
    return int(wanted[0]) != current


def _precondition_failed(response) -> None:
    response.status = HTTPStatus.PRECONDITION_FAILED
    response.json({"error": {"code": 412, "message": "At least one of the pre-conditions you specified did not hold."}})


def _upload_name(request) -> str | None:
    if "name" in request.query:
        return request.query["name"][0]
    data = request.data if request.query.get("uploadType") == ["multipart"] else None
    return data["meta"].get("name") if isinstance(data, dict) and isinstance(data.get("meta"), dict) else None


def insert_with_preconditions(request, response, storage, *args, **kwargs):
    if _generation_mismatch(request, storage, _upload_name(request)):
        return _precondition_failed(response)
    return _original_insert(request, response, storage, *args, **kwargs)


def delete_with_preconditions(request, response, storage, *args, **kwargs):
    if _generation_mismatch(request, storage, request.params.get("object_id")):
        return _precondition_failed(response)
    return _original_delete(request, response, storage, *args, **kwargs)


_original_insert = objects.insert
_original_delete = objects.delete


def patch() -> int:
    server._read_data = read_data_with_any_quotes  # Request.data calls it by name
    objects.download = download_with_generation  # objects.get(alt=media) calls it by name
    objects.insert = insert_with_preconditions  # uploads POSTed without /upload call it by name
    layout = rf"^{re.escape(settings.API_ENDPOINT)}/b/(?P<bucket_name>[-.\w]+)/storageLayout$"
    server.HANDLERS = ((layout, {server.GET: storage_layout}), *server.HANDLERS)
    replacements = {
        _original_download: download_with_generation,
        _original_insert: insert_with_preconditions,
        _original_delete: delete_with_preconditions,
    }
    patched = 0
    for _regex, handlers in server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler in replacements:
                handlers[method] = replacements[handler]
                patched += 1
    return patched


TEST_BUCKET = "roxxel-test"
"""The bucket the tests' emulator serves (the ``gcs_emulator`` fixture)."""

FAULT_ENV = "ROXXEL_GCS_FAULT"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def parse_fault(spec: str) -> tuple[HTTPStatus, float, str]:
    """``STATUS:RATE:PREFIX`` -> (status, probability, prefix); ValueError names a bad field."""
    status, rate, prefix = spec.split(":", 2)
    probability = float(rate)
    if not 0 <= probability <= 1 or not prefix:
        raise ValueError(f"{FAULT_ENV}={spec!r}: expected STATUS:RATE:PREFIX with 0 <= RATE <= 1")
    return HTTPStatus(int(status)), probability, prefix


def inject_faults(spec: str) -> None:
    """Make the router answer the faulty writes of ``spec`` with an error (see the module doc)."""
    status, probability, prefix = parse_fault(spec)
    original_handle = server.Router.handle
    chance = random.Random(0)

    def handle(self, method):
        handler = self._request_handler
        method = handler.headers.get("x-http-method-override") or method
        if method in WRITES and prefix in unquote(handler.path) and chance.random() < probability:
            length = int(handler.headers.get("Content-Length") or 0)
            if length:
                handler.rfile.read(length)  # drain the body so the connection stays usable
            body = b'{"error": {"code": %d, "message": "injected fault"}}' % status.value
            handler.send_response(status.value, status.phrase)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        original_handle(self, method)

    server.Router.handle = handle


def start(
    log_path: str | Path, bucket: str, timeout: float = 30, fault: str | None = None
) -> tuple[subprocess.Popen, str]:
    """Run this wrapper on a free loopback port; return the process and its URL.

    Its output goes to ``log_path``: it logs every request, and an unread pipe would stall it.
    ``fault``: a ``STATUS:RATE:PREFIX`` spec of errors to inject (see the module doc).

    Raises:
        RuntimeError: it did not accept connections within ``timeout`` seconds (the log's tail).
    """
    from support.net import free_port  # here: this file also runs as the emulator, without tests/ on its path

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault is not None:
        parse_fault(fault)  # fail here, not in the child
        env[FAULT_ENV] = fault
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "start",
                "-H",
                "127.0.0.1",
                "--port",
                str(port),
                "--default-bucket",
                bucket,
                "--in-memory",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(f"the GCS emulator did not start:\n{Path(log_path).read_text()[-3000:]}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    """Terminate the emulator (kill it after 10 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def client_env(url: str) -> dict[str, str]:
    """What a process that saves or restores needs to reach the emulator (see the fixtures README).

    NO_GCE_CHECK=true avoids minutes of metadata-server probes; GCE_METADATA_HOST points
    them at a closed port.
    """
    return {
        "TENSORSTORE_GCS_HTTP_URL": url,
        "STORAGE_EMULATOR_HOST": url,
        "NO_GCE_CHECK": "true",
        "GCE_METADATA_HOST": "127.0.0.1:1",
    }


if __name__ == "__main__":
    if not patch():
        sys.exit("could not find the emulator's download handler to patch")
    if os.environ.get(FAULT_ENV):
        inject_faults(os.environ[FAULT_ENV])
    from gcp_storage_emulator.__main__ import main

    main(sys.argv[1:])
