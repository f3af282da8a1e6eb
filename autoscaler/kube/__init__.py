"""The Kubernetes side of the controller: the ``Kube`` protocol, its typed errors,
the client-backed and dry-run implementations, the ownership annotations and the
leader election. Nothing outside this package imports the ``kubernetes`` library."""

from autoscaler.kube.errors import (
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    TooManyRequests,
    Transient,
)
from autoscaler.kube.protocol import VERBS, Kube, Obj

__all__ = [
    "VERBS",
    "Conflict",
    "Forbidden",
    "Invalid",
    "Kube",
    "KubeError",
    "NotFound",
    "Obj",
    "TooManyRequests",
    "Transient",
]
