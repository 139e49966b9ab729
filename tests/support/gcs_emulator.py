"""Run gcp-storage-emulator with the object generation in media download headers.

    python tests/support/gcs_emulator.py start -H 127.0.0.1 --port PORT --default-bucket B --in-memory

Real GCS answers every object download with ``x-goog-generation``. The emulator
(gcp-storage-emulator 2026.7.19) leaves it out, and TensorStore's GCS driver takes the
generation of a ranged read from that header: without it the generation is 0, which
TensorStore rejects as "Malformed StorageGeneration" when it next writes that object
conditionally -- which it does for every OCDBT manifest update after the first, so
Orbax saves of more than a few arrays fail. This wrapper adds the header (and
``x-goog-metageneration``) to the emulator's download handler, then runs its CLI.

Imported, it offers :func:`start` / :func:`stop` / :func:`client_env`, shared by the
checkpoint tests and ``bench/checkpoint.py``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from gcp_storage_emulator import server
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


def patch() -> int:
    objects.download = download_with_generation  # objects.get(alt=media) calls it by name
    patched = 0
    for _regex, handlers in server.HANDLERS:
        for method, handler in list(handlers.items()):
            if handler is _original_download:
                handlers[method] = download_with_generation
                patched += 1
    return patched


def start(log_path: str | Path, bucket: str, timeout: float = 30) -> tuple[subprocess.Popen, str]:
    """Run this wrapper on a free loopback port; return the process and its URL.

    Its output goes to ``log_path``: it logs every request, and an unread pipe would stall it.

    Raises:
        RuntimeError: it did not accept connections within ``timeout`` seconds (the log's tail).
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen([sys.executable, __file__, "start", "-H", "127.0.0.1", "--port", str(port),
                                 "--default-bucket", bucket, "--in-memory"], stdout=log_file, stderr=subprocess.STDOUT)
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
    return {"TENSORSTORE_GCS_HTTP_URL": url, "STORAGE_EMULATOR_HOST": url,
            "NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:1"}


if __name__ == "__main__":
    if not patch():
        sys.exit("could not find the emulator's download handler to patch")
    from gcp_storage_emulator.__main__ import main

    main(sys.argv[1:])
