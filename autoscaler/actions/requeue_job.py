"""``requeue_job``: delete a pod that has stopped making progress (timed out, or
stalled with its device idle) so that its owner starts it again, up to a limit.

Deleting, not evicting: the pod is the problem, not the node, and its
PodDisruptionBudget exists to protect healthy replicas, not to keep a hung one
holding a device. ``maxRequeues`` stops a job that hangs every time from cycling
forever (the count lives in an ``accel-fleet.io/`` annotation on the owner), and
``backoff`` spaces the requeues of one job. There is nothing to undo, so a rule
with this action has no ``recover``.

Targets: ``pod``.

Parameters:

===============  ===========================================  =======
``maxRequeues``  requeues per job before giving up (>= 0)     ``3``
``backoff``      least time between two requeues of a job     ``1m``
                 (duration)
===============  ===========================================  =======
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    param,
    param_keys,
    to_params,
)

NAME = "requeue_job"
TARGETS = ("pod",)


@dataclass(frozen=True)
class RequeueJobParams:
    max_requeues: int = param("maxRequeues", 3)
    backoff: float = param("backoff", 60.0)


DEFAULTS = RequeueJobParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(RequeueJobParams))
    params = RequeueJobParams(
        max_requeues=r.integer("maxRequeues", DEFAULTS.max_requeues, minimum=0),
        backoff=r.duration("backoff", DEFAULTS.backoff),
    )
    return to_params(params), r.problems


SPEC = ActionSpec(NAME, TARGETS, reversible=False, params_type=RequeueJobParams, validate=validate)
