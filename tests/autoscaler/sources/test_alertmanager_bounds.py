"""What the Alertmanager receiver holds stays bounded whatever is posted: a flood
of unique firing alerts (200 bodies of 1,000), their resolves, alerts larger than
any real one, and text that is not Unicode. Memory is measured with tracemalloc
on the receiver alone."""

from __future__ import annotations

import datetime
import tracemalloc
from typing import Any

import pytest

from autoscaler.sources.alertmanager import (
    MAX_ALERT_BYTES,
    MAX_LABELS,
    AlertReceiver,
    PayloadError,
)

pytestmark = pytest.mark.timeout(120)

T0 = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.UTC).timestamp()
STARTS = "2026-12-01T10:00:00Z"


def body(alerts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": "4", "status": "firing", "alerts": alerts}


def unique(post: int, n: int = 1_000, status: str = "firing") -> list[dict[str, Any]]:
    """``n`` alerts no other post has: a new fingerprint and node each."""
    return [
        {
            "status": status,
            "labels": {
                "alertname": "GPUFault",
                "node": f"node-{post}-{i}",
                "device": f"nvidia{i % 8}",
                "severity": "critical",
            },
            "startsAt": STARTS,
            "fingerprint": f"{post:08x}{i:08x}",
        }
        for i in range(n)
    ]


def test_a_flood_of_unique_alerts_holds_at_most_the_limit() -> None:
    limit = 2_000
    r = AlertReceiver(limit=limit)
    traced = 15  # the last posts, under tracemalloc (which slows allocation)
    for post in range(200):
        if post == 200 - traced:
            tracemalloc.start()
        done = r.ingest(body(unique(post)), T0 + post)
        assert done.firing == 1_000
        # Resolves, of alerts held and of alerts never held: the memory of
        # resolved pairs is bounded too.
        r.ingest(body(unique(post - 2, 100, status="resolved")), T0 + post)
        r.ingest(body(unique(post + 1_000, 100, status="resolved")), T0 + post)
    grown, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(r.firing) <= limit
    assert len(r.resolved) <= limit
    assert set(r.dropped) == {"expired", "limit", "oversize", "standby", "stale"}
    assert r.dropped["limit"] > 0
    # Full long before: the last posts replace what they drop and grow nothing.
    assert grown < 1024 * 1024, grown


def test_an_alert_larger_than_any_real_one_is_dropped_and_counted() -> None:
    r = AlertReceiver()
    many = {"alertname": "GPUFault", **{f"l{i}": "v" for i in range(MAX_LABELS)}}
    long = {"alertname": "GPUFault", "node": "n" * MAX_ALERT_BYTES}
    ok = {"alertname": "GPUFault", "node": "n1"}
    alerts = [
        {"status": "firing", "labels": labels, "startsAt": STARTS} for labels in (many, long, ok)
    ]
    alerts.append(
        {"status": "firing", "labels": ok, "startsAt": STARTS, "fingerprint": "f" * 10_000}
    )
    done = r.ingest(body(alerts), T0)
    assert (done.firing, dict(done.dropped)) == (4, {"oversize": 3})
    assert [a.labels["node"] for a in r.firing.values()] == ["n1"]
    assert r.dropped["oversize"] == 3
    # Its resolve changes nothing and is not remembered.
    r.ingest(body([{**alerts[1], "status": "resolved"}]), T0)
    assert len(r.firing) == 1
    assert len(r.resolved) == 0


@pytest.mark.parametrize("where", ["name", "value", "fingerprint"])
def test_text_that_is_not_unicode_is_refused(where: str) -> None:
    bad = "\ud800"
    labels = {"alertname": "GPUFault", "node": "n1"}
    alert: dict[str, Any] = {"status": "firing", "labels": labels, "startsAt": STARTS}
    if where == "name":
        labels[bad] = "x"
    elif where == "value":
        labels["node"] = bad
    else:
        alert["fingerprint"] = bad
    r = AlertReceiver()
    with pytest.raises(PayloadError, match=r"alerts\[0\]\.(labels|fingerprint)"):
        r.ingest(body([alert]), T0)
    assert r.firing == {}
