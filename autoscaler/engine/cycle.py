"""One evaluation cycle: refresh the source, query every rule, evaluate, hand over.

The controller (``autoscaler/controller.py``), the fleet simulator
(``autoscaler/simulate/run.py``) and the rule unit tests (``engine/ruletest.py``)
all run their rules through ``run_cycle`` and nothing else. A figure the
simulator prints and a decision a rule test expects are therefore the decisions
the production controller makes for the same samples; what differs between the
three is only what they plug in:

- the ``Source``: Prometheus, scraped exporters, the simulation's telemetry, or a
  test file's input series (``sources/store.py``);
- the ``Alerts``: the Alertmanager receiver, or a test file's alerts;
- ``cluster``: which nodes the breaker counts. The controller asks its source
  (``NODES_QUERY``) and adds the registration times it read from the API; the
  simulator knows which nodes answered this cycle's scrape; a rule test names
  them. Absent (``None``), the breaker does not count.
- ``prepare``: work after the refresh and before the queries (the controller
  reads the cluster's state into series there, so that rules on job ages see this
  cycle's ages);
- ``submit``: where decisions go (the executor, or nowhere).

Between ``prepare`` and the queries, a healthy source is also asked the jobs'
utilization once, for the rhythm each job has shown (``autoscaler/rhythm.py``:
its recovered idle dips), which the stall rules read as series; the learner's
memory belongs to ``state``, so the three callers run it without plumbing.

"Unknown" is as narrow as the failure: sources answer a failed query with
``Unknown`` (``sources/base.py``), and should one raise anyway (a bug, an answer
nobody foresaw), the exception is that rule's ``Unknown`` with the reason, logged
with its traceback; the other rules are still asked and evaluated. A ``refresh``
that raises is a source that is down this cycle.

The order is part of the contract: a source that is down makes every expression
rule ``Unknown`` (``alertname`` rules read the receiver, which holds every alert
it was sent) and its cluster ``None``; a rule's ``recover`` expression is only
asked while the rule has active targets, and only about them, because
``evaluate`` reads a recover result for nothing else (``engine/evaluate.py``). A
rule with an escalation ladder is asked the success condition of the step each
active target is on: the rule's recover under the rule's name, a step's own under
``<rule>/<step>`` (``engine/ladder.py``), each about its own targets. A source with
the ``TargetedSource`` capability (``sources/base.py``) cuts that result down to
the targets before building it; others are cut down after the query.

What the cycle is plugged into is built once, for the controller and the simulator
alike, by ``autoscaler/wiring.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from autoscaler.decision import Decision
from autoscaler.engine.evaluate import evaluate
from autoscaler.engine.ladder import has_success, step_of, success_key
from autoscaler.engine.state import ClusterInfo, EngineState, TargetKey
from autoscaler.rhythm import learn, learner
from autoscaler.ruleset.model import TARGET_LABELS, Rule, RuleSet
from autoscaler.sources.base import Source, TargetedSource
from autoscaler.types import QueryResult, Unknown, Vector

log = logging.getLogger("accel_autoscaler.engine.cycle")

# The nodes the breaker counts, from the exporters' own series.
NODES_QUERY = "count by (node) (accel_up)"


class Alerts(Protocol):
    def vector(self, alertname: str, now: float) -> QueryResult:
        """The firing alerts of one name, each a sample of value 1."""
        ...


ClusterView = Callable[[float], Awaitable[ClusterInfo | None]]


@dataclass(frozen=True)
class CycleResult:
    now: float
    source_up: bool
    decisions: list[Decision]
    # Rules whose condition was unknown this cycle (source down, failed query).
    unknown: tuple[str, ...]


async def run_cycle(
    ruleset: RuleSet,
    source: Source,
    alerts: Alerts,
    state: EngineState,
    now: float,
    *,
    cluster: ClusterView | None = None,
    prepare: Callable[[float], Awaitable[None]] | None = None,
    submit: Callable[[Decision], object] | None = None,
    dry_run: bool = False,
) -> CycleResult:
    """One evaluation of ``ruleset`` at ``now``; mutates ``state`` (and records the
    decisions in it) and hands each decision to ``submit``."""
    try:
        up = await source.refresh(now)
    except Exception as e:
        log.exception("source %s: refresh failed: %s", source.name, e)
        up = False
    if prepare is not None:
        await prepare(now)
    if up:
        await _learn(state, source, now)
    info: ClusterInfo | None = None
    if up and cluster is not None:
        try:
            info = await cluster(now)
        except Exception as e:
            # Unknown cluster: the breaker does not count this cycle, as when down.
            log.exception("the cluster view failed: %s", e)
    down = Unknown(f"source {source.name} is down")
    active = {rule for rule, _ in state.active}
    results: dict[str, QueryResult] = {}
    recover: dict[str, QueryResult] = {}
    for rule in ruleset.rules:
        if rule.alertname is not None:
            results[rule.name] = alerts.vector(rule.alertname, now)
        elif not up:
            results[rule.name] = down
        else:
            assert rule.expr is not None
            results[rule.name] = await _ask(rule.name, source.query(rule.expr, now))
        if has_success(rule) and rule.name in active:
            for name, (expr, keys) in _successes(rule, state).items():
                recover[name] = (
                    await _ask(rule.name, _recover(rule, expr, keys, source, now)) if up else down
                )
    decisions = evaluate(
        ruleset, results, state, now, recover_results=recover, cluster=info, dry_run=dry_run
    )
    state.record(decisions)
    if submit is not None:
        for d in decisions:
            submit(d)
    unknown = tuple(name for name, r in results.items() if isinstance(r, Unknown))
    return CycleResult(now, up, decisions, unknown)


async def _learn(state: EngineState, source: Source, now: float) -> None:
    """The jobs' rhythm (``autoscaler/rhythm.py``), learned before the rules are
    asked so that they read this cycle's figures; a failure costs the figures of
    this cycle (the rules fall back to their conservative windows), not the cycle."""
    try:
        await learn(learner(state), source, now)
    except Exception as e:
        log.exception("the rhythm learner failed: %s", e)


async def _ask(rule: str, query: Awaitable[QueryResult]) -> QueryResult:
    """One rule's query; an exception is that rule's Unknown, not the cycle's end."""
    try:
        return await query
    except Exception as e:
        log.exception("rule %s: the query raised %s: %s", rule, type(e).__name__, e)
        return Unknown(f"query failed: {type(e).__name__}: {e}")


def _successes(rule: Rule, state: EngineState) -> dict[str, tuple[str, list[TargetKey]]]:
    """Result key -> (the success expression, the active targets it is asked for):
    one entry for the rule's recover, one per ladder step with its own."""
    out: dict[str, tuple[str, list[TargetKey]]] = {}
    for key in (k for k in state.active if k[0] == rule.name):
        step = step_of(state, key)
        success = rule.success(step) if rule.escalate else rule.recover
        if success is not None:
            out.setdefault(success_key(rule, step), (success.expr, []))[1].append(key)
    return out


async def _recover(
    rule: Rule, expr: str, keys: list[TargetKey], source: Source, now: float
) -> QueryResult:
    """A recover (success) condition for some of the rule's active targets only."""
    names = TARGET_LABELS[rule.target]
    wanted = [tuple(dict(key[1]).get(n, "") for n in names) for key in keys]
    if isinstance(source, TargetedSource):
        return await source.query_targets(expr, now, names, wanted)
    result = await source.query(expr, now)
    if not isinstance(result, Vector):
        return result
    keep = set(wanted)
    return Vector(tuple(s for s in result.samples if tuple(s.get(n, "") for n in names) in keep))


def source_cluster(source: Source, registered: Callable[[], dict[str, float]]) -> ClusterView:
    """The controller's view of the cluster: the nodes whose exporters report
    (``NODES_QUERY``), and those registered within the last hour (a scale-up's, in
    the breaker's grace period) from ``registered`` (node -> registration time)."""

    async def view(now: float) -> ClusterInfo | None:
        result = await source.query(NODES_QUERY, now)
        if not isinstance(result, Vector):
            return None
        nodes = frozenset(s.get("node") for s in result.samples if s.get("node"))
        recent = {n: t for n, t in registered().items() if now - t < 3600}
        return ClusterInfo(nodes=nodes, recently_added=recent)

    return view
