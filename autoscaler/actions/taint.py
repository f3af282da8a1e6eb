"""``taint``: put a taint on a node, so that the scheduler keeps new pods away (or,
with ``NoExecute``, evicts the running ones that do not tolerate it).

A taint says more than a cordon: it names why (``accel-fleet.io/faulty``), and
with ``PreferNoSchedule`` it can merely discourage new work, which suits a device
that is degraded but not dead. Kubernetes taints whole nodes, so a ``device``
target taints the device's node. A rule's ``recover`` block removes the taint.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

=========  ==========================================  ==================================
``taint``  ``key=value:Effect`` or ``key:Effect``;     ``accel-fleet.io/faulty=true:NoSchedule``
           Effect is NoSchedule, PreferNoSchedule or
           NoExecute
=========  ==========================================  ==================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.names import DEFAULT_TAINT
from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    from_params,
    param,
    param_keys,
    read_taint,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.nodes import node_step, undo
from autoscaler.actions.ops.unknown import answering_unknown
from autoscaler.decision import Decision

NAME = "taint"
TARGETS = ("node", "device")


@dataclass(frozen=True)
class TaintParams:
    taint: str = param("taint", DEFAULT_TAINT)


DEFAULTS = TaintParams()


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(TaintParams))
    params = TaintParams(taint=read_taint(r, "taint", DEFAULTS.taint))
    return to_params(params), r.problems


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    """Act: add the taint (recording whether we did, or found it there). Recover:
    remove it, only if we added it."""
    if decision.kind == "recover":
        return await undo(ctx, decision)
    params = from_params(TaintParams, decision.params)
    return await node_step(ctx, decision, phase="tainted", taint=params.taint, reason="Tainted")


SPEC = answering_unknown(
    ActionSpec(
        NAME, TARGETS, reversible=True, params_type=TaintParams, validate=validate, execute=execute
    )
)
