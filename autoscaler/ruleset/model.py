"""The typed rule model. The loader builds it; the engine, the sources and the API
read it. Durations are seconds; every rule remembers where it was written (a
``Position``, as every YAML reader here reports it) so that any later message about
it can point at the file and line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from accel_common.yamlread import Position
from autoscaler.actions import ACTIONS

# The label that names what a rule acts on. "pool" is for scale_node_pool, whose
# expressions are per node pool.
Target = Literal["node", "device", "pod", "pool"]
TARGETS: tuple[str, ...] = ("node", "device", "pod", "pool")
# The labels that name a rule's target in each sample of its expression, and in a
# Decision's target. Here, below both, because the loader checks that an
# expression can produce them and the engine reads them off every sample.
TARGET_LABELS: dict[str, tuple[str, ...]] = {
    "node": ("node",),
    "device": ("node", "device"),
    "pod": ("namespace", "pod"),
    "pool": ("pool",),
}


# The class whose steps a ladder of unknown class takes (``Rule.takes``).
UNKNOWN_LADDER = "reset"


@dataclass(frozen=True)
class Action:
    """An action type (``cordon``, ``taint``, ``drain``, ``migrate_jobs``,
    ``requeue_job``, ``rebalance``, ``scale_node_pool``, ``uncordon``) and its
    parameters, already validated and with defaults filled in."""

    type: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Recover:
    """When ``expr`` has held for ``for_`` seconds for a target that this rule
    acted on, the action is undone (hysteresis: the trigger and the recovery are
    different conditions)."""

    expr: str
    for_: float = 0.0


@dataclass(frozen=True)
class Step:
    """One rung of an escalation ladder (``escalate:``): an action, how long it has
    to succeed before the next step starts (``timeout``, seconds; None only on the
    last step: the ladder then waits on it until the target recovers), and what
    success means for it (``recover``; None: the rule's)."""

    action: Action
    timeout: float | None = None
    recover: Recover | None = None
    # Position is a frozen dataclass (from accel_common), so one default is safe to share.
    position: Position = Position("<memory>", 1, 1)  # noqa: RUF009
    # ``classes:``: the fault classes (accel_common.remedies.ACTION_CLASSES) whose
    # ladders take this step; empty: every ladder takes it. Only on a rule with a
    # ``classLabel`` (``Rule.takes`` says which steps a ladder of a class takes).
    classes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Recurrence:
    """``recurrence:``: more than ``max`` ladders of this rule for one target (or,
    ``per: node``, for one node) within ``window`` seconds: the next ladder follows
    the ``isolate`` class whatever its fault says, and is left for an operator."""

    max: int
    window: float
    per: Literal["target", "node"] = "target"


@dataclass(frozen=True)
class RuleLimits:
    """Per-rule limits; None means no limit of that kind."""

    max_concurrent: int | None = None
    max_actions_per_hour: int | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    # Exactly one of expr and alertname is set: a rule is either evaluated (PromQL)
    # or triggered by a firing Alertmanager alert of that name.
    expr: str | None
    alertname: str | None
    target: Target
    # With ``escalate``, the first step's action (what the rule does first).
    action: Action
    description: str = ""
    for_: float = 0.0
    # The least time between two acts of this rule on one target (see
    # engine/evaluate.py: a rule acts once per incident, and cooldown spaces them).
    cooldown: float = 0.0
    # While one incident lasts, act again this long after the last act; 0: once per
    # incident. Only for actions that cannot be undone (capacity and load: a pool
    # still short of nodes after one was added); the loader refuses it elsewhere.
    repeat: float = 0.0
    limits: RuleLimits = RuleLimits()
    recover: Recover | None = None
    # Position is a frozen dataclass (from accel_common), so one default is safe to share.
    position: Position = Position("<memory>", 1, 1)  # noqa: RUF009
    # The escalation ladder (``escalate:``), empty for a rule with one ``action``.
    # Step i (1-based) is ``escalate[i - 1]``; see engine/evaluate.py for when each
    # one starts.
    escalate: tuple[Step, ...] = ()
    # ``classLabel:``: the sample label whose value is the fault's class (the
    # exporter's ``action``); a ladder follows the steps of its class. None: every
    # ladder takes every step.
    class_label: str | None = None
    recurrence: Recurrence | None = None

    def takes(self, i: int, klass: str | None) -> bool:
        """Whether a ladder of class ``klass`` takes step ``i`` (1-based). Step 1
        is the rule's act, and a step without ``classes``, every ladder takes. A
        ladder whose class is unknown (no label, or a value no step names) takes
        the steps of ``reset`` (UNKNOWN_LADDER): the gentlest full ladder, which
        every fatal fault followed before faults had classes; never ``isolate``'s,
        which nothing undoes."""
        step = self.escalate[i - 1]
        if i == 1 or not step.classes:
            return True
        if klass is None or klass not in self.classes():
            klass = UNKNOWN_LADDER
        return klass in step.classes

    def classes(self) -> frozenset[str]:
        """Every class some step of the ladder names."""
        return frozenset(c for s in self.escalate for c in s.classes)

    def step(self, i: int) -> Step:
        """Step ``i`` (1-based) of the ladder; a rule without one has one step, its
        action."""
        if not self.escalate:
            return Step(self.action, None, None, self.position)
        return self.escalate[i - 1]

    def success(self, i: int) -> Recover | None:
        """What success means for step ``i``: its recover, else the rule's."""
        own = self.escalate[i - 1].recover if self.escalate else None
        return own if own is not None else self.recover

    def expressions(self) -> tuple[str, ...]:
        """Every PromQL expression the evaluation cycle may ask for this rule: its
        own (none for an ``alertname`` rule), its recover's, and the recovers of its
        ladder's steps. What a source keeps history for is decided from this, once
        (``autoscaler/wiring.py``), for the controller and the simulator alike."""
        recovers = (self.recover, *(s.recover for s in self.escalate))
        exprs = (self.expr, *(r.expr for r in recovers if r is not None))
        return tuple(e for e in exprs if e)

    def undo_action(self) -> Action:
        """The action whose recover path undoes what the rule did: the first step
        that can be undone (its taint or cordon stays on the node through the later
        steps); the rule's action without a ladder."""
        for s in self.escalate:
            spec = ACTIONS.get(s.action.type)
            if spec is not None and spec.reversible:
                return s.action
        return self.action


@dataclass(frozen=True)
class Limits:
    """Global limits and the circuit breaker."""

    # maxUnhealthyNodes: a count ("3") or a share of nodes ("10%"); at most one is set.
    max_unhealthy_nodes: int | None = None
    max_unhealthy_ratio: float | None = None
    max_concurrent_drains: int | None = None
    max_actions_per_hour: int | None = None
    # How an open breaker closes: "manual" (POST /api/v1/breaker/reset) or "window"
    # (after breakerWindow seconds with the share back under the limit).
    breaker_reset: Literal["manual", "window"] = "window"
    breaker_window: float = 1800.0
    # Nodes that a scale-up added within this many seconds do not count towards the
    # breaker: a new, still-initialising node is not a fault storm.
    scale_up_grace: float = 600.0


@dataclass(frozen=True)
class RuleSet:
    evaluation_interval: float = 15.0
    limits: Limits = Limits()
    rules: tuple[Rule, ...] = ()
    files: tuple[str, ...] = ()

    def rule(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)

    def expressions(self) -> tuple[str, ...]:
        """Every rule's ``expressions()``, each once, in rule order."""
        return tuple(dict.fromkeys(e for r in self.rules for e in r.expressions()))


__all__ = [
    "TARGETS",
    "TARGET_LABELS",
    "Action",
    "Limits",
    "Position",
    "Recover",
    "Recurrence",
    "Rule",
    "RuleLimits",
    "RuleSet",
    "Step",
    "Target",
]
