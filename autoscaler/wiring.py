"""How the evaluation cycle is wired to what acts: one builder for the controller
and the simulator.

``engine/cycle.py`` is the one evaluation cycle; what sits around it (the engine
state it mutates, the executor that carries its decisions out, the hooks through
which an action's outcome reaches an escalation ladder, the history a source keeps)
is wired here, once, so that the controller (``autoscaler/controller.py``) and the
fleet simulator (``autoscaler/simulate/run.py``) cannot drift apart: a figure the
simulator prints comes from the same wiring the controller runs.

- The executor receives its hooks in its constructor: ``report_outcomes`` puts
  every act's outcome into the engine state (a ladder step's: a ``failed`` step
  escalates at the next cycle, ``engine/ladder.py``; and an act that did nothing,
  ``acted``, gives back its place in ``maxActionsPerHour`` and, outside a ladder,
  its target's in the breaker's count), and ``ladder_steps`` gives a resumed
  in-flight entry its step back. Nothing is rewired after construction. Since the
  controller and the simulator are both wired here, they count the same acts.
- What a source keeps history for is decided from ``Rule.expressions()`` (every
  expression a rule may be asked: its own, its recover's, its ladder steps'
  recovers), ``NODES_QUERY`` (the breaker's nodes), what the actions and the
  rhythm learner ask themselves, in ``retained``; a source with the ``Retaining``
  capability is told (and keeps of each metric what these read of it), others
  keep their own history.
- The cluster-state series go into the source's store when it has one
  (``StoreBacked``): capabilities are Protocols checked with ``isinstance``.

The builder sits below the controller and the simulator and above the executor
(the "Autoscaler layers" contract in pyproject.toml), so both may import it and it
imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.remedies import UNSUPPORTED_REASON
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.spares import POOL_PLACEHOLDER
from autoscaler.actions.rebalance import LOAD_QUERY
from autoscaler.decision import Decision
from autoscaler.engine.cycle import NODES_QUERY
from autoscaler.engine.state import NOTHING_DONE, EngineState
from autoscaler.executor import Executor, LadderStep, OnOutcome
from autoscaler.promql.matchers import quote
from autoscaler.promql.store import SeriesStore
from autoscaler.rhythm import READS as RHYTHM_READS
from autoscaler.ruleset.model import Action, RuleSet
from autoscaler.sources.base import Retaining, Source, StoreBacked
from autoscaler.types import labels_of

# The detail of a step action's outcome that names its request to the node agent
# (reset_devices, reboot_node): such a request was written after the move.
AGENT_REQUEST = "request"

# The rule set in force when asked (the controller's reloads change it).
Rules = Callable[[], RuleSet]


@dataclass(frozen=True)
class Wiring:
    """The engine state, and the executor whose outcomes reach it (None where
    nothing acts: no Kubernetes API, or a rule test), and the store the
    cluster-state series go into (None: the source keeps its own series)."""

    state: EngineState
    executor: Executor | None
    store: SeriesStore | None


def wire(
    source: Source,
    rules: Rules,
    ctx: ActionContext | None = None,
    *,
    state: EngineState | None = None,
) -> Wiring:
    """The engine state (``state``, else a fresh one) and, with ``ctx``, an executor
    built with the ladder hooks on that state; ``rules`` is read when an in-flight
    entry is resumed, so it sees the rules in force then."""
    state = EngineState() if state is None else state
    executor = None
    if ctx is not None:
        executor = Executor(
            ctx, on_outcome=report_outcomes(state), ladder_step=ladder_steps(state, rules)
        )
    store = source.store if isinstance(source, StoreBacked) else None
    return Wiring(state, executor, store)


def report_outcomes(state: EngineState) -> OnOutcome:
    """The executor's outcome hook. A ladder step's outcome goes into the engine
    state (a late one of an earlier step is ignored there), so that a ``failed``
    step escalates at the next cycle and a later step succeeds only once its
    action said ``done``. An act that did nothing (``acted``) is released from
    the hourly count (``EngineState.report`` for a step, ``EngineState.void`` for
    a rule's act). A resumed act (after a restart: ``Executor.resume``, the
    controller's unreported ladder steps) releases nothing: its first run may have
    acted before the restart, whatever the second finds left to do. Recover
    decisions count towards no limit."""

    def report(d: Decision, outcome: Outcome) -> None:
        if d.kind != "act":
            return
        did = acted(outcome) or bool(d.extra.get("resumed"))
        step = d.extra.get("step")
        if isinstance(step, int):
            state.report(d.rule, d.target, step, ladder_outcome(outcome), acted=did)
        elif not did:
            state.void(d.rule, d.target, d.at)

    return report


def acted(outcome: Outcome) -> bool:
    """Whether an act's outcome says it may have changed the cluster, and so counts
    towards ``maxActionsPerHour`` (and, outside a ladder, keeps its target in the
    breaker's count). ``done`` and ``partial`` did; ``failed`` did (the action ran
    and the cluster's evidence says it did not work: an agent that tried the
    reset, evictions a budget refused, a node that did not come back; and a failed
    ladder step escalates at once, so a chain of failures must stay bounded by
    the hourly limit); ``unknown`` may have (an API error after a cordon or an
    eviction), and a limit errs towards counting. ``skipped`` did nothing (nothing
    to do, or not allowed), except the one skip that comes after work: the node
    agent's ``unsupported`` answer to a reset request, written after the taint and
    the move (``reset_devices``; its details name the ``request``)."""
    if ladder_outcome(outcome) not in NOTHING_DONE:
        return True
    return AGENT_REQUEST in outcome.details


def ladder_outcome(outcome: Outcome) -> str:
    """The word a ladder keeps for an outcome: ``unsupported`` for a step the node
    cannot perform (skipped with that reason: the ladder goes on at once), else
    the outcome's status."""
    if outcome.status == "skipped" and outcome.details.get("reason") == UNSUPPORTED_REASON:
        return UNSUPPORTED_REASON
    return outcome.status


def ladder_steps(state: EngineState, rules: Rules) -> LadderStep:
    """The executor's resume hook: the ladder extra for an in-flight entry it
    resumes, when the target's ladder is at a step of that entry's action."""

    def step_of(rule: str, target: Mapping[str, str], action: str) -> dict[str, Any] | None:
        ladder = state.ladders.get((rule, labels_of(target)))
        if ladder is None:
            return None
        try:
            if rules().rule(rule).step(ladder.step).action.type != action:
                return None
        except (KeyError, IndexError):
            return None
        return {"step": ladder.step, "incident": ladder.started}

    return step_of


# What the actions ask the source themselves (``ctx.query``) of one device at a
# time, by action type: the holders of a device, and its UUID for a reset.
ACTION_READS: dict[str, tuple[str, ...]] = {
    "migrate_jobs": ("accel_device_pod_info",),
    "reset_devices": ("accel_device_pod_info", "accel_device_info"),
    "reboot_node": ("accel_device_pod_info",),
}


def rule_reads(ruleset: RuleSet) -> list[str]:
    """What the evaluation cycle asks for ``ruleset``: the breaker's
    ``NODES_QUERY`` and every rule's ``expressions()``."""
    return [NODES_QUERY, *ruleset.expressions()]


def retained(ruleset: RuleSet) -> list[str]:
    """The expressions whose history a source must keep for ``ruleset``: what the
    cycle asks (``rule_reads``), what its actions ask themselves
    (``action_queries``) and the rhythm learner's queries."""
    return [*rule_reads(ruleset), *action_queries(ruleset), *RHYTHM_READS]


def action_queries(ruleset: RuleSet) -> list[str]:
    """The expressions the rules' actions ask the source themselves: over windows
    (``rebalance``'s load, a pool's ``spareFaultRateQuery`` with ``$pool`` filled
    in) and of one device (``ACTION_READS``, which need the lookback)."""
    out: list[str] = []
    for action in actions(ruleset):
        out.extend(ACTION_READS.get(action.type, ()))
        if action.type == "rebalance":
            out.append(LOAD_QUERY)
        spare = action.params.get("spareFaultRateQuery")
        if isinstance(spare, str) and spare:
            out.append(spare.replace(POOL_PLACEHOLDER, quote("pool")))
    return list(dict.fromkeys(out))


def actions(ruleset: RuleSet) -> list[Action]:
    """Every action ``ruleset`` may take: each rule's, and its ladder steps'."""
    return [a for rule in ruleset.rules for a in (rule.action, *(s.action for s in rule.escalate))]


def retain(source: Source, ruleset: RuleSet) -> None:
    """Tells a source that keeps its own history what ``ruleset`` asks; a source
    without the capability (Prometheus) is left alone."""
    if isinstance(source, Retaining):
        source.retain(retained(ruleset))


__all__ = [
    "ACTION_READS",
    "Rules",
    "Wiring",
    "acted",
    "action_queries",
    "actions",
    "ladder_outcome",
    "ladder_steps",
    "report_outcomes",
    "retain",
    "retained",
    "rule_reads",
    "wire",
]
