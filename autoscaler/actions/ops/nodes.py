"""Cordons and taints with ownership: the node-level steps that cordon, taint,
drain, migrate_jobs and the recover path share.

``claim`` records (or resumes) a rule's entry in the node's
``accel-fleet.io/remediation`` annotation and, in the same conditional write,
cordons and/or taints the node, noting whether this controller did it or found it
so. ``release`` removes the entry and undoes only what the entry says we did,
handing a cordon or taint that another of our rules still needs over to that
rule's entry. See ``autoscaler/actions/ops/ownership.py`` for the record itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.actions.base import Taint, parse_taint
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.ownership import (
    Entry,
    entries,
    entries_patch,
    event,
    new_entry,
    node_ref,
    ours,
    update_node,
)
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import Obj

# Actions whose entries need the node unschedulable while they are in place.
CORDONING = ("cordon", "drain")


def node_of(decision: Mapping[str, str] | Decision) -> str:
    target = decision.target if isinstance(decision, Decision) else decision
    node = target.get("node", "")
    if not node:
        raise ValueError(f"target {dict(target)} names no node")
    return node


def _taints(node: Obj) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def has_taint(node: Obj, taint: Taint) -> bool:
    return any(t.get("key") == taint.key and t.get("effect") == taint.effect for t in _taints(node))


def _same(a: str, b: str) -> bool:
    ta, tb = parse_taint(a), parse_taint(b)
    return (ta.key, ta.effect) == (tb.key, tb.effect)


@dataclass(frozen=True)
class Claimed:
    node: Obj
    entry: Entry
    # Whether this call changed the node (False: resumed, or already in place).
    changed: bool


async def claim(
    ctx: ActionContext,
    decision: Decision,
    *,
    phase: str,
    cordon: bool = False,
    taint: str | None = None,
) -> Claimed:
    """Record the rule's entry on the node and cordon/taint it, in one conditional
    write. An entry of ours for the same rule and action is resumed (its start time
    and what it owns are kept)."""
    name = node_of(decision)
    wanted = parse_taint(taint) if taint else None
    result: dict[str, Any] = {}

    def mutate(n: Obj) -> Obj | None:
        es = entries(n)
        e = es.get(decision.rule)
        if e is None or not ours(e, ctx) or e.action != decision.action:
            prior = e if e is not None and ours(e, ctx) else None
            e = new_entry(ctx, decision, phase)
            if prior is not None:
                # An escalation ladder's next step under the same rule: what the
                # earlier step cordoned or tainted stays ours to undo.
                e.cordoned, e.taint = prior.cordoned, prior.taint
        else:
            e.phase = phase
        spec: Obj = {}
        if cordon and not (n.get("spec") or {}).get("unschedulable"):
            spec["unschedulable"] = True
            e.cordoned = True
        if wanted is not None and not has_taint(n, wanted):
            spec["taints"] = [
                *_taints(n),
                {"key": wanted.key, "value": wanted.value, "effect": wanted.effect},
            ]
            e.taint = str(wanted)
        es[decision.rule] = e
        result["entry"] = e
        result["changed"] = bool(spec)
        patch: Obj = entries_patch(es)
        if spec:
            patch["spec"] = spec
        return patch

    node = await update_node(ctx.kube, name, mutate)
    return Claimed(node, result["entry"], bool(result["changed"]))


@dataclass(frozen=True)
class Released:
    entry: Entry | None
    uncordoned: bool
    untainted: str | None
    # What another rule of ours still holds, so it stayed.
    kept: tuple[str, ...]


async def release(ctx: ActionContext, node: str, rule: str) -> Released:
    """Remove ``rule``'s entry and undo what it did, unless another of our entries
    still needs it (then that entry inherits it)."""
    result: dict[str, Any] = {"entry": None, "uncordoned": False, "untainted": None, "kept": ()}

    def mutate(n: Obj) -> Obj | None:
        es = entries(n)
        e = es.get(rule)
        if e is None or not ours(e, ctx):
            result.update(entry=None, uncordoned=False, untainted=None, kept=())
            return None
        del es[rule]
        others = [o for o in es.values() if ours(o, ctx)]
        spec: Obj = {}
        kept: list[str] = []
        uncordoned = False
        untainted = None
        if e.cordoned:
            heir = next((o for o in others if o.action in CORDONING), None)
            if heir is not None:
                heir.cordoned = True
                kept.append("cordon")
            elif (n.get("spec") or {}).get("unschedulable"):
                spec["unschedulable"] = False
                uncordoned = True
        if e.taint:
            heir = next((o for o in others if o.taint is None and _wants(o, e.taint)), None)
            t = parse_taint(e.taint)
            if heir is not None:
                heir.taint = e.taint
                kept.append(f"taint {e.taint}")
            elif has_taint(n, t):
                spec["taints"] = [
                    x for x in _taints(n) if (x.get("key"), x.get("effect")) != (t.key, t.effect)
                ]
                untainted = e.taint
        result.update(entry=e, uncordoned=uncordoned, untainted=untainted, kept=tuple(kept))
        patch = entries_patch(es)
        if spec:
            patch["spec"] = spec
        return patch

    await update_node(ctx.kube, node, mutate)
    return Released(result["entry"], result["uncordoned"], result["untainted"], result["kept"])


def _wants(entry: Entry, taint: str) -> bool:
    """Whether an entry's action sets this taint (it found it already there)."""
    own = entry.params.get("taint")
    return isinstance(own, str) and _same(own, taint)


async def undo(ctx: ActionContext, decision: Decision) -> Outcome:
    """The ``recover`` path of every reversible node action: release the rule's
    entry, undoing only what it did."""
    name = node_of(decision)
    try:
        r = await release(ctx, name, decision.rule)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    if r.entry is None:
        return Outcome(
            "skipped",
            f"node {name} has no remediation by rule {decision.rule} of {ctx.controller}: "
            "nothing of ours to undo",
        )
    done = []
    if r.uncordoned:
        done.append("uncordoned")
    if r.untainted:
        done.append(f"removed taint {r.untainted}")
    if not r.entry.cordoned and not r.entry.taint:
        done.append("left the node as we found it (we had not cordoned or tainted it)")
    if r.kept:
        done.append(f"kept {', '.join(r.kept)} for another rule")
    message = f"rule {decision.rule} recovered: {'; '.join(done)}"
    await event(ctx, node_ref(name), "RemediationRecovered", message, action=decision.action)
    return Outcome("done", message, {"uncordoned": r.uncordoned, "untainted": r.untainted})


async def node_step(
    ctx: ActionContext,
    decision: Decision,
    *,
    phase: str,
    cordon: bool = False,
    taint: str | None = None,
    reason: str,
) -> Outcome:
    """A one-step node action (cordon, taint): claim, and record an Event."""
    name = node_of(decision)
    try:
        c = await claim(ctx, decision, phase=phase, cordon=cordon, taint=taint)
    except NotFound:
        return Outcome("skipped", f"node {name} no longer exists")
    except KubeError as e:
        return Outcome("unknown", f"node {name}: {e}")
    what = "cordoned" if cordon else f"tainted {taint}"
    if c.changed:
        message = f"{what} by rule {decision.rule}"
    else:
        message = f"already {what}; recorded for rule {decision.rule} (not ours to undo)"
    if decision.reason:
        message += f": {decision.reason}"
    await event(ctx, c.node, reason, message, action=decision.action)
    return Outcome("done", message, {"changed": c.changed})


__all__ = [
    "CORDONING",
    "Claimed",
    "Released",
    "claim",
    "has_taint",
    "node_of",
    "node_step",
    "release",
    "undo",
]
