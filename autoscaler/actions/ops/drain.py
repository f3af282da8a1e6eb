"""Draining a node: the cordon, the eviction loop with its deadline, and the end of
a drain whose rule left the rule set. The ``drain`` action is this work under a rule
(``autoscaler/actions/drain.py`` says what it does, with its parameters), and the
scale-down of ``scale_node_pool`` drains the node it gives back the same way
(``drain_node``): one ownership record, one set of Events, one eviction loop, so a
controller that restarts resumes either from the entry as the ``drain`` action.

``DrainParams`` live here, not beside the action, because they are the record's: an
entry on a node keeps them, and the executor resumes any drain (a rule's or a
scale-down's) by handing them to the ``drain`` action. The label-selector grammar of
``podSelector`` is here with them. ``abandon`` ends a drain or a migration found in
flight after a restart whose rule is gone (``autoscaler/actions/ops/ownership.py`` has
why): it starts nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from accel_common.gangs import gang_of
from autoscaler.actions.base import (
    from_params,
    label_key_problem,
    label_value_problem,
    param,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops import barepods, gangs
from autoscaler.actions.ops.nodes import claim, node_of
from autoscaler.actions.ops.ownership import (
    INCOMPLETE,
    Entry,
    event,
    iso,
    node_ref,
    parse_iso,
    set_phase,
)
from autoscaler.actions.ops.pods import evict_until, finish
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj

log = logging.getLogger("accel_autoscaler.actions")

# The action a drain is recorded under, a scale-down's too: resumed, it is that action's.
ACTION = "drain"
DEFAULT_DRAIN_TIMEOUT = 600.0

_KEY = r"[A-Za-z0-9_./-]+"
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*(\S*)$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")


def _split(selector: str) -> list[str]:
    """Requirements separated by commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p.strip() for p in parts]


def selector_problems(selector: str) -> list[str]:
    """Every reason ``selector`` is not a Kubernetes label selector string."""
    if not selector.strip():
        return []
    problems: list[str] = []
    for req in _split(selector):
        keys: list[str] = []
        values: list[str] = []
        if m := _SET.match(req):
            keys.append(m.group(1))
            values.extend(v.strip() for v in m.group(3).split(","))
            if values == [""]:
                problems.append(f"{req!r}: an 'in'/'notin' set needs at least one value")
                values = []
        elif m := _EQUALITY.match(req):
            keys.append(m.group(1))
            values.append(m.group(3))
        elif m := _EXISTS.match(req):
            keys.append(m.group(2))
        else:
            problems.append(
                f"{req!r} is not a label selector requirement "
                "(use key=value, key!=value, key in (a,b), key notin (a,b), key or !key)"
            )
            continue
        for problem in [label_key_problem(k) for k in keys] + [
            label_value_problem(v) for v in values
        ]:
            if problem is not None:
                problems.append(f"{req!r}: {problem}")
    return problems


@dataclass(frozen=True)
class DrainParams:
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    grace_period_seconds: int | None = param("gracePeriodSeconds", None)
    pod_selector: str | None = param("podSelector", None)
    force_delete_after_timeout: bool = param("forceDeleteAfterTimeout", False)


def selector_matches(selector: str | None, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy a (validated) label selector string."""
    if not selector or not selector.strip():
        return True
    for req in _split(selector):
        if m := _SET.match(req):
            key, op = m.group(1), m.group(2)
            values = {v.strip() for v in m.group(3).split(",")}
            if op == "in" and labels.get(key) not in values:
                return False
            if op == "notin" and key in labels and labels[key] in values:
                return False
        elif m := _EQUALITY.match(req):
            key, op, value = m.group(1), m.group(2), m.group(3)
            if op in ("=", "==") and labels.get(key) != value:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
        elif m := _EXISTS.match(req):
            negate, key = m.group(1), m.group(2)
            if bool(negate) == (key in labels):
                return False
    return True


async def drain(ctx: ActionContext, decision: Decision) -> Outcome:
    """Cordon the decision's node and evict its pods: the ``drain`` action's work."""
    params = from_params(DrainParams, decision.params)
    name = node_of(decision)
    try:
        claimed = await claim(ctx, decision, phase="draining", cordon=True)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    started = parse_iso(claimed.entry.started)
    deadline = started + params.drain_timeout
    await event(
        ctx,
        claimed.node,
        "DrainStarted",
        f"draining for rule {decision.rule} (until {iso(deadline)})"
        + (f": {decision.reason}" if decision.reason else ""),
        action=ACTION,
    )

    def chosen(pod: Obj) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return selector_matches(params.pod_selector, labels)

    def select(pod: Obj) -> bool:
        # A gang member is never evicted alone: its gang restarts as one, below.
        return chosen(pod) and gang_of(pod) is None

    try:
        # The node is cordoned by now, so the gangs restart elsewhere.
        ganged = await gangs.restart_on_node(
            ctx, name, chosen, rule=decision.rule, why=f"node {name} is drained"
        )
        result = await evict_until(
            ctx,
            name,
            select,
            deadline=deadline,
            rule=decision.rule,
            why=f"node drained ({decision.rule})",
            grace_period_seconds=params.grace_period_seconds,
            force_after_deadline=params.force_delete_after_timeout,
        )
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    ganged.held_back(result)
    return await finish(
        ctx,
        claimed.node,
        decision.rule,
        ACTION,
        result,
        phases=("drained", "drain-incomplete"),
        reasons=("Drained", "DrainIncomplete"),
        extra=f", {ganged.summary()}" if ganged.summary() else "",
        details={"forced": result.forced, "gangs": [r.gang for r in ganged.restarts]},
    )


async def drain_node(
    ctx: ActionContext, node: str, *, rule: str, timeout: float, reason: str
) -> Outcome:
    """Cordon and drain ``node`` on behalf of ``rule`` (scale-down uses it): the same
    ownership record, Events and eviction loop as the ``drain`` action."""
    decision = Decision(
        rule=rule,
        kind="act",
        action=ACTION,
        params=to_params(DrainParams(drain_timeout=timeout)),
        target={"node": node},
        sample_labels=(),
        sample_value=0.0,
        at=ctx.clock(),
        dry_run=ctx.dry_run,
        reason=reason,
    )
    return await drain(ctx, decision)


async def abandon(ctx: ActionContext, node: str, rule: str, entry: Entry) -> Outcome:
    """End an in-flight drain or migrate_jobs whose rule left the rule set while no
    replica was running it: record the incomplete phase and say so, and start
    nothing. What it did stays done (evicted pods are not brought back, the cordon
    or taint stays, owned by the entry, for a person or ``uncordon`` to lift)."""
    phase = INCOMPLETE.get(entry.phase, entry.phase)
    message = (
        f"{entry.action} on node {node} (started {entry.started}) stopped: rule {rule} is no "
        "longer in the rule set; the pods it evicted stay evicted, the node stays as it is, "
        "and no new eviction starts"
    )
    if entry.action == "migrate_jobs":
        # Not a new step but the end of one: a bare pod already evicted gets the
        # replacement its kept spec is for, or it would be lost (actions/ops/barepods.py).
        try:
            recreated = (await barepods.settle(ctx, node, final=True)).recreated
        except NotFound:
            return Outcome("skipped", f"node {node} no longer exists")
        except KubeError as e:
            recreated = []
            message += f"; could not finish its bare pods' replacements: {e}"
        if recreated:
            message += f"; recreated {len(recreated)} bare pod(s) it had evicted"
    log.warning("%s", message)
    try:
        await set_phase(ctx, node, rule, phase, message)
    except NotFound:
        return Outcome("skipped", f"node {node} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {node}: could not record phase {phase}: {e}")
    await event(ctx, node_ref(node), "DrainAbandoned", message, warning=True, action=entry.action)
    return Outcome("skipped", message, {"phase": phase})
