"""Kubernetes name rules, checked before anything is sent to a cluster.

Each function returns ``None`` when the value is valid and otherwise a sentence that says
what is wrong, so that callers can prefix the field it came from and add the fix. All
patterns use ``re.fullmatch``: a trailing newline never slips through.
"""

from __future__ import annotations

import re

MAX_LABEL = 63
MAX_SUBDOMAIN = 253
# The Job controller appends "-" and 5 random characters to a pod's name; the pod's
# hostname (without the suffix) must also fit, so the rule is name + 6 <= 63.
POD_NAME_SUFFIX = 6

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_ENV_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def dns1123_label_problem(value: str) -> str | None:
    """Namespaces, container and volume names: lower-case alphanumerics and '-', at most 63."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > MAX_LABEL:
        return f"is {len(value)} characters long; the limit is {MAX_LABEL}"
    if not _DNS1123_LABEL.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1123 label: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def dns1035_label_problem(value: str) -> str | None:
    """Service and JobSet names: like a DNS-1123 label but starting with a letter."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > MAX_LABEL:
        return f"is {len(value)} characters long; the limit is {MAX_LABEL}"
    if not _DNS1035_LABEL.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1035 label: use lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return None


def dns1123_subdomain_problem(value: str) -> str | None:
    """Service accounts, priority classes, label-key prefixes: dot-separated DNS-1123 labels."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > MAX_SUBDOMAIN:
        return f"is {len(value)} characters long; the limit is {MAX_SUBDOMAIN}"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return f"{value!r} is not a DNS-1123 subdomain: use lower-case letters, digits, '-' and '.'"
    return None


def label_value_problem(value: str) -> str | None:
    """Label values: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends (may be empty)."""
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > MAX_LABEL:
        return f"is {len(value)} characters long; a label value holds at most {MAX_LABEL}"
    if not _LABEL_VALUE.fullmatch(value):
        return (
            f"{value!r} is not a valid label value: use letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def qualified_name_problem(value: str) -> str | None:
    """Label keys, resource names, taint keys: an optional DNS subdomain prefix and '/', then a name."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    prefix, slash, name = value.rpartition("/")
    if slash:
        problem = dns1123_subdomain_problem(prefix)
        if problem:
            return f"prefix {problem}"
    if len(name) > MAX_LABEL:
        return f"name part is {len(name)} characters long; the limit is {MAX_LABEL}"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return (
            f"{value!r} is not a qualified name: an optional 'prefix/' then letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def env_var_name_problem(value: str) -> str | None:
    """Environment variable names: a C identifier (portable across shells and Python)."""
    if not isinstance(value, str) or not _ENV_VAR_NAME.fullmatch(value):
        return f"{value!r} is not a valid environment variable name: use [A-Za-z_][A-Za-z0-9_]*"
    return None


def pod_name_problem(longest_pod_name: str) -> str | None:
    """The longest generated pod name plus the random suffix must fit in 63 characters."""
    length = len(longest_pod_name) + POD_NAME_SUFFIX
    if length > MAX_LABEL:
        return (
            f"the longest generated pod name {longest_pod_name!r} plus its 6-character random "
            f"suffix is {length} characters; the limit is {MAX_LABEL}"
        )
    return None
