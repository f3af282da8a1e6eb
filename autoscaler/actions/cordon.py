"""``cordon``: mark a node unschedulable, so that no new pod lands on it while
running pods stay where they are.

The gentlest action: for a device that misbehaves but still runs its jobs, keeping
new work away is often all that is wanted. Kubernetes cannot cordon a single
device, so a ``device`` target cordons the device's node. A rule's ``recover``
block undoes it (uncordon), and only on nodes this controller cordoned.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.actions.base import ActionSpec, ParamProblem, ParamReader, param_keys, to_params
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.nodes import node_step, undo
from autoscaler.actions.ops.unknown import answering_unknown
from autoscaler.decision import Decision

NAME = "cordon"
TARGETS = ("node", "device")


@dataclass(frozen=True)
class CordonParams:
    """No parameters: the node is unschedulable or it is not."""


DEFAULTS = CordonParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(CordonParams))
    return to_params(DEFAULTS), r.problems


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    """Act: set ``spec.unschedulable`` (recording whether we did, or found it so).
    Recover: undo it, only if we did it."""
    if decision.kind == "recover":
        return await undo(ctx, decision)
    return await node_step(ctx, decision, phase="cordoned", cordon=True, reason="Cordoned")


SPEC = answering_unknown(
    ActionSpec(
        NAME, TARGETS, reversible=True, params_type=CordonParams, validate=validate, execute=execute
    )
)
