"""The telemetry pipeline between the fleet and the controller: the scenario's
``telemetry:`` section, and when each sample reaches the store the rules read.

Why a module of its own: in production a fault is not seen when it happens. The
exporter sees it at its next poll, Prometheus at its next scrape of the exporter,
the controller at its next evaluation (and an ``alertname:`` rule only once
Prometheus's alerting rule has fired and Alertmanager has sent it). A simulator
that read the truth at the evaluation would measure none of that delay, so the
pipeline is modelled here, once, and the runner (``run.py``) only starts it.

What is delayed, and how (``source``, as the controller's ``--source``):

- **Every clock has its own phase.** The exporters poll every ``pollInterval``,
  Prometheus scrapes every ``scrapeInterval`` (the exporters on one phase, the
  controller's ``/metrics`` on another: they are two targets), evaluates its
  alerting rules every ``ruleInterval``, and the controller evaluates every
  ``evaluationInterval``. Each phase is drawn from a seeded stream of its own
  (``Phases``), so a run is a function of its seed, and each lies a fraction of a
  second past a whole second (``_offset``): no evaluation, poll or scrape of a
  whole-second interval falls on a scenario's event time (``at: 40m``), so a
  fault set at a round time is not seen "at once". One phase per clock: a real
  fleet spreads its exporters' polls and Prometheus its targets' scrapes, which
  only spreads the delay further.
- **A scrape returns what the last poll saw.** The device series of a scrape at
  ``s`` are those of the fleet at the last poll at or before ``s``, stamped ``s``
  (Prometheus stamps a sample with its scrape). They are written *at that poll*,
  stamped ``s``, through ``Telemetry.scrape_devices``: one write per scrape, as
  before, with no copy of the fleet's state. This is sound because a query at
  ``t`` never reads a sample stamped after ``t`` (``promql/family.py``: an instant
  lookup takes the last sample at or before ``t``, a window ``[t - r, t]``; the
  "changed since" shortcuts only widen what is read); ``test_pipeline.py`` holds
  it. The store keeps that lead more history (``Pipeline.lead``). Two scrapes that return
  the same poll (``pollInterval`` longer than ``scrapeInterval``) draw the
  utilization's jitter each, and a node that goes down between a poll and the
  scrape that returns it is seen down one scrape late: the two places where this
  differs from an exporter's cache.
- ``source: prometheus`` (the default, as ``deploy/base/autoscaler.yaml`` runs
  the controller): the rules read what Prometheus scraped by their evaluation.
  The cluster-state series (jobs, gangs, pools: ``Telemetry.scrape_cluster``) go
  the same way as in production: the controller reads the API at each
  evaluation and serves the rows on ``/metrics``, and Prometheus scrapes them
  (docs/controller.md, "Cluster state as series"), so the rows read at
  evaluation ``e`` are written for each scrape of the controller until the next
  evaluation, with the values of ``e``.
- ``source: scrape``: the controller scrapes the exporters itself at each
  evaluation (``--source scrape``): the device series are stamped with the
  evaluation and hold the last poll before it; the cluster-state series go into
  its store at the evaluation, current. Only the poll's delay.
- ``source: alertmanager``: as ``prometheus`` for the expression rules; an
  ``alertname:`` rule sees an alert only once Prometheus's alerting rule fired
  and Alertmanager sent it to the controller's receiver (``alerting.py``).

The breaker's node count (``nodes``) is what the scrapes said: the nodes whose
exporter answered the latest scrape the controller can read, as
``NODES_QUERY`` would return them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from yaml.nodes import Node

from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.limits import Pass
from autoscaler.simulate.scenario_workload import ScenarioReader


class Fleet(Protocol):
    """What the pipeline asks of the fleet (``fleet.Fleet``; a protocol, as the
    fleet imports the scenario, which imports this module's reader)."""

    listeners: list[Callable[[str, Any], None]]

    @property
    def end(self) -> float: ...

    @property
    def now(self) -> float: ...

    def at(self, t: float, fn: Callable[[], Any]) -> None: ...

    def scraped_nodes(self) -> frozenset[str]: ...


class Telemetry(Protocol):
    """What the pipeline asks of the telemetry (``telemetry.Telemetry``)."""

    def scrape_devices(self, t: float) -> None: ...

    def scrape_cluster(self, now: float, stamps: Sequence[float] | None = None) -> None: ...


SOURCES = ("prometheus", "scrape", "alertmanager")
# The shipped deploy's values, each from where it is set:
# exporter/cli.py's --poll-interval default (deploy/base/exporter.yaml sets none);
POLL_INTERVAL = 5.0
# deploy/base/monitoring.yaml's PodMonitor and ServiceMonitor: interval 15s;
SCRAPE_INTERVAL = 15.0
# deploy/base/autoscaler.yaml: --source=prometheus;
SOURCE = "prometheus"
# deploy/base/alertmanager-receiver.yaml's route: group_wait 0s, group_interval 1m,
# repeat_interval 5m;
GROUP_WAIT = 0.0
GROUP_INTERVAL = 60.0
REPEAT_INTERVAL = 300.0
# deploy/base/prometheusrule.yaml's recording group says interval: 1m; its alerts
# group says none, so Prometheus's global evaluation_interval applies, whose own
# default is 1m (the Prometheus Operator's is 30s: say so here if yours is).
RULE_INTERVAL = 60.0
# The alerting rules Prometheus evaluates, unless the scenario names its own.
SHIPPED_ALERT_RULES = (
    Path(__file__).resolve().parents[2] / "rules" / "prometheus" / "accel-fleet.rules.yaml"
)
# The phases' own random stream: [seed, PHASE_STREAM].
PHASE_STREAM = 30

TELEMETRY_KEYS = (
    "pollInterval",
    "scrapeInterval",
    "source",
    "groupWait",
    "groupInterval",
    "repeatInterval",
    "ruleInterval",
    "alertRules",
)
# Keys that only Alertmanager's path reads.
ALERTMANAGER_KEYS = ("groupWait", "groupInterval", "repeatInterval", "ruleInterval", "alertRules")


@dataclass(frozen=True)
class TelemetrySpec:
    """``telemetry:``: how the fleet's series reach the controller (module
    docstring); every default is the shipped deploy's."""

    poll_interval: float = POLL_INTERVAL
    scrape_interval: float = SCRAPE_INTERVAL
    source: str = SOURCE
    group_wait: float = GROUP_WAIT
    group_interval: float = GROUP_INTERVAL
    repeat_interval: float = REPEAT_INTERVAL
    rule_interval: float = RULE_INTERVAL
    # The Prometheus rule file whose alerts Alertmanager sends (source alertmanager).
    alert_rules: str = str(SHIPPED_ALERT_RULES)


def read_telemetry(
    r: ScenarioReader, spec: dict[str, Node], at: Node, evaluation_interval: float
) -> tuple[TelemetrySpec, tuple[Pass, ...]]:
    """The spec's ``telemetry:`` (defaults where absent), and the passes over the
    fleet it asks for (evaluations, scrapes, polls, rule evaluations), for the
    work limits. ``spec``: the spec's entries; ``at``: the spec node."""
    if "scrapeInterval" in spec:
        r.problem(
            spec["scrapeInterval"],
            "scrapeInterval moved to telemetry.scrapeInterval (Prometheus's scrape of the "
            "exporters, default 15s; with telemetry.source: scrape the controller scrapes "
            "them itself at each evaluation)",
        )
    evaluations = Pass("evaluationInterval", evaluation_interval, None)
    m = r.fields(spec["telemetry"], "telemetry", TELEMETRY_KEYS) if "telemetry" in spec else {}
    if m is None:
        return TelemetrySpec(), (evaluations,)
    source = r.get(m, "source", lambda n, w: r.choice(n, f"telemetry.{w}", SOURCES), SOURCE)

    def period(node: Node, what: str) -> float | None:
        return r.period(node, f"telemetry.{what}")

    def wait(node: Node, what: str) -> float | None:
        return r.duration(node, f"telemetry.{what}")

    poll = r.get(m, "pollInterval", period, POLL_INTERVAL)
    scrape = r.get(m, "scrapeInterval", period, SCRAPE_INTERVAL)
    if source == "scrape" and "scrapeInterval" in m:
        r.problem(
            m["scrapeInterval"],
            "telemetry.scrapeInterval does not apply to source: scrape (the controller "
            "scrapes the exporters itself, at each evaluationInterval); drop it, or use "
            "source: prometheus",
        )
    if source != "alertmanager":
        for key in ALERTMANAGER_KEYS:
            if key in m:
                r.problem(
                    m[key],
                    f"telemetry.{key} applies only to source: alertmanager (the path of "
                    f"the alerts that alertname: rules read), not to source: {source}",
                )
    alert_rules = str(SHIPPED_ALERT_RULES)
    if "alertRules" in m:
        alert_rules = _alert_rules(r, m["alertRules"])
    spec_ = TelemetrySpec(
        poll_interval=poll,
        scrape_interval=scrape,
        source=source,
        group_wait=r.get(m, "groupWait", wait, GROUP_WAIT),
        group_interval=r.get(m, "groupInterval", period, GROUP_INTERVAL),
        repeat_interval=r.get(m, "repeatInterval", period, REPEAT_INTERVAL),
        rule_interval=r.get(m, "ruleInterval", period, RULE_INTERVAL),
        alert_rules=alert_rules,
    )
    passes = [evaluations, Pass("telemetry.pollInterval", poll, m.get("pollInterval"))]
    if source != "scrape":
        passes.append(Pass("telemetry.scrapeInterval", scrape, m.get("scrapeInterval")))
    if source == "alertmanager":
        passes.append(Pass("telemetry.ruleInterval", spec_.rule_interval, m.get("ruleInterval")))
    return spec_, tuple(passes)


def _alert_rules(r: ScenarioReader, node: Node) -> str:
    """``alertRules``: a Prometheus rule file, relative to the scenario's folder."""
    text = r.string(node, "telemetry.alertRules")
    if text is None:
        return str(SHIPPED_ALERT_RULES)
    path = Path(text) if Path(text).is_absolute() else Path(r.file).parent / text
    if not path.is_file():
        r.problem(
            node,
            f"telemetry.alertRules: no file {str(path)!r} (a Prometheus rule file, "
            "relative to the scenario's folder)",
        )
    return str(path)


# -- the clocks ----------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """The instants ``origin + k * interval`` for every whole ``k`` (computed from
    ``k``, never summed, so that a week of them does not drift)."""

    origin: float
    interval: float

    def at(self, k: int) -> float:
        return self.origin + k * self.interval

    def index_at_or_after(self, t: float) -> int:
        return math.ceil((t - self.origin) / self.interval - 1e-9)

    def at_or_after(self, t: float) -> float:
        """The first instant at or after ``t``."""
        return self.at(self.index_at_or_after(t))

    def at_or_before(self, t: float) -> float:
        """The last instant at or before ``t``."""
        return self.at(math.floor((t - self.origin) / self.interval + 1e-9))


def stamps_between(grid: Grid, start: float, end: float) -> Sequence[float]:
    """The grid's instants in ``[start, end)``."""
    return [grid.at(k) for k in range(grid.index_at_or_after(start), grid.index_at_or_after(end))]


def _offset(interval: float, u: float) -> float:
    """A phase in ``[0, interval)`` from ``u`` in ``[0, 1)``, moved to between 0.3
    and 0.7 s past a whole second where the interval has room: the scenario's
    event times are whole seconds (or milliseconds), and a tick of a whole-second
    interval then never meets one."""
    phase = u * interval
    whole = math.floor(phase)
    nudged = whole + 0.3 + 0.4 * (phase - whole)
    return nudged if nudged < interval else phase


@dataclass(frozen=True)
class Phases:
    """Every clock of the pipeline (module docstring)."""

    evaluation: Grid
    poll: Grid
    scrape: Grid  # Prometheus's scrapes of the exporters
    controller: Grid  # Prometheus's scrapes of the controller's /metrics
    rules: Grid  # Prometheus's alerting rule evaluations

    @classmethod
    def draw(cls, seed: int, spec: TelemetrySpec, evaluation_interval: float) -> Phases:
        """The phases of a run with ``seed``: five draws, always in this order, from
        the phases' own stream, whatever the source (one source's phases are those
        of another's)."""
        u = np.random.default_rng(np.random.SeedSequence([seed, PHASE_STREAM])).random(5)
        intervals = (
            evaluation_interval,
            spec.poll_interval,
            spec.scrape_interval,
            spec.scrape_interval,
            spec.rule_interval,
        )
        grids = [Grid(EPOCH + _offset(i, float(x)), i) for i, x in zip(intervals, u, strict=True)]
        return cls(*grids)

    def first_evaluation(self) -> int:
        """The index of the first evaluation: one interval after the start, as the
        controller's first cycle comes one interval after it starts."""
        return self.evaluation.index_at_or_after(EPOCH + self.evaluation.interval)


@dataclass(frozen=True)
class Sighting:
    """When a change of the fleet at ``onset`` reaches the controller's rules: the
    poll that sees it, the scrape that returns that poll (with ``source: scrape``
    the evaluation's own), and the first evaluation that reads that scrape."""

    onset: float
    poll: float
    scrape: float
    evaluation: float

    @property
    def delay(self) -> float:
        return self.evaluation - self.onset


def every(fleet: Fleet, grid: Grid, first: int, fn: Callable[[], Any]) -> None:
    """Runs ``fn`` at each of ``grid``'s instants from its ``first``-th to the
    fleet's end; what ``fn`` returns (a coroutine, say) goes back to the clock."""

    def at(k: int) -> Callable[[], Any]:
        def run() -> Any:
            following = grid.at(k + 1)
            if following <= fleet.end:
                fleet.at(following, at(k + 1))
            return fn()

        return run

    if grid.at(first) <= fleet.end:
        fleet.at(grid.at(first), at(first))


def sighting(phases: Phases, source: str, onset: float) -> Sighting:
    """The pipeline's delay for a change at ``onset`` (after the first
    evaluation), for an expression rule that sees it in one sample."""
    poll = phases.poll.at_or_after(onset)
    if source == "scrape":
        scrape = evaluation = phases.evaluation.at_or_after(poll)
    else:
        scrape = phases.scrape.at_or_after(poll)
        evaluation = phases.evaluation.at_or_after(scrape)
    return Sighting(onset, poll, scrape, evaluation)


# -- the pipeline at run time ---------------------------------------------------------

# What makes a node's answer change: the breaker's node set is computed again then.
_NODE_EVENTS = frozenset({"node_added", "node_removed", "node_down", "node_up"})


class Pipeline:
    """Writes ``telemetry``'s series into its store on ``fleet``'s clock, as the
    pipeline would deliver them (module docstring). ``start`` schedules the
    scrapes; ``evaluation`` is called at each of the controller's evaluations,
    before its queries (its ``prepare``)."""

    def __init__(
        self,
        fleet: Fleet,
        telemetry: Telemetry,
        spec: TelemetrySpec,
        phases: Phases,
    ) -> None:
        self.fleet = fleet
        self.telemetry = telemetry
        self.spec = spec
        self.phases = phases
        # (scrape time, the nodes that answered it), oldest first.
        self._answered: deque[tuple[float, frozenset[str]]] = deque()
        self._nodes: frozenset[str] | None = None  # None: to compute again
        fleet.listeners.append(self._heard)

    @property
    def lead(self) -> float:
        """How far ahead of the simulated time a sample may be written: a scrape's
        samples at its poll, the controller's rows at its evaluation."""
        return max(self.spec.poll_interval, self.phases.evaluation.interval)

    def start(self) -> None:
        """Schedules the scrapes of the exporters: Prometheus's, or the
        controller's own at each evaluation."""
        if self.spec.source == "scrape":
            grid = self.phases.evaluation
            first = self.phases.first_evaluation()
        else:
            grid = self.phases.scrape
            first = grid.index_at_or_after(self.fleet.now)
        self._schedule(grid, first)

    def _schedule(self, grid: Grid, k: int) -> None:
        s = grid.at(k)
        if s > self.fleet.end:
            return
        # The poll this scrape returns: the last at or before it (the fleet's start
        # at the earliest, when everything is as the scenario begins).
        poll = max(self.phases.poll.at_or_before(s), self.fleet.now)
        self.fleet.at(poll, lambda: self._scrape(grid, k, s))

    def _scrape(self, grid: Grid, k: int, s: float) -> None:
        self.telemetry.scrape_devices(s)
        if self._nodes is None:
            self._nodes = self.fleet.scraped_nodes()
        self._answered.append((s, self._nodes))
        self._schedule(grid, k + 1)

    def _heard(self, what: str, payload: Any) -> None:
        if what in _NODE_EVENTS:
            self._nodes = None

    def evaluation(self, now: float) -> None:
        """The cluster-state series the controller reads at its evaluation ``now``:
        into its own store at ``now`` (``source: scrape``), or, through its
        ``/metrics``, each of Prometheus's scrapes of it until its next evaluation."""
        if self.spec.source == "scrape":
            self.telemetry.scrape_cluster(now)
            return
        until = now + self.phases.evaluation.interval
        stamps = [
            s for s in stamps_between(self.phases.controller, now, until) if s <= self.fleet.end
        ]
        if stamps:
            self.telemetry.scrape_cluster(now, stamps)

    def nodes(self, now: float) -> frozenset[str]:
        """The nodes whose exporter answered the latest scrape stamped at or before
        ``now``: what ``NODES_QUERY`` reads there."""
        q = self._answered
        while len(q) > 1 and q[1][0] <= now:
            q.popleft()
        return q[0][1] if q and q[0][0] <= now else frozenset()


__all__ = [
    "GROUP_INTERVAL",
    "GROUP_WAIT",
    "POLL_INTERVAL",
    "REPEAT_INTERVAL",
    "RULE_INTERVAL",
    "SCRAPE_INTERVAL",
    "SHIPPED_ALERT_RULES",
    "SOURCE",
    "SOURCES",
    "Fleet",
    "Grid",
    "Phases",
    "Pipeline",
    "Sighting",
    "Telemetry",
    "TelemetrySpec",
    "every",
    "read_telemetry",
    "sighting",
]
