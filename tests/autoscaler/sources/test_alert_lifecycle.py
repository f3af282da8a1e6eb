"""The Alertmanager receiver's lifecycle: a replayed firing after its resolve is
stale, a firing alert not re-sent within the TTL expires, standing down drops what
was held, the number held is bounded, and every sample names its incident. The
real Alertmanager is in tests/autoscaler/controller/test_alert_replay.py."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from autoscaler.sources.alertmanager import (
    DEFAULT_LIMIT,
    DEFAULT_TTL,
    INCIDENT_LABEL,
    AlertReceiver,
    PayloadError,
    fingerprint_of,
)
from autoscaler.types import Vector

# Noon after the alerts below started.
T0 = datetime.datetime(2026, 11, 29, 12, tzinfo=datetime.UTC).timestamp()
STARTS = "2026-11-29T10:00:00.123456789Z"
LATER = "2026-11-29T11:00:00Z"
ZERO = "0001-01-01T00:00:00Z"


def alert(
    status: str = "firing",
    node: str = "n1",
    starts: str | None = STARTS,
    fingerprint: str | None = "fp-n1",
    ends: str = ZERO,
    name: str = "GPUFault",
) -> dict[str, Any]:
    a: dict[str, Any] = {
        "status": status,
        "labels": {"alertname": name, "node": node},
        "endsAt": ends,
    }
    if starts is not None:
        a["startsAt"] = starts
    if fingerprint is not None:
        a["fingerprint"] = fingerprint
    return a


def body(*alerts: dict[str, Any]) -> dict[str, Any]:
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    return {"version": "4", "status": status, "alerts": list(alerts)}


def firing(r: AlertReceiver, now: float, name: str = "GPUFault") -> list[dict[str, str]]:
    result = r.vector(name, now)
    assert isinstance(result, Vector)
    return [s.as_dict() for s in result.samples]


def test_defaults_are_three_alertmanager_repeat_intervals_and_ten_thousand() -> None:
    r = AlertReceiver()
    assert (r.ttl, DEFAULT_TTL, r.limit, DEFAULT_LIMIT) == (12 * 3600, 12 * 3600, 10_000, 10_000)
    assert r.remember == r.ttl
    assert dict(r.dropped) == {"expired": 0, "limit": 0, "oversize": 0, "standby": 0, "stale": 0}


def test_every_sample_carries_its_incident() -> None:
    r = AlertReceiver()
    r.ingest(body(alert(), alert(node="n2", fingerprint="fp-n2", starts=LATER)), T0)
    assert sorted(firing(r, T0), key=lambda s: s["node"]) == [
        {"alertname": "GPUFault", "node": "n1", INCIDENT_LABEL: f"fp-n1@{STARTS}"},
        {"alertname": "GPUFault", "node": "n2", INCIDENT_LABEL: f"fp-n2@{LATER}"},
    ]
    assert firing(r, T0, "Other") == []


def test_a_replayed_firing_after_its_resolve_is_stale() -> None:
    r = AlertReceiver()
    r.ingest(body(alert()), T0)
    assert len(firing(r, T0)) == 1
    r.ingest(body(alert("resolved", ends="2026-11-29T10:30:00Z")), T0 + 60)
    assert firing(r, T0 + 60) == []
    done = r.ingest(body(alert()), T0 + 120)  # the same body again
    assert (done.firing, done.resolved, dict(done.dropped)) == (1, 0, {"stale": 1})
    assert firing(r, T0 + 120) == []
    assert r.dropped["stale"] == 1


def test_a_resolve_seen_before_its_firing_still_makes_the_firing_stale() -> None:
    # An HA pair: this replica got the resolve, the other the firing, which then
    # reaches this one late.
    r = AlertReceiver()
    r.ingest(body(alert("resolved")), T0)
    r.ingest(body(alert()), T0 + 1)
    assert firing(r, T0 + 1) == []
    assert r.dropped["stale"] == 1


def test_a_new_incident_of_a_resolved_alert_fires() -> None:
    r = AlertReceiver()
    r.ingest(body(alert()), T0)
    r.ingest(body(alert("resolved")), T0 + 60)
    r.ingest(body(alert(starts=LATER)), T0 + 120)
    assert [s[INCIDENT_LABEL] for s in firing(r, T0 + 120)] == [f"fp-n1@{LATER}"]


def test_an_earlier_incident_neither_replaces_nor_resolves_the_current_one() -> None:
    r = AlertReceiver()
    r.ingest(body(alert(starts=LATER)), T0)
    r.ingest(body(alert(starts=STARTS)), T0 + 1)  # a late retry of an earlier incident
    assert r.dropped["stale"] == 1
    r.ingest(body(alert("resolved", starts=STARTS)), T0 + 2)  # its late resolve
    assert [s[INCIDENT_LABEL] for s in firing(r, T0 + 2)] == [f"fp-n1@{LATER}"]


def test_resolved_pairs_are_remembered_for_a_bounded_time_and_count() -> None:
    r = AlertReceiver(ttl=100, limit=2)
    r.ingest(body(alert("resolved")), T0)
    assert len(r.resolved) == 1
    r.vector("GPUFault", T0 + 101)  # forgotten after `remember` (the TTL)
    assert len(r.resolved) == 0
    for i in range(3):
        r.ingest(body(alert("resolved", node=f"n{i}", fingerprint=f"fp{i}")), T0 + 200 + i)
    assert [fp for fp, _ in r.resolved] == ["fp1", "fp2"]  # the oldest went first


def test_a_firing_alert_not_resent_within_the_ttl_expires() -> None:
    r = AlertReceiver(ttl=3)
    r.ingest(body(alert()), T0)
    r.ingest(body(alert()), T0 + 2)  # Alertmanager's re-send refreshes it
    assert len(firing(r, T0 + 5)) == 1
    assert r.dropped["expired"] == 0
    assert firing(r, T0 + 5.5) == []
    assert r.dropped["expired"] == 1
    # Not a resolve: if Alertmanager re-sends it, it still fires.
    r.ingest(body(alert()), T0 + 6)
    assert len(firing(r, T0 + 6)) == 1


def test_endsat_in_the_past_ends_an_alert_without_counting_a_drop() -> None:
    r = AlertReceiver()
    r.ingest(body(alert(ends="2026-11-29T10:05:00Z")), T0)
    assert firing(r, T0) == []
    assert sum(r.dropped.values()) == 0


def test_standing_down_drops_what_was_held_and_keeps_the_resolved_pairs() -> None:
    r = AlertReceiver()
    r.ingest(body(alert(), alert(node="n2", fingerprint="fp-n2")), T0)
    r.ingest(body(alert("resolved", node="n3", fingerprint="fp-n3")), T0)
    assert r.clear() == 2
    assert firing(r, T0) == []
    assert r.dropped["standby"] == 2
    assert len(r.resolved) == 1
    assert r.clear() == 0


def test_the_limit_drops_new_alerts_and_counts_them() -> None:
    r = AlertReceiver(limit=2)
    done = r.ingest(
        body(*(alert(node=f"n{i}", fingerprint=f"fp{i}") for i in range(5))),
        T0,
    )
    assert dict(done.dropped) == {"limit": 3}
    assert sorted(s["node"] for s in firing(r, T0)) == ["n0", "n1"]
    assert r.dropped["limit"] == 3
    # One already held is still refreshed and resolved; its place frees up.
    r.ingest(body(alert(node="n0", fingerprint="fp0")), T0 + 1)
    assert r.dropped["limit"] == 3
    r.ingest(body(alert("resolved", node="n0", fingerprint="fp0")), T0 + 2)
    r.ingest(body(alert(node="n4", fingerprint="fp4")), T0 + 3)
    assert sorted(s["node"] for s in firing(r, T0 + 3)) == ["n1", "n4"]


def test_without_fingerprint_alertmanagers_own_is_computed() -> None:
    # Fingerprints that Debian's Alertmanager 0.25 gave these label sets.
    labels = {"alertname": "GPUFault", "node": "node-b", "severity": "critical"}
    assert fingerprint_of(labels) == "10271b3be9eb36fb"
    assert fingerprint_of({"alertname": "X", "a": "ü"}) == "f6a01afe0d1335e4"
    r = AlertReceiver()
    r.ingest(body(alert(fingerprint=None)), T0)
    fp = fingerprint_of({"alertname": "GPUFault", "node": "n1"})
    assert [s[INCIDENT_LABEL] for s in firing(r, T0)] == [f"{fp}@{STARTS}"]


def test_without_startsat_the_first_notification_dates_the_incident() -> None:
    r = AlertReceiver()
    r.ingest(body(alert(starts=None)), T0)
    first = [s[INCIDENT_LABEL] for s in firing(r, T0)]
    r.ingest(body(alert(starts=None)), T0 + 30)  # the same incident, not a new one
    assert [s[INCIDENT_LABEL] for s in firing(r, T0 + 30)] == first
    assert first[0] == "fp-n1@2026-11-29T12:00:00Z"
    r.ingest(body(alert("resolved", starts=None)), T0 + 60)
    assert firing(r, T0 + 60) == []
    r.ingest(body(alert(starts=None)), T0 + 90)  # a new incident
    assert [s[INCIDENT_LABEL] for s in firing(r, T0 + 90)] != first


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "JSON object"),
        ({"version": "3", "alerts": []}, "version"),
        ({"version": "4", "alerts": {}}, "'alerts' must be a list"),
        # A valid resolve first: nothing of a bad body is applied.
        (body(alert("resolved"), alert(status="bogus")), r"alerts\[1\]\.status"),
        (body(alert("resolved"), alert(starts="yesterday")), r"alerts\[1\]\.startsAt"),
        (body(alert("resolved"), {"status": "firing", "labels": {}}), "no alertname"),
    ],
)
def test_a_bad_body_changes_nothing(payload: Any, message: str) -> None:
    r = AlertReceiver()
    r.ingest(body(alert()), T0)
    with pytest.raises(PayloadError, match=message):
        r.ingest(payload, T0 + 1)
    assert len(firing(r, T0 + 1)) == 1
    assert len(r.resolved) == 0


@pytest.mark.parametrize(("ttl", "limit"), [(0, 1), (-1, 1), (1, 0)])
def test_bounds_must_be_positive(ttl: float, limit: int) -> None:
    with pytest.raises(ValueError):
        AlertReceiver(ttl=ttl, limit=limit)
