"""``evaluate``: one cycle of the engine, from query results to decisions.

It is a function of its arguments and nothing else (no clock, no I/O, no logging),
so the controller, the rule unit tests and the tests of this module drive exactly
the same code, and dry-run differs from a real run only in a flag on each Decision:
dry-run decisions count against cooldowns and limits like real ones (descheduler's
habit), or a dry run would promise more than a real run does.

Incidents, not cycles: a rule acts once per *incident* (``engine/state.py``), the
stretch of time its condition holds for a target, not once per cycle in which it
holds. An incident starts with the first known result that contains the target and
ends with the first known result that lacks it, or when the rule's ``recover``
holds (then the condition must stop holding before a new incident can start). For
an ``alertname`` rule the incident is the alert itself: the receiver labels each
sample ``__incident__="<fingerprint>@<startsAt>"``, and when none of a target's
identities is one it had in the last known cycle, one incident has ended and a new
one started. Labels beginning with ``__`` (other than ``__name__``) are the
receiver's bookkeeping: never part of a target, and left out of a Decision's
sample. ``cooldown`` is the least time between two acts of the rule on one target,
so the least gap between two acted incidents: an incident that would act within it
is held (a note says until when) and acts when it ends, if it still holds.
``repeat`` (only for actions that cannot be undone, such as scale_node_pool) lets
one long incident act again every ``repeat``.

One cycle, in this order:

1. Forget what no longer applies: entries of rules that left the rule set (an
   active one is reported as a ``dropped`` note), active targets of rules without
   ``recover`` whose cooldown has ended, cooldowns that ended, actions older than
   an hour.
2. Recover: for each active target of a rule with ``recover``, when the recover
   result has contained it continuously for ``recover.for``, emit a ``recover``
   decision, clear the active entry and mark the target's incident, if one is in
   progress, handled. Recover decisions are never held back by limits or by an
   open breaker: undoing a remediation reduces harm.
   A target on an escalation ladder recovers by its current step's success
   condition (the step's ``recover``, else the rule's), and its recover decision
   undoes through the ladder's first step that can be undone (``Rule.undo_action``).
3. Escalate (``engine/ladder.py``): each ladder whose current step timed out
   without success, or whose action reported ``failed``, takes its next step (an
   act decision with ``extra={"step": i, "incident": t}``), unless the breaker is
   open or an hourly limit holds it; a last step that timed out releases its
   target. The first step of a ladder is the rule's act below.
4. Incidents: a known result ends the incidents of the targets it lacks and starts
   one for each target it contains that has none (or whose ``__incident__`` is
   new). An incident that starts while the rule still remediates the target (it is
   active, with ``recover``) is handled at once: the remediation covers it.
5. Fire: an incident not yet handled fires once it has lasted for the rule's
   ``for``, unless the target recovered this very cycle or the rule's cooldown for
   it has not ended (a ``held`` note). With ``repeat``, a handled incident fires
   again once ``repeat`` has passed since it was handled.
6. Close a ``window`` breaker when ``breakerWindow`` has passed since it opened and
   the nodes that the rules want remediated (active ones and this cycle's fired
   targets) are back within the limit.
7. Limits, in a fixed order (rule order, then target: by node then device, by
   namespace then pod, by pool): per-rule ``maxConcurrent`` and
   ``maxActionsPerHour``, global ``maxActionsPerHour`` and ``maxConcurrentDrains``,
   then the breaker (see ``breaker``). A target held back stays pending (its
   incident is not handled) and fires on a later cycle when the limit allows, if
   the incident still lasts. When the breaker stops a target it opens, and every
   target after it in this cycle is held too; while it is open no rule acts (pod
   and pool targets included), but recoveries go on. Only "act" decisions count
   towards ``maxActionsPerHour``, from the cycle that decides them; one whose
   outcome says it did nothing gives its place back (``EngineState.void`` and
   ``report``, called by the executor's hook in ``autoscaler/wiring.py``).

Unknown results: a rule whose result is ``Unknown``, a Scalar (it names no target)
or missing from ``results`` produces no decision; its incidents are kept as they
are (not ended, not started, and a pending one cannot fire this cycle, even if its
``for`` has passed meanwhile; it fires on the next known cycle that contains it).
Likewise an unknown recover result keeps ``recovering`` entries and never recovers.

An empty Vector is known: the sources return one only when they have data (their
health check passed), so it means "the condition holds for no target". It can
neither trigger nor undo an action, but it ends every incident of the rule, and so
a ``for:`` wait (and a recovery's), as in Prometheus: a condition that clears and
comes back is a new incident, and must hold for its whole ``for:`` again. A known
result resets the recovering entry of every target it does not contain. Samples
lacking the labels that name the rule's target are skipped with a ``skipped`` note
and do not count as present.

State: ``evaluate`` mutates the ``EngineState`` passed in and returns the cycle's
decisions, recover decisions first, then escalations, then act decisions, each in
rule order and then target order. ``state.notes`` is replaced with this cycle's notes. It does not
append to the decision log: the caller calls ``state.record(decisions)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from autoscaler.decision import Decision
from autoscaler.engine.breaker import (
    UNHEALTHY_ACTIONS,
    SizeUnknown,
    allowed_unhealthy,
    counted,
    describe_limit,
    in_grace,
)
from autoscaler.engine.ladder import (
    escalate,
    forget_starts,
    has_success,
    keeps,
    start,
    step_of,
    stronger,
    success_key,
)
from autoscaler.engine.state import (
    Active,
    ClusterInfo,
    EngineState,
    Incident,
    Note,
    TargetKey,
)
from autoscaler.ruleset.model import TARGET_LABELS, Limits, Rule, RuleSet, Target
from autoscaler.sources.alertmanager import INCIDENT_LABEL
from autoscaler.types import Labels, QueryResult, Sample, Scalar, Unknown, Vector

# Actions that maxConcurrentDrains counts: each moves jobs off what it acts on.
DRAIN_ACTIONS = frozenset({"drain", "migrate_jobs", "repartition"})

HOUR = 3600.0


def evaluate(
    ruleset: RuleSet,
    results: Mapping[str, QueryResult],
    state: EngineState,
    now: float,
    *,
    recover_results: Mapping[str, QueryResult] | None = None,
    cluster: ClusterInfo | None = None,
    dry_run: bool = False,
) -> list[Decision]:
    """One cycle: decisions for ``now`` from ``results`` (rule name -> result of its
    expr, or for alertname rules a Vector of the firing alerts' labels, value 1) and
    ``recover_results`` (rule name -> result of its recover expr). Mutates ``state``;
    see the module docstring for the exact rules."""
    state.notes = []
    _forget(ruleset, state, now)
    recovered, unknown = _recover(ruleset, recover_results or {}, state, now, dry_run)
    done = {(d.rule, _labels(d.target)) for d in recovered}
    present = {r.name: _present(r, results.get(r.name), state, "expr") for r in ruleset.rules}
    escalated = escalate(
        ruleset,
        state,
        now,
        unknown=unknown,
        recovered=done,
        observed={name: None if p is None else frozenset(p) for name, p in present.items()},
        dry_run=dry_run,
    )
    fired = _fire(ruleset, present, state, now, done)
    _close_window_breaker(ruleset.limits, fired, state, cluster, now)
    acted = _gate(ruleset.limits, fired, state, cluster, now, dry_run)
    state.last_evaluation = now
    return recovered + escalated + acted


def target_of(target: Target, sample: Sample) -> tuple[Labels, tuple[str, ...]]:
    """(target labels, names of the missing ones) for a sample of a rule with this
    target. The labels are only meaningful when nothing is missing."""
    names = TARGET_LABELS[target]
    got = {name: sample.get(name) for name in names}
    missing = tuple(name for name, value in got.items() if not value)
    return tuple(sorted(got.items())), missing


def format_duration(seconds: float) -> str:
    """Prometheus's way of writing a duration: 0s, 15s, 5m30s, 1h, 1d2h, 1.5s."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    if ms:
        out.append(f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms / 1000:g}s")
    return sign + "".join(out)


@dataclass(frozen=True)
class _Fired:
    """A target whose rule fired this cycle, before limits and the breaker."""

    rule: Rule
    target: Labels
    sample: Sample
    since: float
    node: str | None
    ids: tuple[str, ...] = ()

    @property
    def key(self) -> TargetKey:
        return (self.rule.name, self.target)


def _labels(mapping: Mapping[str, str]) -> Labels:
    return tuple(sorted(mapping.items()))


def _order(rule: Rule, target: Labels) -> tuple[str, ...]:
    """Targets are taken in the order of their naming labels' values: node, then
    device (all of one node's devices together); namespace, then pod."""
    values = dict(target)
    return tuple(values.get(name, "") for name in TARGET_LABELS[rule.target])


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _node(target: Labels) -> str | None:
    return next((v for k, v in target if k == "node"), None)


def _forget(ruleset: RuleSet, state: EngineState, now: float) -> None:
    rules = {r.name: r for r in ruleset.rules}
    for key, active in sorted(state.active.items()):
        rule = rules.get(key[0])
        if rule is None:
            del state.active[key]
            state.notes.append(
                Note(
                    key[0],
                    "dropped",
                    f"the rule left the rule set; its {active.action} on this target "
                    "will not be undone by the engine",
                    key[1],
                )
            )
        elif rule.recover is None and not rule.escalate and now - active.since >= rule.cooldown:
            del state.active[key]
    state.incidents = {k: v for k, v in state.incidents.items() if k[0] in rules}
    state.recovering = {
        k: v for k, v in state.recovering.items() if k in state.active and has_success(rules[k[0]])
    }
    # A ladder lives as long as its target is active; a reload that shortened the
    # ladder leaves the target on the new last step.
    state.ladders = {
        k: replace(v, step=min(v.step, len(rules[k[0]].escalate)))
        for k, v in state.ladders.items()
        if k in state.active and rules[k[0]].escalate
    }
    state.last_acted = {
        k: v
        for k, v in state.last_acted.items()
        if k[0] in rules and now - v < rules[k[0]].cooldown
    }
    state.actions = [(at, rule) for at, rule in state.actions if now - at < HOUR]
    forget_starts(ruleset, state, now)


def _public(labels: Labels) -> Labels:
    """Labels without the receiver's bookkeeping (``__`` names other than ``__name__``)."""
    return tuple((k, v) for k, v in labels if k == "__name__" or not k.startswith("__"))


@dataclass(frozen=True)
class _Seen:
    """A target in a known result: its first sample in label order (bookkeeping
    labels removed) and the incident identities of all its samples."""

    sample: Sample
    ids: tuple[str, ...]


def _present(
    rule: Rule, result: QueryResult | None, state: EngineState, what: str
) -> dict[Labels, _Seen] | None:
    """The targets in a result; None when the result is unknown (with a note saying
    why)."""
    why: str | None = None
    if result is None:
        why = "no result was given"
    elif isinstance(result, Unknown):
        why = result.reason
    elif isinstance(result, Scalar):
        why = "the result is a scalar, which names no target"
    if why is not None:
        state.notes.append(Note(rule.name, "unknown", f"{what}: {why}"))
        return None
    assert isinstance(result, Vector)
    first: dict[Labels, Sample] = {}
    ids: dict[Labels, set[str]] = {}
    for sample in sorted(result.samples, key=lambda s: _public(s.labels)):
        target, missing = target_of(rule.target, sample)
        if missing:
            state.notes.append(
                Note(
                    rule.name,
                    "skipped",
                    f"{what}: the sample has no {', '.join(missing)} label; a {rule.target} "
                    f"target is named by {', '.join(TARGET_LABELS[rule.target])}",
                    _public(sample.labels),
                )
            )
            continue
        public = Sample(_public(sample.labels), sample.value, sample.timestamp)
        # A ladder's class comes from its sample: of two faults, the worse one's.
        if target not in first or stronger(rule, public.labels, first[target].labels):
            first[target] = public
        # The receiver's label: the alert's fingerprint@startsAt.
        incident = sample.get(INCIDENT_LABEL)
        ids.setdefault(target, set())
        if incident:
            ids[target].add(incident)
    return {t: _Seen(sample, tuple(sorted(ids[t]))) for t, sample in first.items()}


def _recover(
    ruleset: RuleSet,
    recover_results: Mapping[str, QueryResult],
    state: EngineState,
    now: float,
    dry_run: bool,
) -> tuple[list[Decision], set[TargetKey]]:
    """The cycle's recover decisions, and the targets whose success result was
    unknown. A target on a ladder recovers by its step's success condition
    (``Rule.success``), read from ``recover_results[success_key(...)]``."""
    decisions: list[Decision] = []
    unknown: set[TargetKey] = set()
    for rule in ruleset.rules:
        if not has_success(rule):
            continue
        keys = sorted(
            (k for k in state.active if k[0] == rule.name), key=lambda k: _order(rule, k[1])
        )
        known: dict[str, dict[Labels, _Seen] | None] = {}
        for key in keys:
            step = step_of(state, key)
            success = rule.success(step) if rule.escalate else rule.recover
            if success is None or keeps(state, key):
                # An isolation is never undone by a recover: the part stays out.
                continue
            name = success_key(rule, step)
            if name not in known:
                known[name] = _present(rule, recover_results.get(name), state, "recover")
            present = known[name]
            if present is None:
                unknown.add(key)
                continue
            seen = present.get(key[1])
            ladder = state.ladders.get(key)
            unfinished = ladder is not None and ladder.step > 1 and ladder.outcome != "done"
            if seen is None or unfinished:
                # A later step succeeds only once its action has said "done": a
                # device that stayed up after its fault is no proof that the reset
                # or reboot it waits for happened (the agent may have refused), so
                # its success window starts when the action finishes.
                state.recovering.pop(key, None)
                continue
            since = state.recovering.setdefault(key, now)
            if now - since < success.for_:
                continue
            del state.active[key]
            del state.recovering[key]
            ladder = state.ladders.pop(key, None)
            # The recover ends the incident: while the condition goes on holding,
            # nothing starts again.
            incident = state.incidents.get(key)
            if incident is not None and incident.handled is None:
                state.incidents[key] = replace(incident, handled=now)
            what = "" if ladder is None else f"step {step} ({rule.step(step).action.type}) "
            decisions.append(
                _decision(
                    rule,
                    "recover",
                    key[1],
                    seen.sample,
                    now,
                    dry_run,
                    f"{what}recover held for {format_duration(now - since)} "
                    f"(for: {format_duration(success.for_)})",
                    extra={} if ladder is None else {"step": step, "incident": ladder.started},
                )
            )
    return decisions, unknown


def _fire(
    ruleset: RuleSet,
    present_by_rule: Mapping[str, dict[Labels, _Seen] | None],
    state: EngineState,
    now: float,
    recovered: set[TargetKey],
) -> list[_Fired]:
    fired: list[_Fired] = []
    for rule in ruleset.rules:
        present = present_by_rule.get(rule.name)
        if present is None:
            continue
        for key in [k for k in state.incidents if k[0] == rule.name and k[1] not in present]:
            del state.incidents[key]
        for target, seen in sorted(present.items(), key=lambda kv: _order(rule, kv[0])):
            key = (rule.name, target)
            incident = _incident(state.incidents.get(key), seen.ids, now)
            covered = rule.recover is not None or bool(rule.escalate)
            if incident.handled is None and covered and key in state.active:
                incident = replace(incident, handled=now)
            state.incidents[key] = incident
            if key in recovered or not _due(rule, incident, now):
                continue
            last = state.last_acted.get(key)
            if last is not None and now - last < rule.cooldown:
                state.notes.append(
                    Note(
                        rule.name,
                        "held",
                        f"cooldown: acted at {last:g}, cooldown "
                        f"{format_duration(rule.cooldown)} ends at {last + rule.cooldown:g}",
                        target,
                    )
                )
                continue
            # Only remediation of a node that is unwell counts towards the breaker:
            # moving load off a busy node (rebalance) is not a sign of a storm.
            node = _node(target) if _unhealthy(rule) else None
            fired.append(_Fired(rule, target, seen.sample, incident.since, node, incident.ids))
    return fired


def _unhealthy(rule: Rule) -> bool:
    """Whether the rule treats its target's node as unwell (any step of a ladder)."""
    steps = rule.escalate or (rule.step(1),)
    return any(s.action.type in UNHEALTHY_ACTIONS for s in steps)


def _incident(current: Incident | None, ids: tuple[str, ...], now: float) -> Incident:
    """The incident a target present at ``now`` is in: the one in progress, or a new
    one when there is none or its alert identities are all new."""
    if current is None or (current.ids and ids and not set(current.ids) & set(ids)):
        return Incident(now, ids)
    if ids and ids != current.ids:
        return replace(current, ids=ids)
    return current


def _due(rule: Rule, incident: Incident, now: float) -> bool:
    """Whether the incident should act now, before cooldowns and limits."""
    if incident.handled is None:
        return now - incident.since >= rule.for_
    return rule.repeat > 0 and now - incident.handled >= rule.repeat


def _close_window_breaker(
    limits: Limits,
    fired: list[_Fired],
    state: EngineState,
    cluster: ClusterInfo | None,
    now: float,
) -> None:
    if not state.breaker_open or limits.breaker_reset != "window":
        return
    opened = state.breaker_opened_at
    if opened is not None and now - opened < limits.breaker_window:
        return
    try:
        allowed = allowed_unhealthy(limits, cluster, now)
    except SizeUnknown:
        return
    wanted = counted(
        [a.node for a in state.active.values()] + [f.node for f in fired], limits, cluster, now
    )
    if allowed is not None and len(wanted) > allowed:
        return
    state.breaker_open = False
    state.breaker_opened_at = None
    state.breaker_reason = ""
    state.notes.append(
        Note(
            "",
            "breaker",
            f"closed: {format_duration(limits.breaker_window)} passed and "
            f"{_nodes(len(wanted))} want remediation, within "
            f"{describe_limit(limits, cluster, now)}",
        )
    )


@dataclass
class _Room:
    """What this cycle's limits have left, counted as targets act: not frozen,
    since each act in the cycle takes its share before the next is weighed."""

    allowed: int | None
    size_unknown: str | None
    unhealthy: set[str]
    active_by_rule: Counter[str]
    drains: int
    actions_by_rule: Counter[str]


def _gate(
    limits: Limits,
    fired: list[_Fired],
    state: EngineState,
    cluster: ClusterInfo | None,
    now: float,
    dry_run: bool,
) -> list[Decision]:
    size_unknown: str | None = None
    try:
        allowed = allowed_unhealthy(limits, cluster, now)
    except SizeUnknown as e:
        allowed, size_unknown = None, str(e)
    room = _Room(
        allowed=allowed,
        size_unknown=size_unknown,
        unhealthy=counted((a.node for a in state.active.values()), limits, cluster, now),
        active_by_rule=Counter(rule for rule, _ in state.active),
        drains=sum(1 for a in state.active.values() if a.action in DRAIN_ACTIONS),
        actions_by_rule=Counter(rule for _, rule in state.actions),
    )
    decisions: list[Decision] = []
    for f in fired:
        held = _held_by_limit(f, limits, state, room)
        counts = False
        if held is None:
            counts = f.node is not None and not in_grace(f.node, limits, cluster, now)
            held = _held_by_size(f, counts, limits, state, cluster, now, room)
        if held is not None:
            state.notes.append(Note(f.rule.name, "held", held, f.target))
            continue
        decisions.append(_act(f, counts, state, now, dry_run, room))
    return decisions


def _held_by_limit(f: _Fired, limits: Limits, state: EngineState, room: _Room) -> str | None:
    """Why the breaker or a count limit holds this target back, or None."""
    rule = f.rule
    if state.breaker_open:
        return f"circuit breaker open: {state.breaker_reason}"
    rl = rule.limits
    if rl.max_concurrent is not None and room.active_by_rule[rule.name] >= rl.max_concurrent:
        return (
            f"maxConcurrent: {room.active_by_rule[rule.name]} targets under remediation "
            f"by this rule (limit {rl.max_concurrent})"
        )
    if rl.max_actions_per_hour is not None and room.actions_by_rule[rule.name] >= (
        rl.max_actions_per_hour
    ):
        return (
            f"maxActionsPerHour: {room.actions_by_rule[rule.name]} actions by this rule in "
            f"the last hour (limit {rl.max_actions_per_hour})"
        )
    if limits.max_actions_per_hour is not None and (
        len(state.actions) >= limits.max_actions_per_hour
    ):
        return (
            f"global maxActionsPerHour: {len(state.actions)} actions in the last hour "
            f"(limit {limits.max_actions_per_hour})"
        )
    max_drains = limits.max_concurrent_drains
    if rule.action.type in DRAIN_ACTIONS and max_drains is not None and room.drains >= max_drains:
        return f"maxConcurrentDrains: {room.drains} drains in progress (limit {max_drains})"
    return None


def _held_by_size(
    f: _Fired,
    counts: bool,
    limits: Limits,
    state: EngineState,
    cluster: ClusterInfo | None,
    now: float,
    room: _Room,
) -> str | None:
    """Why one more unhealthy node is too many, or None. Going over the limit
    opens the breaker (its note comes before the hold's)."""
    if not counts or f.node in room.unhealthy:
        return None
    if room.size_unknown is not None:
        return room.size_unknown
    if room.allowed is not None and len(room.unhealthy) + 1 > room.allowed:
        state.breaker_open = True
        state.breaker_opened_at = now
        state.breaker_reason = (
            f"{_nodes(len(room.unhealthy) + 1)} under remediation would exceed "
            f"{describe_limit(limits, cluster, now)}"
        )
        state.notes.append(Note("", "breaker", f"opened: {state.breaker_reason}"))
        return f"circuit breaker opened: {state.breaker_reason}"
    return None


def _act(
    f: _Fired, counts: bool, state: EngineState, now: float, dry_run: bool, room: _Room
) -> Decision:
    """The target acts: it becomes active, its incident handled, and the act is
    counted against the limits the rest of the cycle is weighed by."""
    rule = f.rule
    if counts and f.node is not None:
        room.unhealthy.add(f.node)
    state.active[f.key] = Active(now, rule.action.type, f.node)
    state.last_acted[f.key] = now
    state.actions.append((now, rule.name))
    state.incidents[f.key] = replace(state.incidents[f.key], handled=now)
    room.active_by_rule[rule.name] += 1
    room.actions_by_rule[rule.name] += 1
    room.drains += rule.action.type in DRAIN_ACTIONS
    reason = "condition held" if rule.alertname is None else f"alert {rule.alertname} firing"
    # The alert's identity leaves the sample with the bookkeeping labels; the
    # reason keeps it, so that the log says which incident acted.
    incident = f"; incident {', '.join(f.ids)}" if f.ids else ""
    extra = start(rule, f.key, state, now, f.sample.labels) if rule.escalate else {}
    ladder = state.ladders.get(f.key) if rule.escalate else None
    why = f"; {ladder.why}" if ladder is not None and ladder.why else ""
    return _decision(
        rule,
        "act",
        f.target,
        f.sample,
        now,
        dry_run,
        f"{reason} for {format_duration(now - f.since)} "
        f"(for: {format_duration(rule.for_)}){incident}{why}",
        extra=extra,
    )


def _decision(
    rule: Rule,
    kind: Literal["act", "recover"],
    target: Labels,
    sample: Sample,
    now: float,
    dry_run: bool,
    reason: str,
    *,
    extra: Mapping[str, float | int] | None = None,
) -> Decision:
    # A recover undoes through the first step that can be undone (the ladder's
    # taint or cordon); an act is the rule's (first) action.
    action = rule.undo_action() if kind == "recover" else rule.action
    return Decision(
        rule=rule.name,
        kind=kind,
        action=action.type,
        params=dict(action.params),
        target=dict(target),
        sample_labels=sample.labels,
        sample_value=sample.value,
        at=now,
        dry_run=dry_run,
        reason=reason,
        extra=dict(extra or {}),
    )
