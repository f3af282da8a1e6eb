"""Alertmanager's webhook (payload version 4) as a source of firing alerts.

A rule with ``alertname:`` sees the alerts of that name that are firing now, as a
vector of their label sets with value 1. Alerts are kept by fingerprint, so the
repeated notifications Alertmanager sends for one alert (``repeat_interval``, group
changes) are one alert, not many; a resolved alert only removes its entry and can
never trigger anything (Robusta #345 acted on resolved alerts).
"""

from __future__ import annotations

import datetime
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.types import QueryResult, Sample, Vector, labels_of

log = logging.getLogger("accel_autoscaler.sources.alertmanager")

MAX_BODY = 1024 * 1024


class PayloadError(ValueError):
    """The webhook body is not an Alertmanager v4 payload; the message says why."""


@dataclass(frozen=True)
class Alert:
    fingerprint: str
    labels: Mapping[str, str]
    starts_at: float
    ends_at: float | None


def _time(value: Any, where: str) -> float | None:
    """RFC 3339 as Alertmanager writes it; its zero time means "not set"."""
    if not isinstance(value, str):
        raise PayloadError(f"{where} must be an RFC 3339 time string")
    if value.startswith("0001-01-01"):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise PayloadError(f"{where}: {e}") from e


def fingerprint_of(labels: Mapping[str, str]) -> str:
    """Stands in for Alertmanager's fingerprint when a payload lacks one."""
    joined = "\xff".join(f"{k}\xff{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


class AlertReceiver:
    name = "alertmanager"

    def __init__(self) -> None:
        self.firing: dict[str, Alert] = {}
        self.received = 0
        self.last_received: float | None = None

    def ingest(self, payload: Any, now: float) -> tuple[int, int]:
        """Applies one webhook body; returns (firing, resolved) counts in it."""
        if not isinstance(payload, dict):
            raise PayloadError("the body must be a JSON object")
        if payload.get("version") != "4":
            raise PayloadError(
                f'unsupported payload version {payload.get("version")!r} (expected "4")'
            )
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            raise PayloadError("'alerts' must be a list")
        parsed: list[tuple[str, Alert]] = []
        for i, raw in enumerate(alerts):
            where = f"alerts[{i}]"
            if not isinstance(raw, dict):
                raise PayloadError(f"{where} must be an object")
            status = raw.get("status")
            if status not in ("firing", "resolved"):
                raise PayloadError(f"{where}.status must be 'firing' or 'resolved'")
            labels = raw.get("labels")
            if not isinstance(labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
            ):
                raise PayloadError(f"{where}.labels must map strings to strings")
            if "alertname" not in labels:
                raise PayloadError(f"{where}.labels has no alertname")
            fp = raw.get("fingerprint") or fingerprint_of(labels)
            if not isinstance(fp, str):
                raise PayloadError(f"{where}.fingerprint must be a string")
            starts = _time(raw.get("startsAt", "0001-01-01T00:00:00Z"), f"{where}.startsAt")
            ends = _time(raw.get("endsAt", "0001-01-01T00:00:00Z"), f"{where}.endsAt")
            parsed.append((status, Alert(fp, dict(labels), starts or now, ends)))
        # Validate the whole body before applying any of it: a bad body changes nothing.
        firing = resolved = 0
        for status, alert in parsed:
            if status == "firing":
                firing += 1
                if alert.fingerprint not in self.firing:
                    log.info("alert firing: %s %s", alert.labels["alertname"], dict(alert.labels))
                self.firing[alert.fingerprint] = alert
            else:
                resolved += 1
                if self.firing.pop(alert.fingerprint, None) is not None:
                    log.info("alert resolved: %s %s", alert.labels["alertname"], dict(alert.labels))
        self.received += 1
        self.last_received = now
        return firing, resolved

    def vector(self, alertname: str, now: float) -> QueryResult:
        """The firing alerts of one name. An alert whose endsAt has passed without a
        resolve notification is no longer firing (Alertmanager's own rule)."""
        for fp in [
            fp for fp, a in self.firing.items() if a.ends_at is not None and a.ends_at <= now
        ]:
            del self.firing[fp]
        samples = tuple(
            Sample(labels_of(a.labels), 1.0, now)
            for a in self.firing.values()
            if a.labels.get("alertname") == alertname
        )
        # No firing alert is a known answer: the receiver holds every alert it was sent.
        return Vector(samples)
