"""Run gcp-storage-emulator with the object generation in media download headers.

    python tests/_ckpt_gcs_emulator.py start -H 127.0.0.1 --port PORT --default-bucket B --in-memory

Real GCS answers every object download with ``x-goog-generation``. The emulator
(gcp-storage-emulator 2026.7.19) leaves it out, and TensorStore's GCS driver takes the
generation of a ranged read from that header: without it the generation is 0, which
TensorStore rejects as "Malformed StorageGeneration" when it next writes that object
conditionally -- which it does for every OCDBT manifest update after the first, so
Orbax saves of more than a few arrays fail. This wrapper adds the header (and
``x-goog-metageneration``) to the emulator's download handler, then runs its CLI.
"""

from __future__ import annotations

import sys

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


if __name__ == "__main__":
    if not patch():
        sys.exit("could not find the emulator's download handler to patch")
    from gcp_storage_emulator.__main__ import main

    main(sys.argv[1:])
