"""``uncordon``: make a node schedulable again.

As a rule's own action it returns capacity once a condition clears (for example
after a node has been repaired out of band). It only ever touches nodes that this
controller cordoned (recorded in an ``accel-fleet.io/`` annotation): a node that a
person cordoned for maintenance is theirs, and stays cordoned. That ownership
check happens when the action runs; here are its parameters.

Targets: ``node``.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.actions.base import ActionSpec, ParamProblem, ParamReader, param_keys, to_params

NAME = "uncordon"
TARGETS = ("node",)


@dataclass(frozen=True)
class UncordonParams:
    """No parameters."""


DEFAULTS = UncordonParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(UncordonParams))
    return to_params(DEFAULTS), r.problems


SPEC = ActionSpec(NAME, TARGETS, reversible=False, params_type=UncordonParams, validate=validate)
