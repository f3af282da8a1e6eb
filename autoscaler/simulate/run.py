"""``accel-autoscaler simulate``: run a scenario with the rules and without, and
say what the rules were worth.

The rules run evaluates with the production evaluation cycle
(``engine/cycle.py``'s ``run_cycle``, the function ``Controller.cycle`` and the
rule unit tests call): the rule files through the loader, the engine's
``evaluate``, every decision handed to the production ``Executor``, which runs
each decision's ``ACTIONS[...].execute`` with an ``ActionContext`` whose ``kube``
is the in-memory cluster, whose ``clock`` is simulated time and whose ``sleep``
waits in simulated time while the fleet goes on (an eviction that a
PodDisruptionBudget refuses is retried minutes later, in simulated minutes).
Pools are scaled through the Cluster API provider against the cluster's
MachineDeployments. The engine state, the executor with its ladder hooks and the
history the store keeps are built by ``autoscaler/wiring.py``, the builder the
controller uses too. What the simulator plugs into the cycle is its own:

- the source (``SimSource``): the store is filled from the simulation
  (``telemetry.py``) rather than from HTTP scrapes, at the times the telemetry
  pipeline would deliver each sample (``pipeline.py``: the exporter's poll,
  Prometheus's scrape or the controller's own, the cluster state read at each
  evaluation), and answered by the same in-memory source class as ``--source
  scrape`` (``sources/store.py``), in this thread;
- the alerts (``alerting.py``, with ``telemetry.source: alertmanager``):
  Prometheus's alerting rules and Alertmanager's grouping, sending into the
  controller's own ``AlertReceiver``;
- the nodes the breaker counts (``fleet_cluster``): those whose exporter
  answered the latest scrape the evaluation can read, where the controller asks
  ``NODES_QUERY``.

The baseline (``--baseline none``) is the same fleet, the same jobs and the same
faults (every random stream is seeded from the scenario's seed, separately for
arrivals, jobs and faults) with no controller at all: a job on a failed device
hangs until its deadline, pools stay at their initial size.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection

import promql_parser as pp

from autoscaler.actions.context import ActionContext
from autoscaler.decision import Decision
from autoscaler.engine.cycle import ClusterView, run_cycle
from autoscaler.engine.state import ClusterInfo
from autoscaler.executor import Executor
from autoscaler.pools.base import NodePoolProvider
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.promql.guard import parse
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.model import RuleSet
from autoscaler.simulate.alerting import AlertPath, AlertRule, load_alert_rules
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.machines import CAPI_NAMESPACE
from autoscaler.simulate.pipeline import Phases, Pipeline, every
from autoscaler.simulate.results import Progress, RunResult
from autoscaler.simulate.scenario import Scenario
from autoscaler.simulate.schedulers import SCHEDULERS
from autoscaler.simulate.telemetry import Telemetry
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.store import StoreSource
from autoscaler.wiring import ACTION_READS, actions, retain, rule_reads, wire

log = logging.getLogger("accel_autoscaler.simulate")

RETENTION_FLOOR = 7200.0


class SimSource(StoreSource):
    """The controller's ``Source`` over the simulation: the pipeline
    (``pipeline.py``) fills the store, ``refresh`` says whether the source is up
    (Prometheus always; with ``source: scrape``, while any exporter answers, as the
    scrape source is), and queries are answered as every in-memory source answers
    them (``sources/store.py``).

    The store keeps at least ``RETENTION_FLOOR`` of history: it trims all its
    series every quarter of the retention, and with thousands of pods a day coming
    and going that trim costs more than keeping an hour or two more of samples. No
    result changes: every window reads only its own range."""

    name = "sim"

    def __init__(self, telemetry: Telemetry, *, scrapes_itself: bool = False) -> None:
        super().__init__(telemetry.store, retention_floor=RETENTION_FLOOR)
        self.telemetry = telemetry
        self.scrapes_itself = scrapes_itself

    async def refresh(self, at: float) -> bool:
        return bool(self.telemetry.scraped.any()) if self.scrapes_itself else True


def fleet_cluster(fleet: Fleet, pipeline: Pipeline) -> ClusterView:
    """The nodes the breaker counts: those whose exporter answered the latest
    scrape the evaluation can read, and their registration times (a scale-up's
    grace) as written into ``metadata.creationTimestamp``. The controller asks
    ``NODES_QUERY`` and reads every Node for the same two facts
    (``engine/cycle.py``); the pipeline and the fleet know them without a query
    and a parse of every Node."""

    async def view(now: float) -> ClusterInfo:
        nodes = pipeline.nodes(now)
        recent = fleet.registered_since(now - 3600.0)
        return ClusterInfo(nodes=nodes, recently_added=recent)

    return view


# Functions that count what happened inside their window (a fault counter's
# increase): evaluations further apart than such a window never see what happened
# in the gap. Functions over a state (``max_over_time(utilization[1m])``: idle for
# the last minute) ask about a condition that persists until something acts on
# it, so a later evaluation still sees it, and their windows may be shorter than
# the interval.
EVENT_FUNCTIONS = frozenset(
    {"increase", "rate", "irate", "delta", "idelta", "changes", "resets", "count_over_time"}
)


def event_ranges(expr: str) -> list[float]:
    """The ranges (``[5m]``) in ``expr`` that count events (``EVENT_FUNCTIONS``, or
    a subquery), in seconds."""
    ranges: list[float] = []

    def visit(node: pp.Expr) -> bool:
        if isinstance(node, pp.Call) and node.func.name in EVENT_FUNCTIONS:
            for arg in node.args:
                if isinstance(arg, pp.MatrixSelector) and arg.range:
                    ranges.append(arg.range.total_seconds())
        elif isinstance(node, pp.SubqueryExpr) and node.range:
            ranges.append(node.range.total_seconds())
        return True

    pp.walk(parse(expr), visit)
    return ranges


def shortest(named: Iterable[tuple[str, str]]) -> tuple[float, str] | None:
    """The shortest event-counting range over ``(name, expression)`` pairs, and
    the name of the expression that has it."""
    best: tuple[float, str] | None = None
    for name, expr in named:
        for r in event_ranges(expr):
            if best is None or r < best[0]:
                best = (r, name)
    return best


def shortest_window(ruleset: RuleSet) -> tuple[float, str] | None:
    """The shortest range (``[5m]``) that counts events in the rules' expressions,
    and its rule."""
    return shortest((rule.name, e) for rule in ruleset.rules for e in rule.expressions())


def action_reads(ruleset: RuleSet) -> list[str]:
    """The series the rules' actions (every ladder step's too) read themselves
    (``wiring.ACTION_READS``): the store must hold them when a rule uses the
    action, whether or not a rule's expression reads them."""
    out: list[str] = []
    for action in actions(ruleset):
        out.extend(e for e in ACTION_READS.get(action.type, ()) if e not in out)
    return out


class IntervalError(ValueError):
    """The scenario's intervals and the rules' windows do not fit together."""


def check_intervals(
    scenario: Scenario, ruleset: RuleSet, alert_rules: tuple[AlertRule, ...] = ()
) -> None:
    """Refuses intervals that would make the rules blind. A counter's rise shows
    between two consecutive samples, and ``increase`` sees it only in a window that
    holds both: with samples at each evaluation (``source: scrape``) evaluations
    further apart than the window leave gaps no window covers; with Prometheus's
    scrapes on their own phase, a window must also hold the scrape before the rise,
    so an evaluation and a scrape interval together must fit in it (Prometheus's
    rule evaluations likewise, for the alerting rules)."""
    t = scenario.telemetry
    found = shortest_window(ruleset)
    if found is not None:
        window, rule = found
        e = scenario.evaluation_interval
        if e > window:
            raise IntervalError(
                f"{scenario.source}: evaluationInterval {e:g}s is longer than the "
                f"{window:g}s window of rule {rule!r}: what happens between two of its "
                f"windows would never be seen; use {window:g}s or less"
            )
        if t.source != "scrape" and e + t.scrape_interval > window:
            raise IntervalError(
                f"{scenario.source}: evaluationInterval + telemetry.scrapeInterval "
                f"({e:g}s + {t.scrape_interval:g}s) is longer than the {window:g}s window of "
                f"rule {rule!r}: a rise between two scrapes on either side of a window's "
                f"start would be in no window; make them add up to {window:g}s or less, "
                "or use telemetry.source: scrape"
            )
    found = shortest((a.name, a.expr) for a in alert_rules)
    if found is not None:
        window, alert = found
        interval = max(a.interval or t.rule_interval for a in alert_rules)
        if interval + t.scrape_interval > window:
            raise IntervalError(
                f"{scenario.source}: telemetry.ruleInterval + telemetry.scrapeInterval "
                f"({interval:g}s + {t.scrape_interval:g}s) is longer than the {window:g}s "
                f"window of alert {alert!r}: a rise there could be in no evaluation's "
                f"window; make them add up to {window:g}s or less"
            )


def pool_provider(fleet: Fleet) -> NodePoolProvider:
    """The production Cluster API provider over the fleet's MachineDeployments."""
    return ClusterAPIProvider(fleet.kube, CAPI_NAMESPACE, clock=fleet.clock)


async def _run_rules(
    scenario: Scenario,
    rules: list[str],
    seed: int,
    progress: Progress | None,
    on_decision: Callable[[float, Decision], None] | None = None,
) -> RunResult:
    scheduler = SCHEDULERS[scenario.scheduler]()
    fleet = Fleet(scenario, scheduler, static_pools=False, seed=seed)
    ruleset = load_ruleset(rules, source="scrape")
    spec = scenario.telemetry
    alert_rules = _alert_rules(scenario, ruleset)
    check_intervals(scenario, ruleset, alert_rules)
    # The telemetry makes the series the rules, their actions and the alerting
    # rules read, no others.
    alert_exprs = [a.expr for a in alert_rules]
    exprs = rule_reads(ruleset) + action_reads(ruleset) + alert_exprs
    store = SeriesStore()
    telemetry = Telemetry(fleet, store, exprs, seed)
    phases = Phases.draw(seed, spec, scenario.evaluation_interval)
    pipeline = Pipeline(fleet, telemetry, spec, phases)
    source = SimSource(telemetry, scrapes_itself=spec.source == "scrape")
    ctx = ActionContext(
        kube=fleet.kube,
        replica="simulator",
        clock=fleet.clock,
        sleep=fleet.sleep,
        pools=pool_provider(fleet),
        query=source.query,
    )
    wiring = wire(source, lambda: ruleset, ctx)
    retain(source, ruleset)
    source.keep_at_least(alert_exprs)
    # Samples are written ahead of the clock (pipeline.py): the store keeps that
    # much more of every metric, so that a window is never trimmed by a sample not
    # yet readable.
    store.lead = pipeline.lead
    state, executor = wiring.state, wiring.executor
    assert executor is not None  # wired with a context
    alerts = AlertReceiver()
    if alert_rules:
        AlertPath(fleet, source.evaluator, alert_rules, spec, phases, alerts).start()
    cluster = fleet_cluster(fleet, pipeline)
    cycles = 0
    breaker_was_open = False

    async def prepare(now: float) -> None:
        pipeline.evaluation(now)

    async def cycle() -> None:
        nonlocal breaker_was_open, cycles
        result = await run_cycle(
            ruleset,
            source,
            alerts,
            state,
            fleet.clock(),
            cluster=cluster,
            prepare=prepare,
            submit=executor.submit,
        )
        cycles += 1
        for d in result.decisions:
            fleet.record_action(_action_key(d))
            if on_decision is not None:
                on_decision(result.now, d)
        is_open = state.breaker_open
        if is_open and not breaker_was_open:
            fleet.stats.breaker_trips += 1
        breaker_was_open = is_open

    _watch_progress(fleet, "rules", progress)
    start = time.perf_counter()
    pipeline.start()
    every(fleet, phases.evaluation, phases.first_evaluation(), cycle)
    with batch_collection():
        await fleet.run()
    await executor.stop()
    return _result(fleet, executor, time.perf_counter() - start, cycles)


def _alert_rules(scenario: Scenario, ruleset: RuleSet) -> tuple[AlertRule, ...]:
    """The alerting rules Prometheus evaluates for the ``alertname:`` rules, with
    ``source: alertmanager`` (none otherwise, or when no rule reads an alert)."""
    spec = scenario.telemetry
    wanted = {r.alertname for r in ruleset.rules if r.alertname is not None}
    if spec.source != "alertmanager" or not wanted:
        return ()
    return load_alert_rules(spec.alert_rules, wanted)


def _result(fleet: Fleet, executor: Executor, wall: float, cycles: int) -> RunResult:
    outcomes: dict[str, int] = {}
    for (_, action, status), n in sorted(executor.outcomes.items()):
        key = f"{action}:{status}"
        outcomes[key] = outcomes.get(key, 0) + n
    # Keyed as ``actions`` is (``<type>``, ``<type>:recover``), then the status.
    by_outcome = {
        f"{action}{'' if kind == 'act' else ':recover'}:{status}": n
        for (action, kind, status), n in sorted(executor.by_kind.items())
    }
    return RunResult(
        "rules",
        fleet.stats,
        fleet.timeline,
        wall,
        cycles,
        outcomes,
        dict(fleet.kube.calls),
        by_outcome=by_outcome,
    )


def run_rules(
    scenario: Scenario,
    rules: list[str],
    *,
    seed: int | None = None,
    on_decision: Callable[[float, Decision], None] | None = None,
) -> RunResult:
    """The rules run alone, with ``on_decision(evaluation time, decision)`` called
    for every decision as it is made (for tests and tools that ask when)."""
    seed = scenario.seed if seed is None else seed
    return asyncio.run(_run_rules(scenario, rules, seed, None, on_decision))


def _action_key(d: Decision) -> str:
    return d.action if d.kind == "act" else f"{d.action}:recover"


async def _run_baseline(scenario: Scenario, seed: int, progress: Progress | None) -> RunResult:
    scheduler = SCHEDULERS[scenario.scheduler]()
    fleet = Fleet(scenario, scheduler, static_pools=True, seed=seed)
    _watch_progress(fleet, "baseline", progress)
    start = time.perf_counter()
    with batch_collection():
        await fleet.run()
    return RunResult("baseline", fleet.stats, fleet.timeline, time.perf_counter() - start)


# The cyclic collector's thresholds for a simulation (young generation, then how
# many of its collections before each older one's): see ``batch_collection``.
BATCH_GC_THRESHOLDS = (50_000, 20, 10)


@contextlib.contextmanager
def batch_collection() -> Iterator[None]:
    """Python's cyclic collector tuned for a batch run, then as it was. A run keeps
    millions of long-lived objects (the cluster's objects, every job's record),
    and at the default thresholds (700, 10, 10) the collector went over all of
    them 38 times in a week of ``fleet-1000.yaml``: 8.5 s of 112 (7.6%), 5.9 s of
    it in those full passes. Collecting the young generation every 50,000
    allocations rather than 700 leaves cycles collected all the same, and the
    week's collections took 1.4 s. Nothing a run computes depends on when its
    garbage goes."""
    before = gc.get_threshold()
    gc.set_threshold(*BATCH_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _watch_progress(fleet: Fleet, mode: str, progress: Progress | None) -> None:
    if progress is None:
        return
    duration = fleet.scenario.duration
    fleet.every(duration / 100, lambda: progress(mode, (fleet.now - EPOCH) / duration))


def simulate(
    scenario: Scenario,
    rules: list[str],
    *,
    seed: int | None = None,
    baseline: bool = True,
    progress: Progress | None = None,
    parallel: bool = True,
) -> dict[str, RunResult]:
    """Runs the scenario with the rules and (unless ``baseline`` is False) without;
    returns the results by mode. Raises ``RuleSetError`` for bad rules and
    ``IntervalError`` for intervals the rules cannot work with.

    The two runs share nothing, so with ``parallel`` (and where processes can be
    forked) the baseline runs in a child process beside the rules run, on the
    second core; it reports no progress of its own."""
    seed = scenario.seed if seed is None else seed
    child = None
    if baseline and parallel and "fork" in multiprocessing.get_all_start_methods():
        # Before any event loop or thread exists in this process: a clean fork.
        mp = multiprocessing.get_context("fork")
        receive, send = mp.Pipe(duplex=False)
        child = mp.Process(target=_baseline_child, args=(scenario, seed, send), daemon=True)
        child.start()
        send.close()
    try:
        out = {"rules": asyncio.run(_run_rules(scenario, rules, seed, progress))}
    except BaseException:
        if child is not None:
            child.kill()
            child.join()
        raise
    if child is not None:
        try:
            status, payload = receive.recv()
        except EOFError:
            status, payload = "error", f"exit code {child.exitcode}"
        child.join()
        if status != "ok":
            raise RuntimeError(f"the baseline run failed: {payload}")
        out["baseline"] = payload
        if progress is not None:
            progress("baseline", 1.0)
    elif baseline:
        out["baseline"] = asyncio.run(_run_baseline(scenario, seed, progress))
    return out


def _baseline_child(scenario: Scenario, seed: int, send: Connection) -> None:
    try:
        result = asyncio.run(_run_baseline(scenario, seed, None))
        send.send(("ok", result))
    except BaseException:  # the parent reports it; a child has nowhere else to say
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()
