"""The telemetry pipeline (``autoscaler/simulate/pipeline.py``, ``alerting.py``):
a fault of every kind placed between two evaluations is remediated no sooner than
the poll, the scrape and the evaluation that carry it, and no later than that
plus its rule's ``for`` (and window) plus two evaluation intervals; the
controller's own scrape sees sooner than Prometheus; an ``alertname:`` rule sees
an alert only after its ``for`` and Alertmanager's ``groupWait``; a query never
reads a sample stamped after it (what writing a scrape at its poll relies on);
the ``telemetry:`` section's reader, its defaults (the shipped deploy's) and its
work limits."""

from __future__ import annotations

import asyncio
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.simulate import pipeline
from autoscaler.simulate import run as sim
from autoscaler.simulate.alerting import (
    GROUP_BY,
    ROUTE,
    AlertPath,
    alert_sighting,
    load_alert_rules,
)
from autoscaler.simulate.clock import EPOCH, SimClock
from autoscaler.simulate.faults import UNREACHABLE_GRACE
from autoscaler.simulate.pipeline import Phases, TelemetrySpec, every, sighting
from autoscaler.simulate.scenario import FAULT_KINDS, Scenario, ScenarioError, load_scenario
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.types import Scalar, Vector
from tests.support.paths import REPO

RULES = [str(REPO / "rules")]
ONSET = 40 * 60 + 17.0  # 40m17s: between two evaluations, whatever the phases

# Three nodes of two devices, three two-device jobs from the start (first fit: one
# per node), an hour and a half; the fault hits h100-0000's nvidia0 at 40m17s.
SCENARIO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 90m
  evaluationInterval: 30s
  seed: {seed}
{telemetry}  pools:
    - {{name: h100, vendor: nvidia, devicesPerNode: 2, initial: 3, min: 3, max: 3,
       provisionTime: 5m}}
  workload:
    arrivalsPerHour: 0.01
    initialJobs: 3
    sizes: {{2: 1}}
    duration: {{distribution: fixed, value: 5h}}
    checkpointInterval: 15m
    restartOverhead: 2m
    timeoutFactor: 10
    deadlineFactor: 20
  faults:
    events:
      - {event}
"""


def write(
    tmp_path: Path,
    kind: str = "fatal",
    *,
    at: str = "40m17s",
    seed: int = 3,
    telemetry: str = "",
    name: str = "scenario.yaml",
) -> Path:
    device = "" if kind == "node_down" else ", device: nvidia0"
    event = f"{{at: {at}, kind: {kind}, node: h100-0000{device}}}"
    lines = f"  telemetry: {telemetry}\n" if telemetry else ""
    path = tmp_path / name
    path.write_text(SCENARIO.format(seed=seed, telemetry=lines, event=event))
    return path


def remediated(scenario: Scenario, rules: list[str], kind: str) -> list[float]:
    return sim.run_rules(scenario, rules).stats.remediation_by_kind.get(kind, [])


# -- the acceptance test: one fault of each kind, at 40m17s ----------------------------

# The shipped rule that catches each kind (rules/remediation.yaml), and whether it
# waits for an idle window (the stall rules: max_over_time of utilization).
CAUGHT_BY = {
    "fatal": "fatal-device-fault",
    "remap_failure": "fatal-device-fault",  # accel_remapped_rows{type="failure"}
    "ecc_uncorrected": "uncorrected-ecc-burst",
    "app": "application-fault",
    # The jobs declare no checkpoints (workload.declares defaults to 0): the
    # conservative stall rule's 30-minute window is the bound; the fast stall
    # rules, on each job's learned rhythm or its 10-minute default, come sooner.
    "hang": "stalled-job",
    "stall": "stalled-job",
    # Every device busy while its links are silent for a minute (issue 31).
    "collective_hang": "hung-collective",
    # The node not Ready for a minute of the controller's cluster state, its
    # exporter silent: the pod is requeued before the unreachable toleration.
    "node_down": "lost-node",
}
IDLE_WINDOW = re.compile(r"max_over_time\(accel_utilization_ratio\[(\d+)m\]\)")
# The silence these two wait for (their shortest window: hung-collective's 5m one
# looks back for traffic before the silence, it is not waited out).
SILENT_WINDOW = re.compile(
    r"max_over_time\((?:accel_link_throughput_bytes_per_second|accel_node_ready)\[(\d+)m\]\)"
)


def rule_allowance(name: str) -> float:
    """The rule's ``for``, plus its idle window for a stall rule (the longest
    window over utilization it reads: what must pass before it can hold)."""
    [rule] = [r for r in load_ruleset(RULES, source="scrape").rules if r.name == name]
    assert rule.expr is not None
    windows = [60.0 * int(m) for m in IDLE_WINDOW.findall(rule.expr)]
    silent = [60.0 * int(m) for m in SILENT_WINDOW.findall(rule.expr)]
    if silent:
        return rule.for_ + min(silent)
    return rule.for_ + (max(windows) if rule.name.startswith("stalled") else 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_each_fault_kind_is_remediated_after_the_pipeline_delay_and_within_its_rule(
    tmp_path: Path, kind: str
) -> None:
    scenario = load_scenario(write(tmp_path, kind))
    phases = Phases.draw(scenario.seed, scenario.telemetry, scenario.evaluation_interval)
    delay = sighting(phases, scenario.telemetry.source, EPOCH + ONSET).delay
    interval = scenario.evaluation_interval
    # The fault is between ticks, and the pipeline delays it: a poll, a scrape and
    # an evaluation later, but less than the three intervals.
    assert 0 < delay <= 5 + 15 + interval
    times = remediated(scenario, RULES, kind)
    if kind in CAUGHT_BY:
        [ttr] = times
        allowance = rule_allowance(CAUGHT_BY[kind])
        assert delay - 1e-6 <= ttr <= delay + allowance + 2 * interval, (delay, allowance)
        if kind == "node_down":
            # Before Kubernetes would delete the pod at the unreachable toleration.
            assert ttr < UNREACHABLE_GRACE
        if allowance == 0:
            # Moved (or requeued) by the evaluation that first reads the fault.
            assert ttr == pytest.approx(delay, abs=1e-6)
    elif kind == "device_lost":
        # Kubernetes fails the pod on a lost device at once: no pipeline between.
        assert times == [0.0]
    elif kind == "remap_pending":
        assert times == []  # the job runs on; a reset waits until it leaves
    else:
        pytest.fail(f"fault kind {kind!r} has no expectation here: add one")


@pytest.mark.slow
def test_the_controller_s_own_scrape_sees_a_fault_before_prometheus_does(
    tmp_path: Path,
) -> None:
    """With ``source: scrape`` only the poll stands between a fault and the rules;
    with Prometheus its scrape too. An onset where the two differ by an evaluation
    is found from the model, then both runs are held to it exactly."""
    spec = TelemetrySpec()
    for seed in range(1, 200):
        phases = Phases.draw(seed, spec, 30.0)
        for second in range(40 * 60, 45 * 60):
            onset = EPOCH + second
            own = sighting(phases, "scrape", onset)
            prom = sighting(phases, "prometheus", onset)
            if own.evaluation < prom.evaluation:
                break
        else:
            continue
        break
    else:
        pytest.fail("no seed gives the two sources different delays")
    ttr = {}
    for source in ("scrape", "prometheus"):
        path = write(
            tmp_path, at=f"{second}s", seed=seed, telemetry=f"{{source: {source}}}", name=source
        )
        [ttr[source]] = remediated(load_scenario(path), RULES, "fatal")
    assert ttr["scrape"] == pytest.approx(own.delay, abs=1e-6)
    assert ttr["prometheus"] == pytest.approx(prom.delay, abs=1e-6)
    assert ttr["prometheus"] - ttr["scrape"] == pytest.approx(30.0, abs=1e-6)
    assert own.scrape == own.evaluation and prom.scrape > own.evaluation


ALERT_RULE = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 30s
  rules:
    - name: fatal-alert
      alertname: AccelDeviceFatalFault
      target: device
      action: {type: migrate_jobs, taint: accel-fleet.io/faulty=true:NoSchedule}
"""
ALERTS = """\
groups:
  - name: test
    rules:
      - alert: AccelDeviceFatalFault
        expr: increase(accel_fault_events_total{severity="fatal"}[5m]) > 0
        for: 2m
        labels: {severity: critical}
"""


@pytest.mark.slow
def test_an_alertname_rule_sees_the_alert_after_its_for_and_group_wait(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(ALERT_RULE)
    (tmp_path / "alerts.yaml").write_text(ALERTS)
    telemetry = "{source: alertmanager, groupWait: 30s, alertRules: alerts.yaml}"
    scenario = load_scenario(write(tmp_path, telemetry=telemetry))
    spec = scenario.telemetry
    phases = Phases.draw(scenario.seed, spec, scenario.evaluation_interval)
    [alert] = load_alert_rules(spec.alert_rules, {"AccelDeviceFatalFault"})
    fired, sent, seen = alert_sighting(phases, spec, alert, EPOCH + ONSET)
    scraped = sighting(phases, "prometheus", EPOCH + ONSET).scrape
    assert fired - scraped >= alert.hold and sent - fired == spec.group_wait
    decisions: list[tuple[float, str]] = []
    result = sim.run_rules(
        scenario, [str(rules)], on_decision=lambda t, d: decisions.append((t, d.rule))
    )
    # Only the alert acts (the rule file has no expression rule): at the first
    # evaluation after Alertmanager sent it, and the job left its device then.
    first_at, first_rule = decisions[0]
    assert first_rule == "fatal-alert" and first_at == pytest.approx(seen, abs=1e-6)
    [ttr] = result.stats.remediation_by_kind["fatal"]
    assert ttr == pytest.approx(seen - EPOCH - ONSET, abs=1e-6)
    assert ttr >= alert.hold + spec.group_wait + (scraped - EPOCH - ONSET)
    # Without the wait and the for, the same alert acts sooner.
    (tmp_path / "alerts.yaml").write_text(ALERTS.replace("for: 2m", "for: 0s"))
    quick = load_scenario(write(tmp_path, telemetry=telemetry.replace("30s", "0s"), name="q"))
    [sooner] = remediated(quick, [str(rules)], "fatal")
    assert sooner < ttr - alert.hold


# -- the store: a query never reads a sample stamped after it --------------------------

EXPRESSIONS = [
    "g",
    "c",
    "max_over_time(g[1m])",
    "min_over_time(g[5m])",
    "avg_over_time(g[2m])",
    "last_over_time(g[1m])",
    "count_over_time(g[1m])",
    "increase(c[1m])",
    "rate(c[5m])",
    "changes(g[5m])",
    "resets(c[5m])",
    "timestamp(g)",
    "max by (node) (max_over_time(g[1m]))",
    "sum by (node) (increase(c[5m])) == 0",
    "absent(g)",
]


def _store(future: bool) -> SeriesStore:
    store = SeriesStore(retention=3600.0)
    nodes = [{"node": f"n{i}", "device": "d0"} for i in range(4)]
    g = store.refs({"__name__": "g", **n} for n in nodes)
    c = store.refs({"__name__": "c", **n} for n in nodes)
    for k in range(60):
        t = EPOCH + 15.0 * k
        store.append(g, t, np.full(4, 0.5 + 0.1 * (k % 3)))
        store.append(c, t, np.full(4, float(k // 10)))
    if future:
        # What the pipeline writes at a poll: the scrape's samples, stamped later,
        # with values that would change every answer above; then stale markers.
        late = EPOCH + 15.0 * 59 + 14.0
        store.append(g, late, np.zeros(4))
        store.append(c, late, np.full(4, 100.0))
        store.append_stale(g[:2], late + 5.0)
    return store


def _answer(evaluator: Evaluator, expr: str, t: float) -> Any:
    result = evaluator.instant(expr, t)
    if isinstance(result, Vector):
        return sorted((s.labels, s.value) for s in result.samples)
    assert isinstance(result, Scalar)
    return result.value


def test_a_query_never_reads_a_sample_stamped_after_it() -> None:
    """Writing a scrape's samples at the poll it returns, stamped with the scrape
    (pipeline.py), is sound only if the evaluator ignores them until then."""
    plain, ahead = Evaluator(_store(False)), Evaluator(_store(True))
    last = EPOCH + 15.0 * 59
    for t in (last - 7.5, last, last + 3.0, last + 13.999):
        for expr in EXPRESSIONS:
            assert _answer(ahead, expr, t) == _answer(plain, expr, t), (expr, t - EPOCH)
    # ...and reads them from their own stamp on.
    assert _answer(ahead, "c", last + 14.0) != _answer(plain, "c", last + 14.0)


# -- the phases ---------------------------------------------------------------------


def test_phases_are_the_seed_s_and_never_on_a_whole_second() -> None:
    spec = TelemetrySpec()
    assert Phases.draw(7, spec, 30.0) == Phases.draw(7, spec, 30.0)
    assert Phases.draw(7, spec, 30.0) != Phases.draw(8, spec, 30.0)
    for seed in range(50):
        phases = Phases.draw(seed, spec, 30.0)
        for grid in (phases.evaluation, phases.poll, phases.scrape, phases.controller):
            fraction = (grid.origin - EPOCH) % 1.0
            assert 0.3 <= fraction < 0.7, (seed, grid)
            assert 0 <= grid.origin - EPOCH < grid.interval
        first = phases.evaluation.at(phases.first_evaluation())
        assert EPOCH + 30.0 <= first < EPOCH + 60.0


# -- the telemetry: section --------------------------------------------------------------


def test_the_telemetry_section_and_its_defaults(tmp_path: Path) -> None:
    assert load_scenario(write(tmp_path)).telemetry == TelemetrySpec()
    (tmp_path / "alerts.yaml").write_text(ALERTS)
    path = write(
        tmp_path,
        telemetry="{source: alertmanager, pollInterval: 2s, scrapeInterval: 30s, "
        "groupWait: 10s, groupInterval: 2m, repeatInterval: 1h, ruleInterval: 30s, "
        "alertRules: alerts.yaml}",
    )
    assert load_scenario(path).telemetry == TelemetrySpec(
        poll_interval=2.0,
        scrape_interval=30.0,
        source="alertmanager",
        group_wait=10.0,
        group_interval=120.0,
        repeat_interval=3600.0,
        rule_interval=30.0,
        alert_rules=str(tmp_path / "alerts.yaml"),
    )
    scrape = load_scenario(write(tmp_path, telemetry="{source: scrape, pollInterval: 1s}"))
    assert scrape.telemetry == TelemetrySpec(poll_interval=1.0, source="scrape")


def problems(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    return str(err.value).splitlines()


def position(path: Path, line: int, key: str, *, value: bool = True) -> str:
    """``file:line:col`` of ``key``'s value (or of the key) on a line of the file."""
    text = path.read_text().splitlines()[line - 1]
    col = 1 + text.index(key + ":") + (len(key) + 2 if value else 0)
    return f"{path}:{line}:{col}"


TELEMETRY_LINE = 7  # the scenario's "  telemetry: {...}"


def test_every_bad_telemetry_field_is_reported_at_its_position(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        telemetry="{source: alertmanager, pollInterval: 0s, scrapeInterval: fast, "
        "groupWait: soon, groupInterval: 0s, repeatInterval: -1m, ruleInterval: 0s, "
        "alertRules: nowhere.yaml, scrapeIntervall: 15s}",
    )
    got = problems(path)
    where = dict(line.split(": ", 1) for line in got)
    expected = {
        "pollInterval": "telemetry.pollInterval must be longer than 0s, got '0s'",
        "scrapeInterval": "telemetry.scrapeInterval: ",
        "groupWait": "telemetry.groupWait: ",
        "groupInterval": "telemetry.groupInterval must be longer than 0s",
        "repeatInterval": "telemetry.repeatInterval",
        "ruleInterval": "telemetry.ruleInterval must be longer than 0s",
        "alertRules": "telemetry.alertRules: no file",
    }
    for key, message in expected.items():
        at = position(path, TELEMETRY_LINE, key)
        assert at in where, (key, got)
        assert where[at].startswith(message), (key, where[at])
    # An unknown key at the key, with the one it resembles.
    typo = where[position(path, TELEMETRY_LINE, "scrapeIntervall", value=False)]
    assert (
        typo.startswith("unknown key 'scrapeIntervall' in telemetry") and "scrapeInterval" in typo
    )
    assert len(got) == len(expected) + 1, got


def test_keys_that_do_not_apply_to_the_source_and_the_old_key_are_refused(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, telemetry="{source: scrape, scrapeInterval: 15s, groupWait: 0s}")
    path.write_text(path.read_text().replace("  seed: 3\n", "  seed: 3\n  scrapeInterval: 15s\n"))
    got = problems(path)
    assert got == [
        f"{position(path, 7, 'scrapeInterval')}: scrapeInterval moved to "
        "telemetry.scrapeInterval (Prometheus's scrape of the exporters, default 15s; with "
        "telemetry.source: scrape the controller scrapes them itself at each evaluation)",
        f"{position(path, 8, 'scrapeInterval')}: telemetry.scrapeInterval does not apply to "
        "source: scrape (the controller scrapes the exporters itself, at each "
        "evaluationInterval); drop it, or use source: prometheus",
        f"{position(path, 8, 'groupWait')}: telemetry.groupWait applies only to source: "
        "alertmanager (the path of the alerts that alertname: rules read), not to source: "
        "scrape",
    ]
    bad = write(tmp_path, telemetry="{source: kafka}")
    [line] = problems(bad)
    assert line.startswith(f"{position(bad, TELEMETRY_LINE, 'source')}: telemetry.source must be")
    assert line.endswith("prometheus, scrape, alertmanager, got 'kafka'")


def test_a_1ms_poll_over_a_week_is_refused_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, telemetry="{pollInterval: 1ms}")
    path.write_text(path.read_text().replace("duration: 90m", "duration: 7d"))
    [line] = problems(path)
    at = position(path, TELEMETRY_LINE, "pollInterval")
    assert line.startswith(f"{at}: duration / telemetry.pollInterval (168 h every 0.001s)")
    assert "604,800,000 evaluations" in line and line.endswith("--max-evaluations")
    # A scrape interval likewise, at its own line.
    path.write_text(path.read_text().replace("{pollInterval: 1ms}", "{scrapeInterval: 500ms}"))
    [line] = problems(path)
    at = position(path, TELEMETRY_LINE, "scrapeInterval")
    assert line.startswith(f"{at}: duration / telemetry.scrapeInterval (168 h every 0.5s)")


def test_an_evaluation_and_a_scrape_must_fit_in_the_shortest_fault_window(
    tmp_path: Path,
) -> None:
    path = write(tmp_path)
    path.write_text(path.read_text().replace("evaluationInterval: 30s", "evaluationInterval: 5m"))
    ruleset = load_ruleset(RULES, source="scrape")
    with pytest.raises(sim.IntervalError, match=r"evaluationInterval \+ telemetry.scrapeInterval"):
        sim.check_intervals(load_scenario(path), ruleset)
    # The controller's own scrape at each evaluation: the windows meet.
    scrape = path.read_text().replace("  seed: 3\n", "  seed: 3\n  telemetry: {source: scrape}\n")
    path.write_text(scrape)
    sim.check_intervals(load_scenario(path), ruleset)


def test_the_defaults_are_the_shipped_deploy_s() -> None:
    deploy = REPO / "deploy" / "base"
    autoscaler = (deploy / "autoscaler.yaml").read_text()
    assert f"--source={pipeline.SOURCE}" in autoscaler
    monitors = list(yaml.safe_load_all((deploy / "monitoring.yaml").read_text()))
    exporter = monitors[0]["spec"]["podMetricsEndpoints"][0]["interval"]
    controller = monitors[1]["spec"]["endpoints"][0]["interval"]
    assert exporter == controller == f"{pipeline.SCRAPE_INTERVAL:g}s"
    cli = (REPO / "exporter" / "cli.py").read_text()
    assert re.search(
        rf'"--poll-interval",\s+type=_duration,\s+default={pipeline.POLL_INTERVAL}', cli
    )
    assert "--poll-interval" not in (deploy / "exporter.yaml").read_text()
    route = yaml.safe_load((deploy / "alertmanager-receiver.yaml").read_text())["route"]
    [mine] = route["routes"]
    assert mine["matchers"] == [f'alertname=~"{ROUTE.pattern}"']
    assert tuple(mine["group_by"]) == GROUP_BY
    assert mine["group_wait"] == f"{pipeline.GROUP_WAIT:g}s"
    assert mine["group_interval"] == f"{pipeline.GROUP_INTERVAL / 60:g}m"
    assert mine["repeat_interval"] == f"{pipeline.REPEAT_INTERVAL / 60:g}m"
    groups = yaml.safe_load((deploy / "prometheusrule.yaml").read_text())["spec"]["groups"]
    intervals = {g["name"]: g.get("interval") for g in groups}
    assert intervals["accel-fleet.recording"] == f"{pipeline.RULE_INTERVAL / 60:g}m"
    assert intervals["accel-fleet.alerts"] is None  # Prometheus's global: 1m by default
    assert pipeline.SHIPPED_ALERT_RULES.is_file()
    # Every alert the route sends is in the shipped rule file, and loads.
    names = {"AccelDeviceDown", "AccelDeviceFatalFault", "AccelEccUncorrectedBurst"}
    loaded = load_alert_rules(str(pipeline.SHIPPED_ALERT_RULES), names)
    assert {a.name for a in loaded} == names


# -- Alertmanager's groups on their own ----------------------------------------------------


@dataclass
class Clocked:
    """The little of a fleet that the alert path uses: a clock."""

    clock: SimClock
    listeners: list[Any] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.clock.end

    @property
    def now(self) -> float:
        return self.clock.now

    def at(self, t: float, fn: Any) -> None:
        self.clock.at(t, fn)

    def scraped_nodes(self) -> frozenset[str]:
        return frozenset()


def test_alertmanager_sends_a_group_after_group_wait_again_every_repeat_and_its_resolve() -> None:
    """A device down from 10m to 30m, AccelDeviceDown with for: 3m: pending at the
    first rule evaluation that reads the down sample, firing 3m later, sent
    groupWait after that; re-sent every repeatInterval at the group's ticks while
    it fires; its resolve sent at the first tick after the rule stops finding it;
    the group then ends. The receiver holds it exactly in between."""
    store = SeriesStore()
    ref = store.ref({"__name__": "accel_up", "node": "n0", "device": "d0", "uuid": "u0"})
    fleet = Clocked(SimClock(EPOCH + 3600.0))
    spec = TelemetrySpec(source="alertmanager", group_wait=30.0, group_interval=60.0)
    phases = Phases.draw(1, spec, 30.0)
    down, up = EPOCH + 600.0, EPOCH + 1800.0

    def scrape(k: int) -> None:
        t = phases.scrape.at(k)
        store.append(np.array([ref]), t, np.array([0.0 if down <= t < up else 1.0]))

    every(fleet, phases.scrape, 0, lambda: scrape(phases.scrape.index_at_or_after(fleet.now)))
    [rule] = load_alert_rules(str(pipeline.SHIPPED_ALERT_RULES), {"AccelDeviceDown"})
    assert rule.hold == 180.0
    receiver = AlertReceiver()
    path = AlertPath(fleet, Evaluator(store), (rule,), spec, phases, receiver)
    path.start()
    held: list[tuple[float, int]] = []

    def evaluate() -> None:
        firing = receiver.vector("AccelDeviceDown", fleet.now)
        assert isinstance(firing, Vector)
        held.append((fleet.now, len(firing.samples)))

    every(fleet, phases.evaluation, 1, evaluate)
    asyncio.run(fleet.clock.run(lambda t: None, lambda: None))

    fired, sent, _ = alert_sighting(phases, spec, rule, down)
    rules = phases.rules
    resolved = rules.at_or_after(phases.scrape.at_or_after(up))
    first_tick = sent + spec.group_interval * math.ceil((resolved - sent) / spec.group_interval)
    times = [n.at for n in path.sent]
    statuses = [n.alerts[0][3] for n in path.sent]
    assert times[0] == pytest.approx(sent) and statuses[0] == "firing"
    assert fired - rules.at_or_after(phases.scrape.at_or_after(down)) == pytest.approx(180.0)
    # Re-sent every repeatInterval while it fires, at the group's ticks.
    repeats = [t for t, s in zip(times, statuses, strict=True) if s == "firing"]
    assert [round(b - a, 6) for a, b in itertools.pairwise(repeats)] == [300.0] * (len(repeats) - 1)
    assert len(repeats) == 4 and len(times) == 5  # 13m to 30m: sent, 3 repeats, resolve
    assert statuses[-1] == "resolved" and times[-1] == pytest.approx(first_tick)
    assert path.sent[0].alerts[0][:3] == ("AccelDeviceDown", "n0", "d0")
    for t, n in held:
        assert n == (1 if sent <= t < first_tick else 0), t - EPOCH
    assert sum(n for _, n in held) > 20  # 30s evaluations while it was held
