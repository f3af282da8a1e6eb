"""What the engine remembers between cycles, and what the cluster looks like to it.

The engine is a function of (rule set, query results, state, time); everything it
must carry from one cycle to the next lives here, in plain dictionaries keyed by
(rule name, target labels), so that the whole of it can be shown on
``GET /api/v1/state``, written to JSON and read back (``to_json``/``from_json``)
without losing anything the engine decides on.

``evaluate`` mutates the ``EngineState`` it is given (documented there); nothing
else in the engine keeps hidden state. The controller holds one ``EngineState``
for the life of the process, a rule unit test a fresh one per test.

Words used below:

- *incident*: one continuous stretch of time during which a rule's condition holds
  for a target: it starts with the first known result that contains the target and
  ends with the first known result that does not (an unknown result neither starts
  nor ends one). For an ``alertname`` rule it is also the alert's identity: the
  receiver labels each sample ``__incident__="<fingerprint>@<startsAt>"``, and a
  target whose identities are all new is a new incident even if no cycle saw it
  absent. A rule acts at most once per incident (or every ``repeat``, for the
  rules that ask for it); an incident that has acted, or found the target still
  under the rule's remediation, or was ended by the rule's ``recover``, is
  *handled*, and the rule does nothing more about it.
- *pending*: an incident that has not been handled yet, since when; it acts once
  it has lasted for the rule's ``for`` (and no cooldown or limit holds it).
- *active*: the rule acted on the target and has not undone it. With ``recover``
  a target stays active until the recover condition holds; without it, until the
  rule's cooldown ends (nothing else tells the engine that a one-shot action such as
  a requeue is over, and the cooldown is the rule author's word for how long it is
  in effect).
- *recovering*: an active target whose recover condition holds, since a time.
- *ladder*: for a rule with ``escalate``, where an active target stands on it: the
  step it is at (1-based), since when, when the ladder started (its first step,
  which is also the identity the step actions build their request ids from), and
  the outcome the executor reported for the step's action (None until it reports;
  ``report``). A ladder lives exactly as long as its target is active.

Acts are what acted: an act takes its place in the hourly count (``actions``, for
``maxActionsPerHour``) when it is decided, so that two decisions of one cycle
cannot overshoot a limit; when its outcome comes back saying it did nothing
(``NOTHING_DONE``: ``skipped``, ``unsupported``), the entry is released
(``void`` for a rule's act, ``report`` for a ladder step), and a rule's act also
releases the target it made active, so the breaker, ``maxConcurrent`` and
``maxConcurrentDrains`` forget it. Its cooldown still runs and its incident stays
handled. A ladder's target stays active: the ladder goes on to its next step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from autoscaler.decision import Decision
from autoscaler.types import Labels, labels_of

# How many decisions ``GET /api/v1/decisions`` can show.
DECISION_LOG_SIZE = 1000

# (rule name, target labels): the key of every per-target entry.
TargetKey = tuple[str, Labels]

# The outcome words of an act that changed nothing on the cluster: its hourly entry
# is released (``void``, ``report``). ``failed``, ``partial`` and ``unknown`` stay
# counted: each may have acted (docs/rules.md, "Acts are what acted").
NOTHING_DONE = frozenset({"skipped", "unsupported"})

NoteKind = Literal["unknown", "skipped", "held", "dropped", "breaker", "exhausted", "isolated"]
NOTE_KINDS: tuple[str, ...] = get_args(NoteKind)


@dataclass(frozen=True)
class ClusterInfo:
    """The nodes of the cluster, for the breaker's share of unhealthy nodes.

    ``recently_added`` maps a node to the time (unix seconds) a scale-up added it;
    such a node does not count towards the breaker for ``limits.scale_up_grace``
    seconds after that time.
    """

    nodes: frozenset[str]
    recently_added: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Active:
    """A target under remediation by a rule."""

    since: float
    action: str
    # The node this remediation concerns (node and device targets of the actions in
    # breaker.UNHEALTHY_ACTIONS), which the breaker counts; None for pod and pool
    # targets and for rebalance.
    node: str | None


@dataclass(frozen=True)
class Ladder:
    """Where an active target of a rule with ``escalate`` stands on its ladder."""

    step: int  # 1-based
    since: float  # when this step started
    started: float  # when step 1 started
    # The step's action outcome as the executor reported it ("done", "partial",
    # "skipped", "failed", "unknown"); None until it does. Only "failed" (evidence
    # from the cluster that the step did not work) escalates at once.
    outcome: str | None = None
    # The labels of the sample that started the ladder (a device's uuid, say), which
    # every later step's decision carries: a step must not know less than the first.
    labels: Labels = ()
    # The fault class the ladder follows (``Rule.takes``), fixed when it starts: the
    # value of the rule's ``classLabel`` on that sample, ``isolate`` when the
    # recurrence cap sent it there; None: unknown, every step.
    klass: str | None = None
    # Why the class is not the sample's (the recurrence cap), for every step's reason.
    why: str = ""


@dataclass(frozen=True)
class Incident:
    """A rule's condition holding for a target, from ``since`` until a known result
    lacks the target."""

    since: float
    # The ``__incident__`` label values (alert fingerprint@startsAt) of the target's
    # samples in the last known result, sorted; empty for expression rules.
    ids: tuple[str, ...] = ()
    # When the rule was done with this incident (it acted, the target was still
    # under the rule's remediation, or the rule's recover held); None while it is
    # pending. A rule with ``repeat`` acts again ``repeat`` after this.
    handled: float | None = None


@dataclass(frozen=True)
class Note:
    """Something the engine did not do, and why, for the caller to log and the API to
    show. Notes describe the last evaluation only.

    kind: ``unknown`` (the rule's result was unknown or named no target: no decision,
    pending kept), ``skipped`` (a sample lacks the labels that name the rule's target;
    ``labels`` are the sample's), ``held`` (a target that would fire was held back by a
    cooldown, a limit or the breaker; ``labels`` are the target's), ``dropped`` (an
    active target of a rule that is no longer in the rule set was forgotten),
    ``breaker`` (the breaker opened or closed; ``rule`` is empty), ``exhausted`` (a
    ladder's last step timed out without success: the target is released),
    ``isolated`` (an isolation ladder marked the part for return: the target is
    released, its taint and mark stay for an operator).
    """

    rule: str
    kind: NoteKind
    reason: str
    labels: Labels = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "kind": self.kind,
            "reason": self.reason,
            "labels": dict(self.labels),
        }


def _decisions() -> deque[Decision]:
    return deque(maxlen=DECISION_LOG_SIZE)


@dataclass
class EngineState:
    """The engine's memory. ``evaluate`` changes it; read it for the API and metrics."""

    # rule, target -> the incident in progress (the condition has held continuously,
    # over the cycles whose result was known, since ``Incident.since``).
    incidents: dict[TargetKey, Incident] = field(default_factory=dict)
    # rule, target -> since when the recover condition has held, for active targets.
    recovering: dict[TargetKey, float] = field(default_factory=dict)
    active: dict[TargetKey, Active] = field(default_factory=dict)
    # rule, target -> its place on the rule's escalation ladder (active targets of
    # rules with ``escalate`` only).
    ladders: dict[TargetKey, Ladder] = field(default_factory=dict)
    # rule, target -> when the rule last acted on it; a cooldown runs from here.
    last_acted: dict[TargetKey, float] = field(default_factory=dict)
    # (time, rule) of every "act" decision in the last hour, for the hourly limits.
    actions: list[tuple[float, str]] = field(default_factory=list)
    # rule, target (or the target's node, ``recurrence.per: node``) -> when each
    # ladder started within the rule's recurrence window, for its recurrence cap.
    ladder_starts: dict[TargetKey, tuple[float, ...]] = field(default_factory=dict)
    breaker_open: bool = False
    breaker_opened_at: float | None = None
    breaker_reason: str = ""
    decisions: deque[Decision] = field(default_factory=_decisions)
    notes: list[Note] = field(default_factory=list)
    last_evaluation: float | None = None

    def record(self, decisions: Iterable[Decision]) -> None:
        """Append to the decision log (the last ``DECISION_LOG_SIZE`` are kept).
        ``evaluate`` does not record: the caller does, once, after it has seen them."""
        self.decisions.extend(decisions)

    @property
    def pending(self) -> dict[TargetKey, float]:
        """Incidents not handled yet: rule, target -> since when the condition holds."""
        return {k: i.since for k, i in self.incidents.items() if i.handled is None}

    def pending_counts(self) -> dict[str, int]:
        """Pending targets by rule (condition holds, not acted on yet)."""
        return _count(rule for rule, _ in self.pending)

    def active_counts(self) -> dict[str, int]:
        """Targets under remediation by rule."""
        return _count(rule for rule, _ in self.active)

    def release(self, rule: str, target: Mapping[str, str]) -> bool:
        """Forget that ``rule`` is remediating ``target`` (the action failed for good,
        or a person undid it). The cooldown still runs, and the incident it acted in
        stays handled: the rule acts on the target again in its next incident. True
        if it was active."""
        key = (rule, labels_of(target))
        self.recovering.pop(key, None)
        self.ladders.pop(key, None)
        return self.active.pop(key, None) is not None

    def report(
        self,
        rule: str,
        target: Mapping[str, str],
        step: int,
        status: str,
        *,
        acted: bool | None = None,
    ) -> bool:
        """The executor's word on a ladder step's action: its outcome ``status``.
        Kept only while the target is still at that step (a late report of an
        earlier step changes nothing). The step's first report that it did nothing
        (``acted`` False; by default, a status in ``NOTHING_DONE``) releases its
        hourly entry, the one decided when the step started (``Ladder.since``); the
        target stays active, as the ladder goes on. True if it was kept."""
        key = (rule, labels_of(target))
        ladder = self.ladders.get(key)
        if ladder is None or ladder.step != step:
            return False
        if acted is None:
            acted = status not in NOTHING_DONE
        if ladder.outcome is None and not acted:
            _drop_one(self.actions, (ladder.since, rule))
        self.ladders[key] = replace(ladder, outcome=status)
        return True

    def void(self, rule: str, target: Mapping[str, str], at: float) -> bool:
        """The executor's word that the act of ``rule`` on ``target`` decided at
        ``at`` (not a ladder step: ``report``) did nothing: its hourly entry is
        released, and the target too if it is active from that very act (the
        breaker, ``maxConcurrent`` and ``maxConcurrentDrains`` stop counting it; a
        recover would undo nothing). Its cooldown still runs and its incident stays
        handled. Once per decision (the executor's outcome hook): entries are
        (time, rule), so a second call would release a sibling act of the same
        cycle. True if anything was released."""
        key = (rule, labels_of(target))
        released = _drop_one(self.actions, (at, rule))
        active = self.active.get(key)
        if active is not None and active.since == at and key not in self.ladders:
            released = self.release(rule, target) or released
        return released

    def to_json(self) -> dict[str, Any]:
        """Everything, as JSON-ready dicts and lists; ``from_json`` reads it back."""
        return {
            "pending": [_entry(k, since=v) for k, v in sorted(self.pending.items())],
            "incidents": [
                _entry(k, since=i.since, ids=list(i.ids), handledAt=i.handled)
                for k, i in sorted(self.incidents.items())
            ],
            "recovering": [_entry(k, since=v) for k, v in sorted(self.recovering.items())],
            "active": [
                _entry(k, since=a.since, action=a.action, node=a.node)
                for k, a in sorted(self.active.items())
            ],
            "ladders": [
                _entry(
                    k,
                    step=v.step,
                    since=v.since,
                    started=v.started,
                    outcome=v.outcome,
                    labels=dict(v.labels),
                    **{"class": v.klass, "why": v.why},
                )
                for k, v in sorted(self.ladders.items())
            ],
            "ladderStarts": [_entry(k, at=list(v)) for k, v in sorted(self.ladder_starts.items())],
            "cooldowns": [_entry(k, lastActedAt=v) for k, v in sorted(self.last_acted.items())],
            "actions": [{"at": at, "rule": rule} for at, rule in self.actions],
            "breaker": {
                "open": self.breaker_open,
                "openedAt": self.breaker_opened_at,
                "reason": self.breaker_reason,
            },
            "decisions": [d.as_json() for d in self.decisions],
            "notes": [n.as_json() for n in self.notes],
            "lastEvaluation": self.last_evaluation,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> EngineState:
        """The state that ``to_json`` wrote. Raises KeyError/TypeError/ValueError on a
        document of another shape. ``pending`` is derived from ``incidents``; a
        document from before incidents were kept has only ``pending``, whose entries
        are read as incidents not handled yet; one from before ladders has none."""
        breaker = doc["breaker"]
        if "incidents" in doc:
            incidents = {_key(e): _incident(e) for e in doc["incidents"]}
        else:
            incidents = {_key(e): Incident(float(e["since"])) for e in doc["pending"]}
        state = cls(
            incidents=incidents,
            recovering={_key(e): float(e["since"]) for e in doc["recovering"]},
            active={
                _key(e): Active(float(e["since"]), str(e["action"]), _opt_str(e["node"]))
                for e in doc["active"]
            },
            ladders={_key(e): _ladder(e) for e in doc.get("ladders", [])},
            last_acted={_key(e): float(e["lastActedAt"]) for e in doc["cooldowns"]},
            actions=[(float(e["at"]), str(e["rule"])) for e in doc["actions"]],
            ladder_starts={
                _key(e): tuple(float(t) for t in e["at"]) for e in doc.get("ladderStarts", [])
            },
            breaker_open=bool(breaker["open"]),
            breaker_opened_at=_opt_float(breaker["openedAt"]),
            breaker_reason=str(breaker["reason"]),
            notes=[_note(n) for n in doc["notes"]],
            last_evaluation=_opt_float(doc["lastEvaluation"]),
        )
        state.record(_decision(d) for d in doc["decisions"])
        return state


def reset_breaker(state: EngineState, now: float) -> bool:
    """A person closes the breaker (``POST /api/v1/breaker/reset``). Works whatever
    ``breakerReset`` says. The next evaluation opens it again if remediation would
    still exceed the limit. Returns whether it was open."""
    was_open = state.breaker_open
    state.breaker_open = False
    state.breaker_opened_at = None
    state.breaker_reason = ""
    if was_open:
        state.notes.append(Note("", "breaker", f"closed by a person at {now:g}"))
    return was_open


def _drop_one(actions: list[tuple[float, str]], entry: tuple[float, str]) -> bool:
    """Remove one ``entry`` from the hourly actions; False when there is none (it
    left the hour, or a restored record lacks it)."""
    try:
        actions.remove(entry)
    except ValueError:
        return False
    return True


def _count(rules: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for rule in rules:
        out[rule] = out.get(rule, 0) + 1
    return out


def _entry(key: TargetKey, **values: Any) -> dict[str, Any]:
    rule, target = key
    return {"rule": rule, "target": dict(target), **values}


def _key(entry: Mapping[str, Any]) -> TargetKey:
    target = entry["target"]
    if not isinstance(target, Mapping):
        raise TypeError(f"target must be a mapping, got {type(target).__name__}")
    return (str(entry["rule"]), labels_of({str(k): str(v) for k, v in target.items()}))


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _incident(entry: Mapping[str, Any]) -> Incident:
    ids = entry["ids"]
    if not isinstance(ids, list):
        raise TypeError(f"ids must be a list, got {type(ids).__name__}")
    return Incident(
        float(entry["since"]), tuple(sorted(str(i) for i in ids)), _opt_float(entry["handledAt"])
    )


def _ladder(entry: Mapping[str, Any]) -> Ladder:
    step = entry["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"ladder step must be a whole number from 1, got {step!r}")
    labels = entry.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise TypeError(f"ladder labels must be a mapping, got {type(labels).__name__}")
    return Ladder(
        step,
        float(entry["since"]),
        float(entry["started"]),
        _opt_str(entry.get("outcome")),
        labels_of({str(k): str(v) for k, v in labels.items()}),
        _opt_str(entry.get("class")),
        str(entry.get("why") or ""),
    )


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _note(doc: Mapping[str, Any]) -> Note:
    kind = doc["kind"]
    if kind not in NOTE_KINDS:
        raise ValueError(f"note kind must be one of {', '.join(NOTE_KINDS)}, got {kind!r}")
    labels = {str(k): str(v) for k, v in doc["labels"].items()}
    return Note(str(doc["rule"]), kind, str(doc["reason"]), labels_of(labels))


def _decision(doc: Mapping[str, Any]) -> Decision:
    kind = doc["kind"]
    if kind not in ("act", "recover"):
        raise ValueError(f"decision kind must be act or recover, got {kind!r}")
    sample = doc["sample"]
    return Decision(
        rule=str(doc["rule"]),
        kind=kind,
        action=str(doc["action"]),
        params=dict(doc["params"]),
        target={str(k): str(v) for k, v in doc["target"].items()},
        sample_labels=labels_of({str(k): str(v) for k, v in sample["labels"].items()}),
        sample_value=float(sample["value"]),
        at=float(doc["at"]),
        dry_run=bool(doc["dryRun"]),
        reason=str(doc["reason"]),
        extra=dict(doc.get("extra") or {}),
    )
