"""Escalation ladders: when a rule with ``escalate`` takes its next step.

A fatal device fault is rarely fixed by moving its jobs: the device needs a reset,
the node a reboot, or the machine replacing. A ladder lets one rule say so in
order, each step with a timeout and a success condition, so that the gentlest
remedy is tried first and the most disruptive one last. This module holds that
one decision, apart from ``evaluate.py``, which calls it once per cycle between
recoveries and new incidents (``escalate``); it is as pure as ``evaluate``.

Semantics (docs/rules.md says the same for rule authors):

- The first step is the rule's act: it fires as any rule does (``for``, cooldown,
  limits, breaker) and starts the ladder at step 1. The target is *active* from
  then until a step succeeds or the ladder is exhausted, through every step, so
  the breaker counts its node all along, also while the node is away being
  replaced (``Active.node`` does not depend on the Node object).
- A step *succeeds* when its success condition (the step's ``recover``, else the
  rule's) has held for its ``for``, counted from the step's start (the engine
  forgets a recovery in progress when a step starts: what held before the step
  acted says nothing about it). Then the rule's recover decision undoes the
  ladder's taints and cordons (through the first step that can be undone) and the
  ladder ends.
- The next step starts when the current step's ``timeout`` has passed since it
  started without success, or at once when the executor reported the step's
  action ``failed`` (``EngineState.report``): evidence from the cluster that it did
  not work. An ``unknown`` outcome (an API error, an exception, an unreadable
  value, a missing fact such as a device's UUID) is no such evidence: the step
  waits for its timeout. A timeout never escalates on a cycle whose success result
  is unknown (the source is down): unknown is not "failed to recover", and a
  reboot is no answer to a broken scrape.
- Nothing escalates, failed or timed out, on a cycle whose fault result (the
  rule's ``expr``, or its alert) is unknown. A step that would reboot or replace
  (``DESTRUCTIVE``) starts only while the fault is *observed*: the rule's ``expr``
  holds for the target at that very cycle. "Not recovered" is not enough: a
  device whose exporter went away is not recovered either.
- Every step's decision carries the labels of the sample that started the ladder
  (``Ladder.labels``: the device's ``uuid``, say), so a later step never knows less
  than the first.
- Limits on the steps after the first: they are not held by the rule's cooldown,
  ``maxConcurrent``, ``maxConcurrentDrains`` or the breaker's count (the target is
  already active and its node already counted: escalating adds no node), but they
  are held while the breaker is open (a storm is more often a bad rollout than
  hardware, and rebooting or replacing machines would make it worse) and by the
  per-rule and global ``maxActionsPerHour`` (they count towards both, unless
  the step's outcome says it did nothing: ``EngineState.report``). A held
  step is tried again every cycle; its ``held`` note says why.
- The last step may have a timeout too: when it passes without success the
  ladder is *exhausted*: the target is released (the breaker stops counting it,
  an ``exhausted`` note says so) and what the ladder did stays, for a person to
  look at. Without one, the target stays active until it recovers.

Decisions of step i carry ``extra={"step": i, "incident": t}`` (t: when step 1
acted) and the step's action type and parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import replace

from accel_common.durations import format_whole
from accel_common.remedies import RANK
from autoscaler.decision import Decision
from autoscaler.engine.state import EngineState, Ladder, Note, TargetKey
from autoscaler.ruleset.model import Limits, Rule, RuleSet
from autoscaler.types import Labels

# Steps that take a machine away: they start only while the fault is observed.
DESTRUCTIVE = frozenset({"reboot_node", "replace_machine"})
# Steps that only move the jobs off, to prepare the remedy: once one says ``done``
# while the fault is observed, the next step starts at once, not after its timeout
# (a taint or a cordon alone is a remedy of its own: it waits for its timeout).
PREPARATORY = frozenset({"migrate_jobs", "drain"})
# Steps after which a ladder ends for good once they say ``done``: the part is
# marked for return, and nothing the ladder did is undone.
FINAL = frozenset({"mark_for_return"})
# Ladder starts kept per target for a recurrence cap (record.py reads as many).
MAX_STARTS = 64


def success_key(rule: Rule, step: int) -> str:
    """The key of ``recover_results`` that holds step ``step``'s success result:
    the rule's name for the rule's recover, ``<rule>/<step>`` for a step's own
    (a rule name is a DNS label, so it has no ``/``)."""
    if rule.escalate and rule.escalate[step - 1].recover is not None:
        return f"{rule.name}/{step}"
    return rule.name


def step_of(state: EngineState, key: TargetKey) -> int:
    ladder = state.ladders.get(key)
    return 1 if ladder is None else ladder.step


def has_success(rule: Rule) -> bool:
    """Whether anything can end the rule's remediation by recovering."""
    return rule.recover is not None or any(s.recover is not None for s in rule.escalate)


def escalate(
    ruleset: RuleSet,
    state: EngineState,
    now: float,
    *,
    unknown: set[TargetKey],
    recovered: set[TargetKey],
    observed: Mapping[str, Set[Labels] | None],
    dry_run: bool,
) -> list[Decision]:
    """The cycle's escalations: the act decisions of every ladder's next step that
    is due and allowed, in rule and then target order. ``unknown``: targets whose
    success result was unknown this cycle; ``recovered``: targets that recovered
    this cycle (their ladder has ended); ``observed``: by rule, the targets its
    ``expr`` holds for this cycle, None where that result is unknown. Mutates
    ``state``."""
    decisions: list[Decision] = []
    for rule in ruleset.rules:
        if not rule.escalate:
            continue
        for key in sorted(k for k in state.ladders if k[0] == rule.name):
            if key in recovered:
                continue
            decision = _climb(ruleset, rule, key, state, now, unknown, observed, dry_run)
            if decision is not None:
                decisions.append(decision)
    return decisions


def _climb(
    ruleset: RuleSet,
    rule: Rule,
    key: TargetKey,
    state: EngineState,
    now: float,
    unknown: set[TargetKey],
    observed: Mapping[str, Set[Labels] | None],
    dry_run: bool,
) -> Decision | None:
    """One ladder's next step, when its current one failed or timed out, the fault
    is known to be there still, and the limits allow it; otherwise a note says
    what stands in the way (or the last step's ladder is exhausted)."""
    ladder = state.ladders[key]
    step = min(ladder.step, len(rule.escalate))
    current = rule.escalate[step - 1]
    what = f"step {step} ({current.action.type})"
    if current.action.type in FINAL and ladder.outcome == "done":
        _settle(rule, key, state, what)
        return None
    following = next_step(rule, step, ladder.klass)
    faults = observed.get(rule.name)
    go = _go(ladder.outcome, current.action.type, following, key, faults)
    timed_out = current.timeout is not None and now - ladder.since >= current.timeout
    if not (go or timed_out):
        return None
    failed = go is not None and go != "done"
    said = "timed out" if go is None else _SAID[go]
    note = _doubt(rule, key, what, failed, said, faults, unknown)
    if note is None and following is None:
        _exhaust(rule, key, state, what, now)
        return None
    if note is None and faults is not None and following is not None:
        note = _unobserved(rule, key, what, rule.escalate[following - 1].action.type, faults)
    if note is None:
        held = _held(ruleset.limits, rule, state)
        if held is not None:
            note = Note(rule.name, "held", f"escalation: {held}", key[1])
    if note is not None:
        state.notes.append(note)
        return None
    assert following is not None  # a ladder with no step left was exhausted above
    if go is not None:
        why = f"{what} {_SAID[go]}"
    else:
        why = (
            f"{what} did not succeed within its timeout "
            f"{format_whole(round((current.timeout or 0.0) * 1000))}"
        )
    if following > step + 1:
        skipped = ", ".join(str(i) for i in range(step + 1, following))
        why += f"; step(s) {skipped} not for class {ladder.klass}"
    return _step(rule, key, following, ladder, state, now, dry_run, why)


# What each outcome that moves a ladder on at once says, for the decision's reason.
_SAID = {
    "failed": "failed",
    "unsupported": "cannot be performed on this node (unsupported)",
    "done": "is done (the jobs moved) and the fault is still observed",
}


def _go(
    outcome: str | None,
    action: str,
    following: int | None,
    key: TargetKey,
    faults: Set[Labels] | None,
) -> str | None:
    """The outcome that moves the ladder on before its timeout, if any: ``failed``
    (the cluster's evidence the step did not work), ``unsupported`` (the node cannot
    perform it: skipped at once rather than failed after its timeout), or ``done``
    of a step that only prepares (the jobs moved) while the fault is observed now
    (``expr`` holds for the target this cycle: the next step's remedy is due)."""
    if following is None:
        return None
    if outcome in ("failed", "unsupported"):
        return outcome
    if outcome == "done" and action in PREPARATORY and faults is not None and key[1] in faults:
        return "done"
    return None


def next_step(rule: Rule, step: int, klass: str | None) -> int | None:
    """The step after ``step`` that a ladder of class ``klass`` takes; None when it
    takes no further step."""
    for i in range(step + 1, len(rule.escalate) + 1):
        if rule.takes(i, klass):
            return i
    return None


def class_of(rule: Rule, labels: Labels) -> str | None:
    """The fault class a sample's labels give a ladder of ``rule``: the value of its
    ``classLabel`` when that is a class (``accel_common.remedies``), else None
    (unknown: every step)."""
    if rule.class_label is None:
        return None
    value = dict(labels).get(rule.class_label)
    return value if value in RANK else None


def stronger(rule: Rule, new: Labels, old: Labels) -> bool:
    """Whether a sample with ``new`` labels gives a ladder a class that asks for
    more than one with ``old`` labels (two faults of one target in one result: the
    ladder follows the worse)."""
    a, b = class_of(rule, new), class_of(rule, old)
    return a is not None and (b is None or RANK[a] > RANK[b])  # type: ignore[index]


def keeps(state: EngineState, key: TargetKey) -> bool:
    """Whether the target's ladder follows ``isolate``: no recover ever returns an
    isolated part to service (its taint and mark stay for an operator)."""
    ladder = state.ladders.get(key)
    return ladder is not None and ladder.klass == "isolate"


def _settle(rule: Rule, key: TargetKey, state: EngineState, what: str) -> None:
    """A final step (``FINAL``) said done: the ladder ends without a recover, so its
    taint and mark stay; the target is released (the breaker stops counting it)
    and left for an operator."""
    _release(key, state)
    state.notes.append(
        Note(
            rule.name,
            "isolated",
            f"{what} is done: the part is marked for return and its node keeps the "
            "ladder's taint; the target is released and left for an operator (no "
            "recover undoes an isolation)",
            key[1],
        )
    )


def _doubt(
    rule: Rule,
    key: TargetKey,
    what: str,
    failed: bool,
    said: str,
    faults: Set[Labels] | None,
    unknown: set[TargetKey],
) -> Note | None:
    """Why it is not known that the ladder should climb: whether the fault is
    still there, or (for a timeout or a move that is done) whether the step
    succeeded after all. ``said``: what the step did, in words."""
    if faults is None:
        return Note(
            rule.name,
            "unknown",
            f"{what} {said} but whether the fault is still there is unknown; not escalating",
            key[1],
        )
    if not failed and key in unknown:
        return Note(
            rule.name,
            "unknown",
            f"{what} {said} but its success is unknown; not escalating",
            key[1],
        )
    return None


def _unobserved(
    rule: Rule, key: TargetKey, what: str, following: str, faults: Set[Labels]
) -> Note | None:
    """A step that takes a machine away starts only on a fault seen now."""
    if following in DESTRUCTIVE and key[1] not in faults:
        return Note(
            rule.name,
            "held",
            f"escalation from {what} to {following}: the fault is not observed "
            "now (the rule's expr does not hold for the target), and a "
            f"{following} starts only on a fault seen at that moment",
            key[1],
        )
    return None


def start(
    rule: Rule, key: TargetKey, state: EngineState, now: float, labels: Labels = ()
) -> dict[str, float | int]:
    """A rule with a ladder acted (its first step) on a sample with ``labels``: start
    the ladder, of the sample's class, or of ``isolate`` when this is more ladders
    than the rule's recurrence cap allows. The decision's extra."""
    klass, why = class_of(rule, labels), ""
    cap = rule.recurrence
    if cap is not None:
        counted = _cap_key(rule, key)
        starts = tuple(t for t in state.ladder_starts.get(counted, ()) if now - t < cap.window)
        if len(starts) >= cap.max:
            klass = "isolate"
            why = (
                f"recurrence cap: ladder {len(starts) + 1} for this {cap.per} within "
                f"{format_whole(round(cap.window * 1000))} (at most {cap.max}); isolated and "
                "left for an operator"
            )
        state.ladder_starts[counted] = (*starts, now)[-MAX_STARTS:]
    state.ladders[key] = Ladder(1, now, now, labels=labels, klass=klass, why=why)
    return {"step": 1, "incident": now}


def _cap_key(rule: Rule, key: TargetKey) -> TargetKey:
    """What a recurrence cap counts ladders of: the target, or its node."""
    if rule.recurrence is not None and rule.recurrence.per == "node":
        node = dict(key[1]).get("node")
        if node is not None:
            return (rule.name, (("node", node),))
    return key


def forget_starts(ruleset: RuleSet, state: EngineState, now: float) -> None:
    """Drop ladder starts outside their rule's recurrence window (and those of rules
    that left the rule set or have no cap any more)."""
    caps = {r.name: r.recurrence for r in ruleset.rules if r.recurrence is not None}
    kept: dict[TargetKey, tuple[float, ...]] = {}
    for key, starts in state.ladder_starts.items():
        cap = caps.get(key[0])
        recent = () if cap is None else tuple(t for t in starts if now - t < cap.window)
        if recent:
            kept[key] = recent
    state.ladder_starts = kept


def _exhaust(rule: Rule, key: TargetKey, state: EngineState, what: str, now: float) -> None:
    _release(key, state)
    state.notes.append(
        Note(
            rule.name,
            "exhausted",
            f"{what}, the last step, did not succeed within its timeout: the ladder is "
            "exhausted and the target released; what it did stays for a person to undo",
            key[1],
        )
    )


def _held(limits: Limits, rule: Rule, state: EngineState) -> str | None:
    if state.breaker_open:
        return f"circuit breaker open: {state.breaker_reason}"
    by_rule = sum(1 for _, r in state.actions if r == rule.name)
    most = rule.limits.max_actions_per_hour
    if most is not None and by_rule >= most:
        return f"maxActionsPerHour: {by_rule} actions by this rule in the last hour (limit {most})"
    most = limits.max_actions_per_hour
    if most is not None and len(state.actions) >= most:
        return (
            f"global maxActionsPerHour: {len(state.actions)} actions in the last hour "
            f"(limit {most})"
        )
    return None


def _step(
    rule: Rule,
    key: TargetKey,
    step: int,
    ladder: Ladder,
    state: EngineState,
    now: float,
    dry_run: bool,
    why: str,
) -> Decision:
    action = rule.escalate[step - 1].action
    state.ladders[key] = replace(ladder, step=step, since=now, outcome=None)
    # What held before this step acted says nothing about it.
    state.recovering.pop(key, None)
    active = state.active.get(key)
    if active is not None:
        state.active[key] = replace(active, action=action.type)
    state.last_acted[key] = now
    state.actions.append((now, rule.name))
    sample = state.incidents.get(key)
    return Decision(
        rule=rule.name,
        kind="act",
        action=action.type,
        params=dict(action.params),
        target=dict(key[1]),
        sample_labels=ladder.labels or key[1],
        sample_value=0.0,
        at=now,
        dry_run=dry_run,
        reason=f"escalated to step {step} of {len(rule.escalate)}: {why}"
        + ("" if sample is None else f" (incident since {sample.since:g})")
        + (f"; {ladder.why}" if ladder.why else ""),
        extra={"step": step, "incident": ladder.started},
    )


__all__ = [
    "DESTRUCTIVE",
    "FINAL",
    "PREPARATORY",
    "class_of",
    "escalate",
    "forget_starts",
    "has_success",
    "keeps",
    "next_step",
    "start",
    "step_of",
    "stronger",
    "success_key",
]


def _release(key: TargetKey, state: EngineState) -> None:
    """The ladder ends and its target is let go: the breaker stops counting it and
    no recovery is pending for it."""
    state.ladders.pop(key, None)
    state.active.pop(key, None)
    state.recovering.pop(key, None)
