"""Where the tests' data lives: fixtures, golden manifests, the repository root."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
WORKERS = TESTS / "support" / "workers"
# The JobSet CRD's OpenAPI schema (see fixtures/README.md); manifests are validated against it.
JOBSET_CRD = FIXTURES / "k8s" / "jobset.x-k8s.io_jobsets.yaml"
# Older JobSet releases' CRDs (trimmed; see fixtures/README.md), by release tag.
OLD_JOBSET_CRDS = {tag: FIXTURES / "k8s" / f"jobset-{tag}.yaml" for tag in ("v0.8.0", "v0.9.1", "v0.10.0")}
# Checkov findings the security scan accepts, each with its reason (tests/launcher/checks/test_checkov.py).
CHECKOV_EXCEPTIONS = FIXTURES / "checkov-exceptions.yaml"
