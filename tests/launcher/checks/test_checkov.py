"""checkov (an infrastructure-as-code scanner) over the rendered manifests of every example
spec, both workloads, with zero findings outside tests/fixtures/checkov-exceptions.yaml.

checkov does not know the JobSet kind: each replicated job is written as the batch/v1 Job
the JobSet controller will create from it (``validate._child_job``), next to the Service
and NetworkPolicy. All files go into one directory and checkov runs once, offline
(``--skip-download``). No cluster is involved.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from roxxel_launch import render as R
from roxxel_launch import spec as S
from roxxel_launch import validate as V
from support.paths import CHECKOV_EXCEPTIONS
from support.paths import REPO as ROOT

EXAMPLES = sorted((ROOT / "k8s" / "examples").glob("*.yaml"))
EXCEPTIONS = yaml.safe_load(CHECKOV_EXCEPTIONS.read_text())


def _checkov() -> str | None:
    """checkov's command: $ROXXEL_CHECKOV, else on PATH or next to this Python, else the
    repository's .venv-checkov (its own environment: see pyproject.toml, extra `scan`)."""
    if os.environ.get("ROXXEL_CHECKOV"):
        return os.environ["ROXXEL_CHECKOV"]
    return (
        shutil.which("checkov")
        or shutil.which("checkov", path=os.path.dirname(sys.executable))
        or shutil.which("checkov", path=str(ROOT / ".venv-checkov" / "bin"))
    )


def scan_documents(objects) -> list[dict]:
    """Rendered objects as kinds checkov knows: a JobSet becomes its child Jobs."""
    docs = []
    for obj in objects:
        if obj["kind"] == "JobSet":
            docs += [V._child_job(obj, rjob) for rjob in obj["spec"]["replicatedJobs"]]
        else:
            docs.append(obj)
    return docs


def write_rendered_examples(directory: pathlib.Path) -> list[pathlib.Path]:
    paths = []
    for spec_path in EXAMPLES:
        # An indexed job runs one slice, off the host network (refused there: its Service's
        # DNS names do not cover host-network pods).
        indexed = ["workload=indexed-job", "num_slices=1", "host_network=false"]
        for workload, overrides in (("jobset", []), ("indexed-job", indexed)):
            objects = R.render(S.load_spec(spec_path, overrides)).objects
            path = directory / f"{spec_path.stem}-{workload}.yaml"
            path.write_text(yaml.safe_dump_all(scan_documents(objects), sort_keys=False))
            paths.append(path)
    return paths


def _excepted(failure: dict) -> dict | None:
    name = pathlib.Path(failure["file_path"]).name
    for entry in EXCEPTIONS:
        if entry["check"] == failure["check_id"] and (
            not entry.get("files") or any(name.startswith(p) for p in entry["files"])
        ):
            return entry
    return None


def test_every_exception_has_a_reason():
    for entry in EXCEPTIONS:
        assert entry["check"].startswith("CKV") and len(entry["reason"]) > 40, entry


def test_scan_documents_turn_jobsets_into_their_child_jobs():
    objects = R.render(S.load_spec(ROOT / "k8s/examples/tpu-v5p-multislice.yaml")).objects
    docs = scan_documents(objects)
    assert [d["kind"] for d in docs] == ["NetworkPolicy", "Job"]
    assert docs[1]["spec"]["template"] == objects[1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


@pytest.mark.slow
@pytest.mark.skipif(
    _checkov() is None,
    reason="checkov is not installed: python -m venv "
    ".venv-checkov && .venv-checkov/bin/pip install checkov (as .ci/run does), "
    "or set ROXXEL_CHECKOV",
)
def test_checkov_finds_nothing_but_the_documented_exceptions(tmp_path):
    paths = write_rendered_examples(tmp_path)
    result = subprocess.run(
        [
            _checkov(),
            "-d",
            str(tmp_path),
            "--framework",
            "kubernetes",
            "--skip-download",
            "--quiet",
            "--compact",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "BC_API_KEY": ""},
    )
    assert result.stdout.strip(), f"checkov printed nothing (exit {result.returncode}): {result.stderr[-2000:]}"
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failures, used = [], set()
    scanned = 0
    for report in reports:
        scanned += report["summary"]["resource_count"]
        assert report["summary"]["parsing_errors"] == 0, report["summary"]
        for failure in report["results"]["failed_checks"]:
            entry = _excepted(failure)
            if entry is None:
                failures.append(
                    f"{failure['check_id']} {failure['check_name']}: {failure['file_path']} {failure['resource']}"
                )
            else:
                used.add(entry["check"])
    # Each file holds a workload (Job) and a NetworkPolicy; indexed jobs also a Service.
    assert scanned >= 2 * len(paths), f"checkov scanned only {scanned} resources"
    assert failures == [], "checkov findings without a documented exception:\n" + "\n".join(failures)
    stale = {e["check"] for e in EXCEPTIONS} - used
    assert not stale, f"exceptions that no longer match anything; remove them: {sorted(stale)}"
