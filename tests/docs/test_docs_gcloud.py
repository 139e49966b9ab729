"""The Google Cloud CLI commands the docs print, run against the storage emulator.

No Google Cloud project is reached here. The store is gcp-storage-emulator
(tests/support/gcs_emulator.py, which serves what ``gcloud storage`` needs of the GCS JSON
API: https://cloud.google.com/storage/docs/json_api), and ``gcloud`` (skipped when it is not
installed) is pointed at it with ``CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE`` and
``auth/disable_credentials`` in a configuration directory of its own
(https://cloud.google.com/sdk/docs/properties). The commands are taken verbatim from the
pages' bash blocks, so what the docs print is what runs: uploading the packed datasets to a
bucket (docs/tutorial.md), and listing the checkpoints a job wrote there, after a real save
by roxxel's Checkpointer to that bucket. gcloud starts slowly (seconds per command): slow.
What the emulator had to learn for gcloud is tested on its own, without gcloud.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from support import docs_blocks
from support.paths import REPO, TESTS, WORKERS

GCLOUD = shutil.which("gcloud")
pytestmark = pytest.mark.timeout(300)


def doc_commands(page: str, prefix: str = "gcloud storage ") -> list[str]:
    """The lines of the page's bash blocks that start with ``prefix`` (continuations joined)."""
    parsed = docs_blocks.parse((REPO / page).read_text(), page)
    commands = []
    for block in parsed.blocks:
        if block.language in ("bash", "sh", "shell"):
            for line in block.code.replace("\\\n", " ").splitlines():
                if line.strip().startswith(prefix):
                    commands.append(" ".join(line.split()))
    return commands


def gcloud_env(url: str, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOUDSDK_") and not k.lower().endswith("_proxy")}
    env.update(
        CLOUDSDK_CONFIG=str(config),
        CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE=f"{url}/",
        CLOUDSDK_AUTH_DISABLE_CREDENTIALS="true",
        CLOUDSDK_CORE_PROJECT="test-project",
        CLOUDSDK_CORE_DISABLE_PROMPTS="1",
        CLOUDSDK_CORE_DISABLE_USAGE_REPORTING="true",
        CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK="true",
    )
    return env


def objects(url: str, bucket: str, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix``, read back through the JSON API."""
    query = urllib.parse.urlencode({"prefix": prefix})
    with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}/o?{query}", timeout=10) as answer:
        names = [item["name"] for item in json.load(answer).get("items", [])]
    found = {}
    for name in names:
        quoted = urllib.parse.quote(name, safe="")
        with urllib.request.urlopen(f"{url}/storage/v1/b/{bucket}/o/{quoted}?alt=media", timeout=10) as answer:
            found[name] = answer.read()
    return found


@pytest.fixture
def emulator(tmp_path):
    pytest.importorskip("gcp_storage_emulator", reason="gcp-storage-emulator is not installed")
    import support.gcs_emulator as wrapper

    proc, url = wrapper.start(tmp_path / "emulator.log", "my-datasets")
    request = urllib.request.Request(
        f"{url}/storage/v1/b?project=test-project",
        method="POST",
        data=json.dumps({"name": "my-checkpoints"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=10).close()
    try:
        yield wrapper, url
    finally:
        wrapper.stop(proc)


def test_the_emulator_answers_what_gcloud_storage_cp_asks_as_gcs_does(emulator):
    """Two requests of ``gcloud storage cp`` that the unpatched emulator failed: the bucket's
    storage layout (https://cloud.google.com/storage/docs/json_api/v1/buckets/getStorageLayout)
    and a multipart upload whose boundary is single-quoted
    (https://cloud.google.com/storage/docs/uploading-objects#uploading-an-object, multipart)."""
    _, url = emulator
    with urllib.request.urlopen(f"{url}/storage/v1/b/my-datasets/storageLayout", timeout=10) as answer:
        layout = json.load(answer)
    assert layout["bucket"] == "my-datasets" and layout["hierarchicalNamespace"] == {"enabled": False}

    boundary = "===============1234=="
    body = (
        f"--{boundary}\nContent-Type: application/json\n\n"
        '{"name": "tutorial/x.rox"}\n'
        f"--{boundary}\nContent-Type: application/octet-stream\n\nsome bytes\n--{boundary}--\n"
    )
    request = urllib.request.Request(
        f"{url}/upload/storage/v1/b/my-datasets/o?uploadType=multipart",
        data=body.encode(),
        method="POST",
        headers={"Content-Type": f"multipart/related; boundary='{boundary}'"},
    )
    urllib.request.urlopen(request, timeout=10).close()
    assert objects(url, "my-datasets", "tutorial/") == {"tutorial/x.rox": b"some bytes"}


@pytest.mark.slow
@pytest.mark.skipif(GCLOUD is None, reason="the Google Cloud CLI is not installed")
def test_the_tutorial_uploads_packed_datasets_and_lists_checkpoints_with_gcloud(emulator, tmp_path):
    wrapper, url = emulator
    commands = doc_commands("docs/tutorial.md")
    uploads = [c for c in commands if c.startswith("gcloud storage cp ")]
    listings = [c for c in commands if c.startswith("gcloud storage ls ")]
    assert uploads == ["gcloud storage cp -r data/code data/text gs://my-datasets/tutorial/"]
    assert listings == ["gcloud storage ls gs://my-checkpoints/tutorial/"]
    env = gcloud_env(url, tmp_path / "gcloud-config")

    # The datasets, packed as the tutorial packs them (from smaller inputs).
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.py").write_text("print('hello')\n" * 50)
    (source / "b.txt").write_text("Some prose.\n" * 80)
    for name, glob in (("code", "*.py"), ("text", "*.txt")):
        subprocess.run(
            [sys.executable, "-m", "roxxel.cli", "pack", str(source), "--include", glob, "-o", f"data/{name}"],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            timeout=120,
        )
    local = {
        f"tutorial/{p.relative_to(tmp_path / 'data')}": p.read_bytes()
        for p in sorted((tmp_path / "data").rglob("*"))
        if p.is_file()
    }
    assert any(name.endswith(".rox") for name in local) and any(name.endswith("dataset.json") for name in local)

    upload = subprocess.run(uploads[0], shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert upload.returncode == 0, upload.stderr
    assert objects(url, "my-datasets", "tutorial/") == local

    # A real save of step 1 by the Checkpointer (as the job's rank 0 does), then the listing.
    saver = subprocess.run(
        [sys.executable, str(WORKERS / "ckpt_gcs_fail_worker.py"), "gs://my-checkpoints/tutorial", "60"],
        env={
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            **wrapper.client_env(url),
            "PYTHONPATH": str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert saver.returncode == 0 and "SAVED" in saver.stdout, saver.stderr[-3000:]
    listing = subprocess.run(
        listings[0], shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert listing.returncode == 0, listing.stderr
    assert "gs://my-checkpoints/tutorial/1/" in listing.stdout.splitlines(), listing.stdout
