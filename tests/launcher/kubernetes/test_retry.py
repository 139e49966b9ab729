"""The retry line of the Kubernetes backend (backends/kubernetes/retry.py) says what the API
server said: a ``logs`` read whose node's kubelet does not answer is a 500 whose Status names
the node's address; the line showed only "HTTP 500 Internal Server Error" while it retried
for a minute and a half."""

from __future__ import annotations

import json
import logging

import pytest
from kubernetes.client.exceptions import ApiException

from roxxel_launch.backends.kubernetes.retry import RetryPolicy, describe, retrying


def _error(status: int, reason: str, body) -> ApiException:
    err = ApiException(status=status, reason=reason)
    err.body = body
    return err


KUBELET = (
    'Get "https://127.0.0.1:10250/containerLogs/ns/lm-0/worker": dial tcp 127.0.0.1:10250: connect: connection refused'
)


@pytest.mark.parametrize(
    "body,said",
    [
        (json.dumps({"kind": "Status", "message": KUBELET}).encode(), f"HTTP 500 Internal Server Error: {KUBELET}"),
        (json.dumps({"kind": "Status", "message": "a\n  b"}), "HTTP 500 Internal Server Error: a b"),
        (b"<html>bad gateway</html>", "HTTP 500 Internal Server Error"),
        (None, "HTTP 500 Internal Server Error"),
    ],
)
def test_an_api_error_is_described_with_the_servers_words(body, said):
    assert describe(_error(500, "Internal Server Error", body)) == said


def test_the_retry_line_names_the_servers_message(caplog):
    answers = [_error(500, "Internal Server Error", json.dumps({"message": KUBELET}).encode()), "ok"]

    def call():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    policy = RetryPolicy(deadline=10, sleep=lambda s: None, clock=lambda: 0.0)
    with caplog.at_level(logging.WARNING):
        assert retrying(call, policy, "read logs of Pod ns/lm-0") == "ok"
    assert "connection refused; retry 1 in" in caplog.text
