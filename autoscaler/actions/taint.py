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

from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    did_you_mean,
    from_params,
    label_key_problem,
    label_value_problem,
    param,
    param_keys,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.engine.decision import Decision

NAME = "taint"
TARGETS = ("node", "device")
DEFAULT_TAINT = "accel-fleet.io/faulty=true:NoSchedule"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


def taint_problems(text: str) -> list[str]:
    """Every reason ``text`` is not a taint in kubectl's ``key=value:Effect`` form."""
    spec, colon, effect = text.rpartition(":")
    if not colon:
        return [f"{text!r} has no effect (use key=value:Effect, e.g. {DEFAULT_TAINT})"]
    problems: list[str] = []
    key, _, value = spec.partition("=")
    for problem in (label_key_problem(key), label_value_problem(value)):
        if problem is not None:
            problems.append(f"{text!r}: {problem}")
    if effect not in EFFECTS:
        problems.append(
            f"{text!r}: effect must be {', '.join(EFFECTS)}, got {effect!r}"
            f"{did_you_mean(effect, EFFECTS)}"
        )
    return problems


def parse_taint(text: str) -> Taint:
    """A validated taint string as its parts; raises ValueError naming every problem."""
    problems = taint_problems(text)
    if problems:
        raise ValueError("; ".join(problems))
    spec, _, effect = text.rpartition(":")
    key, _, value = spec.partition("=")
    return Taint(key, value, effect)


def read_taint(r: ParamReader, key: str, default: str) -> str:
    """The taint parameter of ``taint`` and ``migrate_jobs``."""
    text = r.string(key, default)
    problems = taint_problems(text)
    for problem in problems:
        r.problem(key, problem)
    return default if problems else text


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
    from autoscaler.actions.nodeops import node_step, undo

    if decision.kind == "recover":
        return await undo(ctx, decision)
    params = from_params(TaintParams, decision.params)
    return await node_step(ctx, decision, phase="tainted", taint=params.taint, reason="Tainted")


SPEC = ActionSpec(
    NAME, TARGETS, reversible=True, params_type=TaintParams, validate=validate, execute=execute
)
