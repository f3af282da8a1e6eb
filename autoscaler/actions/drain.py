"""``drain``: cordon a node, then evict its pods through the Eviction API.

Evictions, not deletions: the API server honours PodDisruptionBudgets and answers
429 when a budget would be broken, so a drain can take a while and may not finish;
``drainTimeout`` bounds how long the action keeps trying before it reports the
pods it could not move. DaemonSet pods and mirror pods are left alone, as
``kubectl drain`` does. A ``device`` target drains the device's node. A rule's
``recover`` block undoes the cordon.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

==========================  ===========================================  =========
``drainTimeout``            how long to keep evicting (duration, > 0)    ``10m``
``gracePeriodSeconds``      termination grace period for evicted pods;   pod's own
                            whole number >= 0
``podSelector``             only evict pods matching this label          all pods
                            selector (``app=train,tier!=infra``,
                            ``team in (a,b)``, ``!canary``)
``forceDeleteAfterTimeout`` delete the pods a PDB still protects when    ``false``
                            ``drainTimeout`` passes (true/false)
==========================  ===========================================  =========

Execution: the node is cordoned (recorded in ``accel-fleet.io/remediation`` with
phase ``draining``), then its pods are evicted until none is left or
``drainTimeout`` passes (counted from the recorded start, so a restarted
controller keeps the same deadline). The phase becomes ``drained``, or
``drain-incomplete`` with the pods that stayed. Events: ``DrainStarted`` and
``Drained``/``DrainIncomplete`` on the node, ``Evicted`` on each pod.

Gangs: a member of a gang (``autoscaler/actions/ops/gangs.py``) is never evicted alone;
once the cordon is on, its whole gang restarts once, the way its operator expects,
and the other pods are evicted as before.

A drain (or a migrate_jobs) found in flight after a restart whose rule is no longer
in the rule set is not resumed (``abandon``): the pods it evicted stay evicted, the
node stays cordoned (a person, or the ``uncordon`` action, lifts it), no new
eviction starts, the phase becomes ``drain-incomplete`` (``migrate-incomplete``)
and the Warning Event ``DrainAbandoned`` says why.

The work itself is ``autoscaler/actions/ops/drain.py``, where ``scale_node_pool``'s
scale-down finds it too; this file is the action: its parameters and its undo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    param_keys,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.drain import ACTION, DrainParams, drain, selector_problems
from autoscaler.actions.ops.nodes import undo
from autoscaler.actions.ops.unknown import answering_unknown
from autoscaler.decision import Decision

# The name the work in ops/drain.py records its entries under.
NAME = ACTION
TARGETS = ("node", "device")
DEFAULTS = DrainParams()


def read_selector(r: ParamReader, key: str) -> str | None:
    selector = r.string(key, None)
    if selector is None:
        return None
    problems = selector_problems(selector)
    for problem in problems:
        r.problem(key, problem)
    return None if problems else selector


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(DrainParams))
    params = DrainParams(
        drain_timeout=r.duration("drainTimeout", DEFAULTS.drain_timeout, positive=True),
        grace_period_seconds=r.integer("gracePeriodSeconds", None, minimum=0),
        pod_selector=read_selector(r, "podSelector"),
        force_delete_after_timeout=r.boolean(
            "forceDeleteAfterTimeout", DEFAULTS.force_delete_after_timeout
        ),
    )
    return to_params(params), r.problems


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    if decision.kind == "recover":
        return await undo(ctx, decision)
    return await drain(ctx, decision)


SPEC = answering_unknown(
    ActionSpec(
        NAME, TARGETS, reversible=True, params_type=DrainParams, validate=validate, execute=execute
    )
)
