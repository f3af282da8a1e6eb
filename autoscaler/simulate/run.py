"""``accel-autoscaler simulate``: run a scenario with the rules and without, and
say what the rules were worth.

The rules run is the production controller, unchanged: ``Controller.cycle`` (rule
files through ``RuleWatcher``, the engine's ``evaluate``, the decision log) and
its ``Executor``, which runs each decision's ``ACTIONS[...].execute`` with an
``ActionContext`` whose ``kube`` is the in-memory cluster, whose ``clock`` is
simulated time and whose ``sleep`` waits in simulated time while the fleet goes
on (an eviction that a PodDisruptionBudget refuses is retried minutes later, in
simulated minutes). Pools are scaled through the Cluster API provider against
the cluster's MachineDeployments. Only the source differs from ``--source
scrape``: the store is filled from the simulation (``telemetry.py``) rather than
from HTTP scrapes, and the evaluator runs in this thread.

The baseline (``--baseline none``) is the same fleet, the same jobs and the same
faults (every random stream is seeded from the scenario's seed, separately for
arrivals, jobs and faults) with no controller at all: a job on a failed device
hangs until its deadline, pools stay at their initial size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import promql_parser as pp

from autoscaler.actions.context import ActionContext
from autoscaler.controller import NODES_QUERY
from autoscaler.engine.decision import Decision
from autoscaler.engine.evaluate import TARGET_LABELS, evaluate
from autoscaler.engine.state import ClusterInfo, EngineState
from autoscaler.executor import Executor
from autoscaler.promql.evaluator import EvalError, Evaluator, _Vec
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.support import required_retention
from autoscaler.ruleset.loader import RuleSetError, load_ruleset
from autoscaler.ruleset.model import Rule, RuleSet
from autoscaler.simulate.fleet import CAPI_NAMESPACE, EPOCH, Fleet, Stats, Timeline
from autoscaler.simulate.scenario import Scenario, ScenarioError, load_scenario
from autoscaler.simulate.scheduler import SCHEDULERS
from autoscaler.simulate.telemetry import Telemetry
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.types import Matrix, QueryResult, Unknown, Vector

log = logging.getLogger("accel_autoscaler.simulate")

SUMMARY_KEYS = (
    "jobs_submitted",
    "jobs_completed",
    "jobs_lost",
    "device_hours_allocated",
    "device_hours_useful",
    "goodput_ratio",
    "node_hours",
    "time_to_remediate_seconds",
    "queue_wait_seconds",
    "actions",
    "breaker_trips",
    "wall_seconds",
)


RETENTION_FLOOR = 7200.0


class _TargetEvaluator(Evaluator):
    """The built-in evaluator, able to leave out of a result the samples that name
    none of a set of targets before it turns them into Python objects: a recover
    result is only read for the rule's active targets, and turning 8,000 samples
    into ``Sample``s costs more than evaluating the expression. The evaluation is
    the same; only which of its samples are decoded changes."""

    keep: tuple[tuple[str, ...], set[tuple[int, ...]]] | None = None

    def _vector(self, vec: _Vec, t: float) -> Vector:
        if self.keep is not None and len(vec):
            names, wanted = self.keep
            cols = [vec.cols.get(n) for n in names]
            if any(c is None for c in cols):
                vec = vec.take(np.zeros(len(vec), dtype=np.bool_))
            else:
                rows = zip(*(c.tolist() for c in cols if c is not None), strict=True)
                vec = vec.take(np.fromiter((r in wanted for r in rows), dtype=np.bool_))
        return super()._vector(vec, t)


class SimSource:
    """The controller's ``Source`` over the simulation: ``refresh`` is one scrape of
    the fleet into the store, ``query`` the built-in evaluator on it."""

    name = "sim"

    def __init__(self, telemetry: Telemetry, *, scrape: bool = True) -> None:
        self.telemetry = telemetry
        # Whether ``refresh`` scrapes (scrape interval = evaluation interval, as in
        # ``--source scrape``), or the scrapes run on their own schedule.
        self.scrapes = scrape
        self.store = telemetry.store
        self.evaluator = _TargetEvaluator(self.store)

    def retain(self, exprs: list[str]) -> None:
        """As ``ScrapeSource.retain``, the history the rules need, but at least
        ``RETENTION_FLOOR``: the store trims all its series every quarter of the
        retention, and with thousands of pods a day coming and going that trim costs
        more than keeping an hour or two more of samples. No result changes: every
        window reads only its own range."""
        if exprs:
            need = max(required_retention(e) for e in exprs)
            self.store.retention = max(need, RETENTION_FLOOR)

    async def refresh(self, at: float) -> bool:
        if self.scrapes:
            self.telemetry.scrape(at)
        return bool(self.telemetry.scraped.any())

    async def query(self, expr: str, at: float) -> QueryResult:
        try:
            result = self.evaluator.instant(expr, at)
        except EvalError as e:
            return Unknown(f"evaluation failed: {e}")
        if isinstance(result, Matrix):
            return Unknown("a rule must yield an instant vector, not a range vector")
        return result

    async def query_targets(
        self, expr: str, at: float, names: tuple[str, ...], targets: list[dict[str, str]]
    ) -> QueryResult:
        """``query``, keeping only the samples whose ``names`` labels are one of
        ``targets``."""
        symbols = self.store.symbols
        wanted = {tuple(symbols.code(t.get(n, "")) for n in names) for t in targets}
        self.evaluator.keep = (names, wanted)
        try:
            return await self.query(expr, at)
        finally:
            self.evaluator.keep = None

    async def close(self) -> None:
        return None


@dataclass
class RunResult:
    mode: str  # "rules" or "baseline"
    stats: Stats
    timeline: Timeline
    wall_seconds: float
    cycles: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    # Calls the actions (and the cluster-state reads) made, by Kube method.
    kube_calls: dict[str, int] = field(default_factory=dict)


Progress = Callable[[str, float], None]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return round(float(np.percentile(np.array(values), q, method="linear")), 3)


def summary_section(result: RunResult) -> dict[str, Any]:
    """The keys the issue names, in its order."""
    s = result.stats
    allocated = s.device_seconds_allocated / 3600.0
    useful = s.device_seconds_useful / 3600.0
    return {
        "jobs_submitted": s.submitted,
        "jobs_completed": s.completed,
        "jobs_lost": s.lost,
        "device_hours_allocated": round(allocated, 3),
        "device_hours_useful": round(useful, 3),
        "goodput_ratio": round(useful / allocated, 4) if allocated > 0 else 0.0,
        "node_hours": round(s.node_seconds / 3600.0, 3),
        "time_to_remediate_seconds": {
            "p50": _percentile(s.remediation, 50),
            "p99": _percentile(s.remediation, 99),
            "max": round(max(s.remediation), 3) if s.remediation else 0.0,
        },
        "queue_wait_seconds": {
            "p50": _percentile(s.queue_wait, 50),
            "p95": _percentile(s.queue_wait, 95),
        },
        "actions": dict(sorted(s.actions.items())),
        "breaker_trips": s.breaker_trips,
        "wall_seconds": round(result.wall_seconds, 3),
    }


def shortest_window(ruleset: RuleSet) -> tuple[float, str] | None:
    """The shortest range (``[5m]``) in the rules' expressions, and its rule."""
    best: tuple[float, str] | None = None
    for rule in ruleset.rules:
        for expr in (rule.expr, rule.recover.expr if rule.recover else None):
            if not expr:
                continue
            ranges: list[float] = []

            def visit(node: pp.Expr, ranges: list[float] = ranges) -> bool:
                if isinstance(node, (pp.MatrixSelector, pp.SubqueryExpr)) and node.range:
                    ranges.append(node.range.total_seconds())
                return True

            pp.walk(pp.parse(expr), visit)
            for r in ranges:
                if best is None or r < best[0]:
                    best = (r, rule.name)
    return best


class IntervalError(ValueError):
    """The scenario's intervals and the rules' windows do not fit together."""


def check_intervals(scenario: Scenario, ruleset: RuleSet) -> None:
    """Refuses intervals that would make the rules blind: evaluations further apart
    than a rule's window leave gaps no window covers (a fault counted in one is
    never seen), and a window needs two scrapes for ``increase``."""
    shortest = shortest_window(ruleset)
    if shortest is None:
        return
    window, rule = shortest
    for key, value in (
        ("evaluationInterval", scenario.evaluation_interval),
        ("scrapeInterval", scenario.scrape_interval),
    ):
        if value > window:
            raise IntervalError(
                f"{scenario.source}: {key} {value:g}s is longer than the {window:g}s window "
                f"of rule {rule!r}: what happens between two of its windows would never be "
                f"seen; use {window:g}s or less"
            )


def pool_provider(fleet: Fleet) -> Any:
    """The production Cluster API provider over the fleet's MachineDeployments."""
    from autoscaler.pools.clusterapi import ClusterAPIProvider

    return ClusterAPIProvider(fleet.kube, CAPI_NAMESPACE, clock=fleet.clock)


class SimController:
    """One evaluation cycle as ``Controller.cycle`` runs it (``autoscaler/controller.py``),
    over the simulation's source: the same queries, the same ``ClusterInfo`` for
    the breaker, the engine's ``evaluate``, ``EngineState.record``, and every
    decision handed to the production ``Executor``.

    Three differences, none of which can change a decision:

    - a rule's ``recover`` expression is only queried while the rule has a target
      under remediation: ``evaluate`` reads a recover result for the rule's active
      targets and nothing else (``engine/evaluate.py``, ``_recover``), and at 8,000
      devices a recover result such as ``accel_up == 1`` holds every device, which
      costs more to build than the rest of the cycle;
    - and the answer is cut down to those targets (before the evaluator decodes
      it, ``_TargetEvaluator``);
    - the nodes for the breaker (``count by (node) (accel_up)`` in the controller)
      and their registration times (its scale-up grace) come from the fleet: the
      nodes whose exporter answered this cycle's scrape, and the times written into
      ``metadata.creationTimestamp``, not a query and a parse of every Node.
    """

    def __init__(
        self, ruleset: RuleSet, source: SimSource, executor: Executor, fleet: Fleet
    ) -> None:
        self.ruleset = ruleset
        self.source = source
        self.executor = executor
        self.fleet = fleet
        self.alerts = AlertReceiver()
        self.state = EngineState()
        self.cycles = 0
        exprs = [NODES_QUERY]
        for r in ruleset.rules:
            exprs += [e for e in (r.expr, r.recover.expr if r.recover else None) if e]
        source.retain(exprs)

    def _cluster(self, now: float) -> ClusterInfo:
        nodes = self.fleet.scraped_nodes()
        recent = self.fleet.registered_since(now - 3600.0)
        return ClusterInfo(nodes=nodes, recently_added=recent)

    async def _recover_query(self, rule: Rule, now: float) -> QueryResult:
        assert rule.recover is not None
        targets = [dict(k[1]) for k in self.state.active if k[0] == rule.name]
        names = TARGET_LABELS[rule.target]
        return await self.source.query_targets(rule.recover.expr, now, names, targets)

    def _recover_result(self, rule: Rule, result: QueryResult) -> QueryResult:
        """The recover result cut down to the rule's active targets: the only samples
        ``evaluate`` looks up in it."""
        if not isinstance(result, Vector):
            return result
        names = TARGET_LABELS[rule.target]
        active = {k[1] for k in self.state.active if k[0] == rule.name}
        keep = tuple(
            s for s in result.samples if tuple(sorted((n, s.get(n)) for n in names)) in active
        )
        return Vector(keep)

    async def cycle(self) -> list[Decision]:
        now = self.fleet.clock()
        up = await self.source.refresh(now)
        results: dict[str, QueryResult] = {}
        recover: dict[str, QueryResult] = {}
        cluster = self._cluster(now) if up else None
        active = {rule for rule, _ in self.state.active}
        for rule in self.ruleset.rules:
            if rule.alertname is not None:
                results[rule.name] = self.alerts.vector(rule.alertname, now)
            elif not up:
                results[rule.name] = Unknown(f"source {self.source.name} is down")
            else:
                assert rule.expr is not None
                results[rule.name] = await self.source.query(rule.expr, now)
            if rule.recover is not None and rule.name in active:
                recover[rule.name] = (
                    self._recover_result(rule, await self._recover_query(rule, now))
                    if up
                    else Unknown(f"source {self.source.name} is down")
                )
        decisions = evaluate(
            self.ruleset, results, self.state, now, recover_results=recover, cluster=cluster
        )
        self.state.record(decisions)
        for d in decisions:
            self.executor.submit(d)
        self.cycles += 1
        return decisions


async def _run_rules(
    scenario: Scenario, rules: list[str], seed: int, progress: Progress | None
) -> RunResult:
    scheduler = SCHEDULERS[scenario.scheduler]()
    fleet = Fleet(scenario, scheduler, static_pools=False, seed=seed)
    ruleset = load_ruleset(rules, source="scrape")
    check_intervals(scenario, ruleset)
    exprs = [NODES_QUERY] + [
        e for r in ruleset.rules for e in (r.expr, r.recover.expr if r.recover else None) if e
    ]
    store = SeriesStore()
    telemetry = Telemetry(fleet, store, exprs, seed)
    source = SimSource(telemetry, scrape=scenario.scrape_interval == scenario.evaluation_interval)
    ctx = ActionContext(
        kube=fleet.kube,
        replica="simulator",
        clock=fleet.clock,
        sleep=fleet.sleep,
        pools=pool_provider(fleet),
        query=source.query,
    )
    executor = Executor(ctx)
    controller = SimController(ruleset, source, executor, fleet)
    breaker_was_open = False

    async def cycle() -> None:
        nonlocal breaker_was_open
        decisions = await controller.cycle()
        for d in decisions:
            fleet.record_action(_action_key(d))
        is_open = controller.state.breaker_open
        if is_open and not breaker_was_open:
            fleet.stats.breaker_trips += 1
        breaker_was_open = is_open

    _watch_progress(fleet, "rules", progress)
    start = time.perf_counter()
    first = fleet.now + scenario.evaluation_interval
    if not source.scrapes:
        fleet.every(
            scenario.scrape_interval,
            lambda: telemetry.scrape(fleet.now),
            start=first - scenario.scrape_interval,
        )
    fleet.every(scenario.evaluation_interval, cycle, start=first)
    await fleet.run()
    await executor.stop()
    wall = time.perf_counter() - start
    outcomes: dict[str, int] = {}
    for (_, action, status), n in sorted(executor.outcomes.items()):
        key = f"{action}:{status}"
        outcomes[key] = outcomes.get(key, 0) + n
    return RunResult(
        "rules",
        fleet.stats,
        fleet.timeline,
        wall,
        controller.cycles,
        outcomes,
        dict(fleet.kube.calls),
    )


def _action_key(d: Decision) -> str:
    return d.action if d.kind == "act" else f"{d.action}:recover"


async def _run_baseline(scenario: Scenario, seed: int, progress: Progress | None) -> RunResult:
    scheduler = SCHEDULERS[scenario.scheduler]()
    fleet = Fleet(scenario, scheduler, static_pools=True, seed=seed)
    _watch_progress(fleet, "baseline", progress)
    start = time.perf_counter()
    await fleet.run()
    return RunResult("baseline", fleet.stats, fleet.timeline, time.perf_counter() - start)


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


def summary(results: dict[str, RunResult], scenario: Scenario, seed: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": seed,
        "duration_hours": round(scenario.duration / 3600.0, 3),
        "evaluation_interval_seconds": scenario.evaluation_interval,
    }
    for mode in ("rules", "baseline"):
        if mode in results:
            doc[mode] = summary_section(results[mode])
    return doc


# -- terminal output -----------------------------------------------------------------


class ProgressBar:
    """A bar on a terminal, a line per quarter otherwise (CI logs stay short)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last: tuple[str, int] = ("", -1)
        self.started = time.perf_counter()

    def __call__(self, mode: str, fraction: float) -> None:
        pct = int(min(1.0, max(0.0, fraction)) * 100)
        if not self.tty:
            step = pct // 25 * 25
            if (mode, step) != self.last:
                self.stream.write(f"{mode}: {step}% simulated\n")
                self.stream.flush()
                self.last = (mode, step)
            return
        if (mode, pct) == self.last:
            return
        filled = pct * 30 // 100
        bar = "#" * filled + "-" * (30 - filled)
        elapsed = time.perf_counter() - self.started
        self.stream.write(f"\r{mode:>8} [{bar}] {pct:3d}%  {elapsed:6.1f}s")
        if pct >= 100:
            self.stream.write("\n")
        self.stream.flush()
        self.last = (mode, pct)


def table(doc: dict[str, Any]) -> str:
    """The two sections side by side, one metric a row."""
    rows: list[tuple[str, str, str]] = []
    rules, base = doc.get("rules", {}), doc.get("baseline", {})

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1 else f"{v:,.1f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    for key in SUMMARY_KEYS:
        a, b = rules.get(key), base.get(key)
        if isinstance(a, dict) or isinstance(b, dict):
            subkeys = list((a or {}).keys()) or list((b or {}).keys())
            if key == "actions":
                subkeys = sorted(set((a or {}).keys()) | set((b or {}).keys()))
                if not subkeys:
                    rows.append((key, "0", "0"))
            for sub in subkeys:
                rows.append(
                    (f"{key}.{sub}", fmt((a or {}).get(sub, 0)), fmt((b or {}).get(sub, 0)))
                )
        else:
            rows.append((key, fmt(a) if a is not None else "-", fmt(b) if b is not None else "-"))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len("rules"), *(len(r[1]) for r in rows))
    w2 = max(len("baseline"), *(len(r[2]) for r in rows))
    lines = [f"{'':<{w0}}  {'rules':>{w1}}  {'baseline':>{w2}}"]
    lines += [f"{k:<{w0}}  {a:>{w1}}  {b:>{w2}}" for k, a, b in rows]
    return "\n".join(lines)


def main(args: argparse.Namespace, stderr: TextIO = sys.stderr) -> int:
    try:
        scenario = load_scenario(args.scenario, tuple(SCHEDULERS))
    except ScenarioError as e:
        print(str(e), file=stderr)
        print(
            f"accel-autoscaler: error: the scenario did not load ({len(e.problems)} "
            "problems above)",
            file=stderr,
        )
        return 2
    rules = args.rules or ["rules/"]
    seed = scenario.seed if args.seed is None else args.seed
    logging.getLogger("accel_autoscaler").setLevel(logging.WARNING)
    try:
        results = simulate(
            scenario,
            rules,
            seed=seed,
            baseline=args.baseline == "none",
            progress=ProgressBar(stderr),
        )
    except IntervalError as e:
        print(f"accel-autoscaler: error: {e}", file=stderr)
        return 2
    except RuleSetError as e:
        print(str(e), file=stderr)
        print(
            f"accel-autoscaler: error: the rules did not load ({len(e.problems)} problems above)",
            file=stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = summary(results, scenario, seed)
    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{scenario.name}: {scenario.duration / 3600:g} h simulated, seed {seed}")
    print(table(doc))
    if not args.no_plots:
        from autoscaler.simulate.plots import write_plots

        paths = write_plots(results, scenario, out)
        print(f"plots: {', '.join(str(p) for p in paths)}")
    print(f"summary: {out / 'summary.json'}")
    return 0


__all__ = [
    "SUMMARY_KEYS",
    "RunResult",
    "SimSource",
    "main",
    "simulate",
    "summary",
    "summary_section",
    "table",
]
