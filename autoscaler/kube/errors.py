"""Typed Kubernetes API errors.

Everything above ``autoscaler/kube/`` sees these, never the client library's
``ApiException``: an action decides what a refusal means (a PodDisruptionBudget
saying "not now" is ``TooManyRequests``; a pod that is already gone is
``NotFound``, which for an eviction is success), and the retry policy decides
what is worth trying again (``Transient`` and ``TooManyRequests`` are, within
bounds; ``Conflict`` is, after re-reading the object; the rest are not).
"""

from __future__ import annotations


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP status (0 for no answer at all),
    ``reason`` the Status object's ``reason`` when the server sent one."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    """404: the object does not exist (any more)."""


class Conflict(KubeError):
    """409: a stale resourceVersion, or an object that already exists
    (``reason == "AlreadyExists"``)."""

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class TooManyRequests(KubeError):
    """429: throttled, or an eviction that a PodDisruptionBudget refuses."""


class Forbidden(KubeError):
    """403: RBAC does not allow the call. Never retried: the Role needs the verb."""


class Invalid(KubeError):
    """422 (or 400): the server refused the object as written."""


class Transient(KubeError):
    """5xx, a dropped connection or a timeout: worth trying again."""


def from_status(status: int, message: str, reason: str = "") -> KubeError:
    """The typed error for an HTTP status."""
    kind: type[KubeError]
    if status == 404:
        kind = NotFound
    elif status == 409:
        kind = Conflict
    elif status == 429:
        kind = TooManyRequests
    elif status in (401, 403):
        kind = Forbidden
    elif status in (400, 422):
        kind = Invalid
    elif status == 0 or status >= 500 or status == 408:
        kind = Transient
    else:
        kind = KubeError
    return kind(message, status=status, reason=reason)


__all__ = [
    "Conflict",
    "Forbidden",
    "Invalid",
    "KubeError",
    "NotFound",
    "TooManyRequests",
    "Transient",
    "from_status",
]
