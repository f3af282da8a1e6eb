"""Kubernetes object names, checked before they go into an API path.

Why a module of its own: the names the controller acts on come from metric labels
(a rule's ``node``, ``namespace``, ``pod`` and ``pool``), and a label value can be
anything. Quoting it keeps it one path segment, but a name that Kubernetes itself
would never give an object still reaches the server: ``n1/status`` once reached the
node's ``status`` subresource, and ``..`` or ``%2F`` are for proxies and the server's
path cleaning to interpret. So a name is held to the API server's own rules
(apimachinery's ``IsDNS1123Subdomain`` and ``IsDNS1123Label``) before any call is
made, in two places that share these checks: the executor refuses a decision whose
target names something no object could be called (an ``Outcome`` "failed", no API
call at all), and ``ClientKube`` and ``DryRunKube`` refuse to build a path from a bad
name whoever asks (``InvalidName``, which the actions already report as a failed
API call).

- Namespaces are RFC 1123 labels: at most 63 lower-case letters, digits and ``-``,
  starting and ending with a letter or digit.
- Nodes, pods, Jobs, Leases and custom resources (Cluster API MachineDeployments and
  Machines, hence pools) are RFC 1123 subdomains: at most 253 characters, labels
  as above joined by ``.``.

A device (``nvidia0``) is not a Kubernetes object: the rules name it by a metric
label, the API never sees it, and it is not checked here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from autoscaler.kube.errors import Invalid

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# What each kind of name must be; a kind not listed is a subdomain (the rule for
# almost every object name, custom resources included).
LABEL_KINDS = frozenset({"namespace"})
# The keys of a Decision's target that name an API object, and the kind each names.
TARGET_KINDS: dict[str, str] = {
    "node": "node",
    "namespace": "namespace",
    "pod": "pod",
    "pool": "pool",
}


class InvalidName(Invalid):
    """A name that no Kubernetes object can have; refused before any request.
    ``status`` 0: the server never saw it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=0, reason="InvalidName")


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:60] + "...")


def label_problem(value: str) -> str | None:
    """Why ``value`` is not an RFC 1123 label, or None."""
    if not value:
        return "is empty"
    if len(value) > LABEL_MAX:
        return f"is {len(value)} characters long (at most {LABEL_MAX})"
    if not _LABEL.match(value):
        return (
            "must be lower-case letters, digits and '-', "
            "starting and ending with a letter or digit (an RFC 1123 label)"
        )
    return None


def subdomain_problem(value: str) -> str | None:
    """Why ``value`` is not an RFC 1123 subdomain, or None."""
    if not value:
        return "is empty"
    if len(value) > SUBDOMAIN_MAX:
        return f"is {len(value)} characters long (at most {SUBDOMAIN_MAX})"
    if not _SUBDOMAIN.match(value):
        return (
            "must be lower-case letters, digits, '-' and '.', starting and ending with "
            "a letter or digit (an RFC 1123 subdomain)"
        )
    return None


def name_problem(kind: str, value: object) -> str | None:
    """Why ``value`` cannot name a ``kind`` (``node``, ``namespace``, ``pod``...),
    as a sentence that names both; None when it can."""
    if not isinstance(value, str):
        return f"{kind} name {value!r} is not a string"
    why = label_problem(value) if kind in LABEL_KINDS else subdomain_problem(value)
    if why is None:
        return None
    return f"{kind} name {_shown(value)} is not a valid Kubernetes name: it {why}"


def check(kind: str, value: str) -> str:
    """``value`` when it can name a ``kind``; ``InvalidName`` otherwise."""
    problem = name_problem(kind, value)
    if problem is not None:
        raise InvalidName(problem)
    return value


def target_problems(target: Mapping[str, str]) -> list[str]:
    """Every reason a Decision's target cannot be acted on through the API: each of
    its ``node``, ``namespace``, ``pod`` and ``pool`` that is present must be a
    valid name. An absent or empty one is left to the action, which says what its
    target lacks (and ``ClientKube`` refuses an empty name all the same)."""
    problems = []
    for key, kind in TARGET_KINDS.items():
        if target.get(key):
            problem = name_problem(kind, target[key])
            if problem is not None:
                problems.append(problem)
    return problems


__all__ = [
    "LABEL_MAX",
    "SUBDOMAIN_MAX",
    "TARGET_KINDS",
    "InvalidName",
    "check",
    "label_problem",
    "name_problem",
    "subdomain_problem",
    "target_problems",
]
