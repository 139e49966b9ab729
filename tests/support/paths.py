"""Where the tests' data lives: fixtures, golden manifests, the repository root."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
WORKERS = TESTS / "support" / "workers"
# The JobSet CRD's OpenAPI schema (see fixtures/README.md); manifests are validated against it.
JOBSET_CRD = FIXTURES / "k8s" / "jobset.x-k8s.io_jobsets.yaml"
# Checkov findings the security scan accepts, each with its reason (tests/launcher/test_launch_checkov.py).
CHECKOV_EXCEPTIONS = FIXTURES / "checkov-exceptions.yaml"
