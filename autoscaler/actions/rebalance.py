"""``rebalance``: move device-using pods off a hot node onto the coolest nodes
that can take them, a few per evaluation.

Moving a training job costs its progress since the last checkpoint, so the action
is deliberately slow: at most ``maxMovesPerCycle`` evictions per evaluation, and
only while the node's utilization exceeds the least-loaded candidate's by
``minUtilizationGap`` (a move that would merely swap which node is hot is not
made). There is nothing to undo, so a rule with this action has no ``recover``.

Targets: ``node``.

Parameters:

=====================  ==============================================  =======
``maxMovesPerCycle``   pods evicted per evaluation (>= 1)              ``1``
``minUtilizationGap``  least utilization difference (0-1) between the  ``0.2``
                       hot node and a destination
=====================  ==============================================  =======
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

NAME = "rebalance"
TARGETS = ("node",)


@dataclass(frozen=True)
class RebalanceParams:
    max_moves_per_cycle: int = param("maxMovesPerCycle", 1)
    min_utilization_gap: float = param("minUtilizationGap", 0.2)


DEFAULTS = RebalanceParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(RebalanceParams))
    params = RebalanceParams(
        max_moves_per_cycle=r.integer("maxMovesPerCycle", DEFAULTS.max_moves_per_cycle, minimum=1),
        min_utilization_gap=r.ratio("minUtilizationGap", DEFAULTS.min_utilization_gap),
    )
    return to_params(params), r.problems


SPEC = ActionSpec(NAME, TARGETS, reversible=False, params_type=RebalanceParams, validate=validate)
