"""``scale_node_pool``: grow or shrink a node pool by ``step`` nodes, within the
pool's own minimum and maximum.

The direction is part of the rule, not inferred: "pending device requests" and
"devices idle for half an hour" are different conditions with different ``for``
and cooldown, so growing and shrinking are two rules, each saying which way it
goes. The pool's bounds come from its provider (Cluster API annotations) when the
action runs, and a step that would cross them is cut short there. There is
nothing to undo: the opposite rule is the undo.

Targets: ``pool``.

Parameters:

=============  ==================================  =========
``direction``  ``up`` or ``down``                  required
``step``       nodes per action (>= 1)             ``1``
=============  ==================================  =========
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    param,
    param_keys,
    to_params,
)

NAME = "scale_node_pool"
TARGETS = ("pool",)
DIRECTIONS = ("up", "down")

Direction = Literal["up", "down"]


@dataclass(frozen=True)
class ScaleNodePoolParams:
    direction: Direction = field(metadata={"key": "direction"})
    step: int = param("step", 1)


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(ScaleNodePoolParams))
    direction = r.choice("direction", DIRECTIONS, None)
    params = ScaleNodePoolParams(
        direction=cast(Direction, direction or "up"),
        step=r.integer("step", 1, minimum=1),
    )
    return to_params(params), r.problems


SPEC = ActionSpec(
    NAME, TARGETS, reversible=False, params_type=ScaleNodePoolParams, validate=validate
)
