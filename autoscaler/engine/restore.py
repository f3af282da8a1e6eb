"""Rebuilding the engine's memory from what the controller wrote on the cluster.

Why it exists: the circuit breaker used to count nodes under remediation in memory
only. With ``maxUnhealthyNodes: 3``, a storm cordoned 3 nodes; after ``kill -9``
and a restart the re-sent storm cordoned 3 more, then 3 more: 9 nodes. A leader
failover did the same. So at start and at every leadership gain the controller
rebuilds its ``EngineState`` from two records on the cluster, never from memory
alone:

- **The nodes' remediation entries** (``accel-fleet.io/remediation``,
  ``autoscaler/actions/ops/ownership.py``), one per rule per node, written in the same
  conditional write that cordons or taints. Each entry of this controller (its
  ``--controller-name``) for a rule still in the rule set is an *active* target:
  the breaker counts its node (cordon, taint, drain, migrate_jobs), a re-sent
  alert for it does not act again, and its cooldown runs from its ``started``
  time at the earliest. The executor resumes the in-flight ones (``draining``,
  ``migrating``) from the same entries. An entry that ``mark_for_return`` settled
  (an isolated part) is not: its ladder ended, and it stays for an operator. A
  person who removes an entry (or the node) takes the target out of the count,
  which is what they meant.
- **The state record** (``record_of``): a ConfigMap of the controller's own,
  ``<controller-name>-state`` in its namespace, holding what belongs to no node:
  whether the breaker is open, since when and why (so that ``breakerReset:
  manual`` stays open across restarts until a person resets it), the per-target
  cooldowns (also of targets whose remediation ended, whose node entry is gone),
  the last hour's actions (``maxActionsPerHour``), the handled incidents (so a
  re-sent alert of an incident already acted on stays handled), and the active
  targets of actions that leave no node entry (requeue_job, rebalance,
  scale_node_pool), the escalation ladders (``engine/ladder.py``: step, since,
  started, outcome, class), and when each recent ladder started (the recurrence
  caps' counts: a device's third ladder in a day must isolate it after a restart
  too). The leader writes it after a cycle that changed it.

Ladders: a target on a ladder is active (and its node counted) when the record
has its ladder and either its node still carries our entry for the rule, or the
node is not listed at all: a node away being replaced (replace_machine) takes its
entry with it, and the breaker must go on counting it. A listed node without our
entry was released by a person, which ends the ladder too. A target active from
its node entry whose ladder the record lacks (killed before the first write) is
put back on the step whose action the entry names, from the entry's start.

How the two are merged with what the process remembers (``restore``): active
targets come from the cluster alone (memory may be stale: another replica led
meanwhile, a person undid a remediation); cooldowns and the hourly actions are the
later of the record and memory (a lost write must not shorten a cooldown; each
hourly act as often as either holds it, so two acts of one cycle stay two); the
breaker is the record's when there is one, else memory's; without a record, every
node entry started in the last hour counts as an action of its rule, so that a
deleted record does not reset ``maxActionsPerHour``; pending ``for:`` and
``recover.for`` waits start again (they are seconds, and starting them again
delays an action, never adds one).

``restore`` is a function of its arguments (no I/O, no clock): the controller reads
the nodes and the record, and writes the record back (``autoscaler/controller.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from autoscaler.actions.ops.ownership import entries, parse_iso
from autoscaler.engine.breaker import UNHEALTHY_ACTIONS
from autoscaler.engine.ladder import FINAL
from autoscaler.engine.record import (
    NODE_RECORDED,
    RECORD_VERSION,
    RecordError,
    parse_record,
    record_of,
    record_text,
)
from autoscaler.engine.state import Active, EngineState, Ladder, TargetKey
from autoscaler.kube.protocol import Obj
from autoscaler.ruleset.model import RuleSet
from autoscaler.types import labels_of

# How long an action counts towards maxActionsPerHour.
HOUR = 3600.0


@dataclass(frozen=True)
class Restored:
    """What ``restore`` found, for the log line and the tests."""

    # Targets under remediation, by rule.
    active: Mapping[str, int]
    # The nodes the breaker counts.
    nodes: tuple[str, ...]
    # "rule on node" for entries of this controller whose rule left the rule set.
    dropped: tuple[str, ...]
    breaker_open: bool
    breaker_reason: str
    # Whether there was a state record (the first start has none).
    record: bool
    cooldowns: int

    def summary(self) -> str:
        active = sum(self.active.values())
        parts = [
            f"{active} target(s) under remediation",
            f"{len(self.nodes)} node(s) counted by the breaker"
            + (f" ({', '.join(self.nodes)})" if self.nodes else ""),
            f"{self.cooldowns} cooldown(s)",
            "breaker open: " + self.breaker_reason if self.breaker_open else "breaker closed",
        ]
        if not self.record:
            parts.append("no state record yet")
        if self.dropped:
            parts.append(f"entries of rules no longer in the rule set: {', '.join(self.dropped)}")
        return "; ".join(parts)


def restore(
    state: EngineState,
    nodes: Iterable[Obj],
    record: EngineState | None,
    controller: str,
    ruleset: RuleSet,
    now: float,
) -> Restored:
    """Rebuild ``state`` (mutated in place) from the ``nodes`` as listed from the API
    and the state ``record`` (None when there is none), for the controller named
    ``controller`` and its current ``ruleset``; see the module docstring."""
    rules = {r.name for r in ruleset.rules}
    saved = record if record is not None else EngineState()
    found = _from_nodes(nodes, controller, rules, saved, now)
    active, starts, dropped, listed = found.active, found.starts, found.dropped, found.listed
    for key, a in saved.active.items():
        if key[0] in rules and a.action not in NODE_RECORDED:
            active.setdefault(key, a)
    ladders = _ladders(ruleset, saved.ladders, active, listed)

    last_acted = {k: v for k, v in state.last_acted.items() if k[0] in rules}
    for key, at in saved.last_acted.items():
        if key[0] in rules:
            last_acted[key] = max(at, last_acted.get(key, at))
    for key, a in active.items():
        last_acted[key] = max(a.since, last_acted.get(key, a.since))
    # Without a record (deleted, or never written), each node entry started in the
    # last hour is an action: maxActionsPerHour must not reset with a lost record.
    recorded = saved.actions if record is not None else starts
    actions = _hourly(state.actions, recorded, now)

    state.active = active
    state.ladders = ladders
    state.last_acted = last_acted
    state.actions = actions
    state.ladder_starts = _starts(ruleset, state.ladder_starts, saved.ladder_starts)
    state.recovering = {}
    state.incidents = {k: i for k, i in saved.incidents.items() if k[0] in rules}
    if record is not None:
        state.breaker_open = record.breaker_open
        state.breaker_opened_at = record.breaker_opened_at
        state.breaker_reason = record.breaker_reason
    counted_nodes = sorted({a.node for a in active.values() if a.node is not None})
    by_rule: dict[str, int] = {}
    for rule, _ in active:
        by_rule[rule] = by_rule.get(rule, 0) + 1
    return Restored(
        active=by_rule,
        nodes=tuple(counted_nodes),
        dropped=tuple(dropped),
        breaker_open=state.breaker_open,
        breaker_reason=state.breaker_reason,
        record=record is not None,
        cooldowns=len(last_acted),
    )


@dataclass
class _NodeEntries:
    """What the nodes' own remediation entries say: the targets they show active,
    the (start, rule) of each readable entry (the hourly actions), the entries of
    rules no longer in the rule set, and every node listed."""

    active: dict[TargetKey, Active] = field(default_factory=dict)
    starts: list[tuple[float, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)


def _from_nodes(
    nodes: Iterable[Obj], controller: str, rules: set[str], saved: EngineState, now: float
) -> _NodeEntries:
    """Reads the remediation entries this controller wrote on each node."""
    found = _NodeEntries()
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name", ""))
        found.listed.add(name)
        for rule, entry in sorted(entries(node).items()):
            if entry.controller != controller:
                continue
            if rule not in rules:
                found.dropped.append(f"{rule} on {name}")
                continue
            if entry.action in FINAL:
                # An isolated part (mark_for_return): its ladder ended; the entry
                # stays for an operator, not for a ladder to resume.
                continue
            target = dict(entry.target) or {"node": name}
            key = (rule, labels_of(target))
            try:
                # A start in the future (a hand-written entry, a skewed clock) would
                # hold the cooldown and the hourly count for ever: it is now.
                started = min(parse_iso(entry.started), now)
            except ValueError:
                # An unreadable start: the cooldown runs from now, the safe side.
                started = now
            found.starts.append((started, rule))
            since = max(started, saved.last_acted.get(key, started))
            counted = target.get("node", name) if entry.action in UNHEALTHY_ACTIONS else None
            found.active[key] = Active(since, entry.action, counted)
    return found


def _hourly(
    memory: Iterable[tuple[float, str]], recorded: Iterable[tuple[float, str]], now: float
) -> list[tuple[float, str]]:
    """The last hour's acts of memory and the record together: each (time, rule) as
    often as the one that holds it more often. Two acts of one rule in one cycle
    share their (time, rule), so a set would count them once after a restart; and
    an act that memory released (it did nothing) and a record not yet rewritten
    still holds is counted, the safe side."""
    mine = Counter(a for a in memory if now - a[0] < HOUR)
    theirs = Counter(a for a in recorded if now - a[0] < HOUR)
    return sorted((mine | theirs).elements())


def _starts(
    ruleset: RuleSet,
    memory: Mapping[TargetKey, tuple[float, ...]],
    saved: Mapping[TargetKey, tuple[float, ...]],
) -> dict[TargetKey, tuple[float, ...]]:
    """The recurrence caps' counts: every ladder start that memory or the record
    holds (each was recorded by a controller; a lost write must not forget one),
    for rules still in the rule set."""
    rules = {r.name for r in ruleset.rules}
    out: dict[TargetKey, tuple[float, ...]] = {}
    for key in {*memory, *saved}:
        if key[0] in rules:
            out[key] = tuple(sorted({*memory.get(key, ()), *saved.get(key, ())}))
    return out


def _ladders(
    ruleset: RuleSet,
    saved: Mapping[TargetKey, Ladder],
    active: dict[TargetKey, Active],
    listed: set[str],
) -> dict[TargetKey, Ladder]:
    """The ladders to go on with, and their targets made active (see the module
    docstring); ``active`` is completed in place."""
    out: dict[TargetKey, Ladder] = {}
    for rule in ruleset.rules:
        if not rule.escalate:
            continue
        types = [s.action.type for s in rule.escalate]
        for key, ladder in saved.items():
            node = dict(key[1]).get("node")
            if key[0] != rule.name or not (key in active or (node and node not in listed)):
                continue
            step = min(ladder.step, len(types))
            out[key] = replace(ladder, step=step)
            counted = node if any(t in UNHEALTHY_ACTIONS for t in types) else None
            active[key] = Active(ladder.started, types[step - 1], counted)
        for key, a in active.items():
            if key[0] == rule.name and key not in out:
                step = types.index(a.action) + 1 if a.action in types else 1
                out[key] = Ladder(step, a.since, a.since)
    return out


__all__ = [
    "NODE_RECORDED",
    "RECORD_VERSION",
    "RecordError",
    "Restored",
    "parse_record",
    "record_of",
    "record_text",
    "restore",
]
