"""Prometheus's alerting rules and Alertmanager, between the fleet and a rule with
``alertname:`` (``telemetry.source: alertmanager``).

Why a module of its own: an ``alertname:`` rule reads alerts, and with the shipped
deploy an alert reaches the controller through two more clocks than a sample
does, each with its own rules: Prometheus's rule evaluation with the alert's
``for:``, and Alertmanager's grouping. Both are modelled here as their sources
have them, and the notification goes into the controller's own receiver
(``sources/alertmanager.py``'s ``AlertReceiver``), through the same webhook
payload its HTTP handler takes.

- **Prometheus** (``rules/alerting.go``): every ``ruleInterval`` (its own phase,
  ``pipeline.Phases``; a group's own ``interval`` where it says one) each alerting
  rule is evaluated at that instant over what was scraped by then. A series in
  the result starts an alert, *pending* from that evaluation (its ``startsAt``),
  *firing* once it has been in the result of every evaluation for the rule's
  ``for`` (at once without one); one that leaves the result resolves a firing
  alert and forgets a pending one. The alert's labels are the series' (without
  ``__name__``), the rule's ``labels`` and ``alertname``. Prometheus sends it to
  Alertmanager at that evaluation (its sending queue takes milliseconds).
- **Alertmanager** (the route of ``deploy/base/alertmanager-receiver.yaml``):
  only alerts whose name matches ``ROUTE`` go to the controller, in groups by
  ``GROUP_BY``. A new group is sent ``groupWait`` after its first alert; then
  every ``groupInterval`` it is sent again if its firing alerts changed, an alert
  it had sent resolved (``send_resolved: true``), or ``repeatInterval`` passed
  since it was last sent; a group left with no alert ends. A firing alert is
  sent without ``endsAt`` (the receiver holds it until its resolve), a resolved
  one with the time it resolved.

Only the alerting rules that the route sends and an ``alertname:`` rule reads are
evaluated: the others can change no decision. The rule file is the shipped
``rules/prometheus/accel-fleet.rules.yaml`` unless the scenario names one
(``telemetry.alertRules``); it is read with positions, and a problem is a
``RuleSetError`` as for the remediation rules.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from yaml.nodes import Node

from accel_common.yamlread import Reader
from autoscaler.promql.errors import EvalError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.support import parse_error, unsupported
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.pipeline import Fleet, Grid, Phases, TelemetrySpec, every, sighting
from autoscaler.sources.alertmanager import AlertReceiver, fingerprint_of
from autoscaler.types import Vector

# The route's matcher (alertname=~"AccelDevice.+|AccelEcc.+"; Alertmanager anchors
# a regex matcher), its group_by and its receiver, as the deploy has them.
ROUTE = re.compile(r"AccelDevice.+|AccelEcc.+")
GROUP_BY = ("alertname", "node", "device")
RECEIVER = "accel-autoscaler"
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time: "not set"
_GROUP_KEYS = ("name", "interval", "rules", "limit", "query_offset", "labels")
_RULE_KEYS = ("alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations")


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule of a Prometheus rule file: its name, expression, ``for``,
    its own labels, and its group's evaluation interval (None: ``ruleInterval``)."""

    name: str
    expr: str
    hold: float
    labels: tuple[tuple[str, str], ...]
    interval: float | None


def load_alert_rules(path: str, wanted: Collection[str]) -> tuple[AlertRule, ...]:
    """The alerting rules of the Prometheus rule file at ``path`` that the route
    sends to the controller and whose name is in ``wanted``; ``RuleSetError``
    naming every problem of the file (those of rules that are not wanted too)."""
    r = Reader(path)
    root = r.load(empty="empty file: expected a Prometheus rule file (groups: ...)")
    out: list[AlertRule] = []
    top = r.mapping(root, "a Prometheus rule file", ("groups",), ("groups",)) if root else None
    groups = r.sequence(top["groups"][1], "groups") if top and "groups" in top else None
    for group in groups or []:
        g = r.mapping(group, "a rule group", _GROUP_KEYS, ("name", "rules"))
        if g is None or "rules" not in g:
            continue
        interval = (
            r.duration(g["interval"][1], "interval", minimum=1.0) if "interval" in g else None
        )
        for item in r.sequence(g["rules"][1], "rules") or []:
            rule = _rule(r, item, interval)
            if rule is not None and ROUTE.fullmatch(rule.name) and rule.name in wanted:
                out.append(rule)
    if r.problems:
        raise RuleSetError(r.problems)
    return tuple(out)


def _rule(r: Reader, node: Node, interval: float | None) -> AlertRule | None:
    m = r.mapping(node, "a rule", _RULE_KEYS, ("expr",))
    if m is None or "alert" not in m:
        return None  # a recording rule: Prometheus's business, not the route's
    name = r.string(m["alert"][1], "alert")
    expr = r.string(m["expr"][1], "expr") if "expr" in m else None
    hold = r.duration(m["for"][1], "for") if "for" in m else 0.0
    labels: dict[str, str] = {}
    if "labels" in m:
        for key, (_, value) in (r.mapping(m["labels"][1], "labels", None) or {}).items():
            text = r.string(value, f"label {key}", empty=True)
            if text is not None:
                labels[key] = text
    if "keep_firing_for" in m:
        r.problem(m["keep_firing_for"][0], "keep_firing_for is not simulated; leave it out here")
    if expr is not None:
        problem = parse_error(expr)
        reasons = [problem] if problem else unsupported(expr)
        for reason in reasons:
            r.problem(m["expr"][1], f"expr: not run by the built-in evaluator: {reason}")
    if name is None or expr is None or hold is None:
        return None
    return AlertRule(name, expr, hold, tuple(sorted(labels.items())), interval)


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class _Active:
    """An alert Prometheus holds: pending since ``since``, firing once ``fired``."""

    labels: dict[str, str]
    since: float
    fired: bool = False


@dataclass
class _Held:
    """An alert in an Alertmanager group."""

    labels: dict[str, str]
    starts: float
    resolved: float | None = None


@dataclass
class _Group:
    alerts: dict[str, _Held] = field(default_factory=dict)
    sent_firing: frozenset[str] = frozenset()
    last_sent: float | None = None


@dataclass(frozen=True)
class Notification:
    """One webhook Alertmanager sent: when, and each alert's name, node, device and
    status (what the tests and a reader of the run look at)."""

    at: float
    alerts: tuple[tuple[str, str, str, str], ...]


class AlertPath:
    """Prometheus's alerting rules and Alertmanager on ``fleet``'s clock, sending to
    ``receiver`` (module docstring). ``evaluator`` reads the store the scrapes
    fill."""

    def __init__(
        self,
        fleet: Fleet,
        evaluator: Evaluator,
        rules: tuple[AlertRule, ...],
        spec: TelemetrySpec,
        phases: Phases,
        receiver: AlertReceiver,
    ) -> None:
        self.fleet = fleet
        self.evaluator = evaluator
        self.rules = rules
        self.spec = spec
        self.phases = phases
        self.receiver = receiver
        self._active: dict[str, dict[tuple[tuple[str, str], ...], _Active]] = {}
        self._groups: dict[tuple[str, ...], _Group] = {}
        self.sent: list[Notification] = []

    def start(self) -> None:
        """Schedules each rule group's evaluations (one per interval they share)."""
        intervals = sorted({rule.interval or self.spec.rule_interval for rule in self.rules})
        for interval in intervals:
            grid = Grid(self.phases.rules.origin, interval)
            rules = [r for r in self.rules if (r.interval or self.spec.rule_interval) == interval]
            every(self.fleet, grid, grid.index_at_or_after(EPOCH), partial(self._eval, rules))

    # -- Prometheus ------------------------------------------------------------------

    def _eval(self, rules: list[AlertRule]) -> None:
        now = self.fleet.now
        for rule in rules:
            try:
                result = self.evaluator.instant(rule.expr, now)
            except EvalError:
                continue  # as Prometheus: a failed evaluation changes no alert's state
            samples = result.samples if isinstance(result, Vector) else ()
            found: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
            for s in samples:
                labels = {k: v for k, v in s.labels if k != "__name__"}
                labels.update(rule.labels)
                labels["alertname"] = rule.name
                found[tuple(sorted(labels.items()))] = labels
            active = self._active.setdefault(rule.name, {})
            for key, labels in found.items():
                a = active.setdefault(key, _Active(labels, now))
                if not a.fired and now - a.since >= rule.hold:
                    a.fired = True
                    self._receive(labels, a.since, None)
            for key in [k for k in active if k not in found]:
                gone = active.pop(key)
                if gone.fired:
                    self._receive(gone.labels, gone.since, now)

    # -- Alertmanager ----------------------------------------------------------------

    def _receive(self, labels: dict[str, str], starts: float, resolved: float | None) -> None:
        key = tuple(labels.get(name, "") for name in GROUP_BY)
        group = self._groups.get(key)
        if group is None:
            if resolved is not None:
                return  # nothing of it was ever held
            group = self._groups[key] = _Group()
            self.fleet.at(self.fleet.now + self.spec.group_wait, lambda: self._flush(key))
        group.alerts[fingerprint_of(labels)] = _Held(labels, starts, resolved)

    def _flush(self, key: tuple[str, ...]) -> None:
        group = self._groups[key]
        now = self.fleet.now
        firing = frozenset(fp for fp, a in group.alerts.items() if a.resolved is None)
        resolved = {fp for fp, a in group.alerts.items() if a.resolved is not None}
        repeat = group.last_sent is not None and now - group.last_sent >= self.spec.repeat_interval
        if firing != group.sent_firing or resolved & group.sent_firing or (firing and repeat):
            self._send(key, group, now)
            group.last_sent, group.sent_firing = now, firing
        for fp in resolved:
            del group.alerts[fp]
        if not group.alerts:
            del self._groups[key]
            return
        self.fleet.at(now + self.spec.group_interval, lambda: self._flush(key))

    def _send(self, key: tuple[str, ...], group: _Group, now: float) -> None:
        alerts: list[dict[str, Any]] = []
        for fp, a in sorted(group.alerts.items()):
            alerts.append(
                {
                    "status": "firing" if a.resolved is None else "resolved",
                    "labels": a.labels,
                    "annotations": {},
                    "startsAt": _rfc3339(a.starts),
                    "endsAt": _ZERO_TIME if a.resolved is None else _rfc3339(a.resolved),
                    "fingerprint": fp,
                }
            )
        payload = {
            "version": "4",
            "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
            "receiver": RECEIVER,
            "groupLabels": dict(zip(GROUP_BY, key, strict=True)),
            "alerts": alerts,
        }
        self.receiver.ingest(payload, now)
        self.sent.append(
            Notification(
                now,
                tuple(
                    (
                        a["labels"]["alertname"],
                        a["labels"].get("node", ""),
                        a["labels"].get("device", ""),
                        a["status"],
                    )
                    for a in alerts
                ),
            )
        )


def alert_sighting(
    phases: Phases, spec: TelemetrySpec, rule: AlertRule, onset: float
) -> tuple[float, float, float]:
    """For an alert whose expression holds from the first scrape that shows a
    change at ``onset`` (and a group that did not exist): when it fires, when
    Alertmanager sends it, and the first evaluation that reads it."""
    seen = sighting(phases, "prometheus", onset).scrape
    grid = Grid(phases.rules.origin, rule.interval or spec.rule_interval)
    pending = grid.at_or_after(seen)
    fired = grid.at(grid.index_at_or_after(pending + rule.hold))
    sent = fired + spec.group_wait
    return fired, sent, phases.evaluation.at_or_after(sent)


__all__ = [
    "GROUP_BY",
    "RECEIVER",
    "ROUTE",
    "AlertPath",
    "AlertRule",
    "Notification",
    "alert_sighting",
    "load_alert_rules",
]
