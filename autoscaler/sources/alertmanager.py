"""Alertmanager's webhook (payload version 4) as a source of firing alerts, with a
lifecycle: an alert is held from its firing notification until its resolve, its
``endsAt``, or a TTL without a re-send, whichever comes first.

A rule with ``alertname:`` sees the alerts of that name that are firing now, as a
vector of their label sets with value 1. Each sample also carries the label
``__incident__`` = ``<fingerprint>@<startsAt as given>``: one alert incident is one
(fingerprint, startsAt) pair, and the engine acts at most once per incident. Alerts
are kept by fingerprint, so the repeated notifications Alertmanager sends for one
alert (``repeat_interval``, group changes) are one alert, not many; a resolved
alert only removes its entry and can never trigger anything (Robusta #345 acted on
resolved alerts).

What is held must never act on something already over:

- **Stale notifications.** The (fingerprint, startsAt) pairs of resolved alerts are
  remembered for a bounded time and count, so a firing notification for a resolved
  pair (a replay, a late retry, an Alertmanager peer that missed the resolve) is
  ignored. So is a firing of an earlier incident than the one held for its
  fingerprint. A new incident of the same alert has a new startsAt and fires.
- **Lost resolves.** Alertmanager re-sends a firing alert every ``repeat_interval``
  (4h by default), so an alert not re-sent within the TTL (three of those, 12h, by
  default) has lost its resolve and expires. ``endsAt``, when a sender sets it,
  ends an alert too (Alertmanager's own rule).
- **Another replica's past.** A replica that stands down drops the alerts it holds
  (``clear``); while standing by it refuses the webhook, so what it held would be
  stale by the time it leads again.
- **Floods.** At most ``limit`` alerts are held; a new one beyond that is dropped.
  So is an alert larger than any real one (``MAX_LABELS`` labels, ``MAX_ALERT_BYTES``
  of label names, values and fingerprint): what the receiver holds is bounded by
  ``limit`` times that, whatever is posted. The resolved pairs remembered are
  bounded by ``limit`` too, and the counters are one per reason: nothing else
  grows with the alerts received.

Every alert dropped is counted by reason (``DROP_REASONS``) for
``accel_autoscaler_alerts_dropped_total``.

A body is taken in two halves, so that a large one never holds the controller's
event loop (a 4 MiB body of 12,000 alerts took 0.5-1 s on it, long enough for a
few of them to starve everything else the loop runs):

- ``decode`` turns the raw bytes into validated notices (JSON parsing, every
  check, Alertmanager's fingerprint for alerts without one). It touches nothing
  shared, so the webhook runs it in a worker thread;
- ``apply`` (one call) or ``apply_in_slices`` (``APPLY_SLICE`` alerts at a time,
  yielding to the loop in between) changes what is held. Only this half runs on
  the loop. A body is validated whole before any of it is applied; its alerts may
  become visible to an evaluation a slice at a time, as they would had
  Alertmanager sent them in several notifications.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_common import jsonread
from autoscaler.types import QueryResult, Sample, Vector, labels_of

log = logging.getLogger("accel_autoscaler.sources.alertmanager")

# The largest webhook body read, by default (``--alerts.body-size-limit``):
# Alertmanager sends a whole group in one notification, and a group of 10,000
# alerts with their annotations is a few MiB.
MAX_BODY = 4 * 1024 * 1024

# Alerts applied between two yields to the event loop: a few milliseconds' work.
APPLY_SLICE = 500
# The most work a body is decoded for between two turns of the event loop.
SLICE_SECONDS = 0.005

# The largest alert held: its label count, and the bytes of its label names and
# values and its fingerprint. Real alerts carry a few dozen short labels (the long
# text goes in annotations, which are not held); with the default limit these
# bound the firing alerts held to about 80 MiB at worst.
MAX_LABELS = 64
MAX_ALERT_BYTES = 8 * 1024

# The sample label that names an alert's incident; the engine reads it.
INCIDENT_LABEL = "__incident__"

# Alertmanager's default ``repeat_interval``: how often it re-sends an alert that
# still fires. The TTL is three of them, so that two lost or late re-sends never
# expire an alert that still fires, and a lost resolve is forgotten within a day.
ALERTMANAGER_REPEAT_INTERVAL = 4 * 3600.0
DEFAULT_TTL = 3 * ALERTMANAGER_REPEAT_INTERVAL
DEFAULT_LIMIT = 10_000

# Why an alert was dropped: its TTL passed without a re-send ("expired"), the
# receiver held ``limit`` alerts already ("limit"), it was larger than
# MAX_LABELS or MAX_ALERT_BYTES allow ("oversize"), this replica stood down
# ("standby"), or the notification was a replay of a resolved or earlier incident
# ("stale").
DROP_REASONS = ("expired", "limit", "oversize", "standby", "stale")

_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time: Alertmanager's "not set"
_FNV64_OFFSET = 14695981039346656037
_FNV64_PRIME = 1099511628211
_U64 = (1 << 64) - 1


class PayloadError(ValueError):
    """The webhook body is not an Alertmanager v4 payload; the message says why."""


class BodyError(PayloadError):
    """The webhook body is not bounded, well-formed JSON (``jsonread``)."""


@dataclass(frozen=True, slots=True)  # slots: one object less per alert held for the GC
class Alert:
    fingerprint: str
    labels: Mapping[str, str]
    starts_at: float
    ends_at: float | None
    # startsAt exactly as the payload gave it (or, when it gave none, the time the
    # first firing notification arrived): the incident's name.
    starts_raw: str
    # When a firing notification for it last arrived: the TTL counts from here.
    seen: float

    @property
    def incident(self) -> str:
        return incident_of(self.fingerprint, self.starts_raw)


@dataclass(frozen=True)
class Ingested:
    """What one webhook body did: its firing and resolved alerts, and how many of
    them were dropped, by reason."""

    firing: int
    resolved: int
    dropped: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Notice:
    """One alert of a validated body, before it is applied."""

    status: str
    fingerprint: str
    labels: Mapping[str, str]
    starts_at: float | None
    starts_raw: str | None
    ends_at: float | None
    # Why it is too large to hold (MAX_LABELS, MAX_ALERT_BYTES); None when it is not.
    oversize: str | None = None


def incident_of(fingerprint: str, starts_at: str) -> str:
    """The ``__incident__`` label value of an alert: fingerprint and startsAt."""
    return f"{fingerprint}@{starts_at}"


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


def _rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat().replace("+00:00", "Z")


def fingerprint_of(labels: Mapping[str, str]) -> str:
    """Alertmanager's own fingerprint of a label set, for a payload that lacks one:
    prometheus/common's ``LabelSet.Fingerprint``, FNV-1a 64 over the label names in
    sorted order, each name and each value followed by the byte 0xff, written as 16
    hex digits. The same labels give the same fingerprint Alertmanager would send."""
    h = _FNV64_OFFSET
    for name in sorted(labels):
        for byte in b"%b\xff%b\xff" % (name.encode(), labels[name].encode()):
            h = ((h ^ byte) * _FNV64_PRIME) & _U64
    return f"{h:016x}"


@dataclass(frozen=True)
class Notices:
    """A webhook body, validated whole and ready to apply."""

    notices: tuple[_Notice, ...]

    def __len__(self) -> int:
        return len(self.notices)


def load(raw: bytes, max_bytes: int = MAX_BODY) -> Any:
    """The JSON value of a raw body, in one piece (``jsonread``); ``BodyError`` when
    it is not bounded, well-formed JSON. Pure: safe in a worker thread."""
    try:
        return jsonread.loads(raw, max_bytes=max_bytes)
    except jsonread.JSONBodyError as e:
        raise BodyError(f"malformed JSON: {e}") from None


def decode(raw: bytes, max_bytes: int = MAX_BODY) -> Notices:
    """The notices of one raw webhook body, in one piece: the reference that
    ``decode_in_slices`` must agree with. ``BodyError`` when the bytes are not
    bounded JSON, ``PayloadError`` when the JSON is not an Alertmanager v4 payload."""
    return Notices(tuple(_parse(load(raw, max_bytes))))


async def decode_in_slices(
    raw: bytes,
    max_bytes: int = MAX_BODY,
    *,
    one_piece: Callable[[bytes], Awaitable[Any]] | None = None,
    slice_seconds: float = SLICE_SECONDS,
) -> Notices:
    """``decode``'s answer, worked out on the event loop a slice of at most about
    ``slice_seconds`` at a time: the body is read one alert at a time, each alert
    checked and turned into a notice as it comes (its JSON dropped at once: fewer
    objects alive, less for the garbage collector to walk), with a turn of the
    loop whenever a slice is used up.

    Only a body laid out as a v4 payload is (an object whose ``alerts`` is an
    array) is read this way; any other, and any body with a problem, is read in one
    piece by ``one_piece`` (``load`` on the loop when not given; the webhook gives
    a worker thread), so that what is refused, and the words it is refused with,
    are ``load``'s."""
    if len(raw) > max_bytes:
        raise BodyError(f"malformed JSON: larger than {max_bytes} bytes")
    turn = _Turns(slice_seconds)
    try:
        payload, early = await _object_in_slices(raw.decode("utf-8"), turn)
    except (_NotLaidOut, ValueError, RecursionError):
        # ValueError: UnicodeDecodeError, JSONDecodeError and the decoder's refusals.
        payload = await one_piece(raw) if one_piece is not None else load(raw, max_bytes)
        early = None
    alerts = _alerts_of(payload)  # the payload's own problems come first, as in _parse
    if early is not None:
        if early.problem is not None:
            raise early.problem
        return Notices(tuple(early.notices))
    notices: list[_Notice] = []
    for i, alert in enumerate(alerts):
        notices.append(_notice(i, alert))
        await turn()
    return Notices(tuple(notices))


@dataclass
class _Early:
    """The notices of an ``alerts`` array made as it was read, up to its first
    problem (raised once the rest of the payload is known to be right)."""

    notices: list[_Notice] = field(default_factory=list)
    problem: PayloadError | None = None

    def take(self, item: Any) -> None:
        if self.problem is None:
            try:
                self.notices.append(_notice(len(self.notices), item))
            except PayloadError as e:
                self.problem = e


class _NotLaidOut(Exception):
    """The body is not laid out as a v4 payload, or not JSON: ``load`` decides."""


class _Turns:
    """Gives the event loop a turn once ``seconds`` of work have passed since the
    last one."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.since = time.perf_counter()

    async def __call__(self) -> None:
        if time.perf_counter() - self.since >= self.seconds:
            await asyncio.sleep(0)
            self.since = time.perf_counter()


_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def _skip(text: str, i: int) -> int:
    end: int = _SPACE.match(text, i).end()  # type: ignore[union-attr]  # always matches
    return end


async def _object_in_slices(text: str, turn: _Turns) -> tuple[dict[str, Any], _Early | None]:
    """The top-level object of ``text``, and the notices of its ``alerts`` array,
    read one element at a time (the object holds an empty list in its place).
    Duplicate keys and depth are as ``jsonread.loads`` has them: the last value of
    a key wins, and a body nested past ``MAX_DEPTH`` is left to it."""
    decoder = jsonread.decoder()
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        raise _NotLaidOut
    obj: dict[str, Any] = {}
    early: _Early | None = None
    i = _skip(text, i + 1)
    closed = text[i : i + 1] == "}"
    if closed:
        i += 1
    while not closed:
        if text[i : i + 1] != '"':
            raise _NotLaidOut
        key, i = decoder.raw_decode(text, i)
        i = _skip(text, i)
        if text[i : i + 1] != ":":
            raise _NotLaidOut
        i = _skip(text, i + 1)
        if key == "alerts" and text[i : i + 1] == "[":
            early = _Early()
            obj[key], i = [], await _array_in_slices(text, i, decoder, turn, early.take)
        else:
            if key == "alerts":
                early = None  # the last "alerts" counts, and this one is no array
            obj[key], i = decoder.raw_decode(text, i)
            if jsonread.depth(obj[key]) + 1 > jsonread.MAX_DEPTH:
                raise _NotLaidOut
        i = _skip(text, i)
        if text[i : i + 1] not in (",", "}"):
            raise _NotLaidOut
        closed = text[i] == "}"
        i = i + 1 if closed else _skip(text, i + 1)
    if _skip(text, i) != len(text):
        raise _NotLaidOut
    return obj, early


async def _array_in_slices(
    text: str, i: int, decoder: json.JSONDecoder, turn: _Turns, take: Callable[[Any], None]
) -> int:
    """Hands each element of the array that starts at ``text[i]`` to ``take``, in
    order; returns where the array ends."""
    i = _skip(text, i + 1)
    if text[i : i + 1] == "]":
        return i + 1
    while True:
        item, i = decoder.raw_decode(text, i)
        # The object and this array hold it: two levels above its own.
        if jsonread.depth(item) + 2 > jsonread.MAX_DEPTH:
            raise _NotLaidOut
        take(item)
        await turn()
        i = _skip(text, i)
        if text[i : i + 1] == "]":
            return i + 1
        if text[i : i + 1] != ",":
            raise _NotLaidOut
        i = _skip(text, i + 1)


def _parse(payload: Any) -> list[_Notice]:
    """Every alert of a body, validated as a whole before any is applied."""
    return [_notice(i, raw) for i, raw in enumerate(_alerts_of(payload))]


def _alerts_of(payload: Any) -> list[Any]:
    """The alerts of a v4 payload, unchecked yet; ``PayloadError`` when it is not one."""
    if not isinstance(payload, dict):
        raise PayloadError("the body must be a JSON object")
    if payload.get("version") != "4":
        raise PayloadError(f'unsupported payload version {payload.get("version")!r} (expected "4")')
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("'alerts' must be a list")
    return alerts


def _notice(i: int, raw: Any) -> _Notice:
    """The ``i``-th alert of a body, checked."""
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
    if not all(_encodable(k) and _encodable(v) for k, v in labels.items()):
        raise PayloadError(f"{where}.labels must be Unicode text (no lone surrogates)")
    fp = raw.get("fingerprint") or fingerprint_of(labels)
    if not isinstance(fp, str) or not _encodable(fp):
        raise PayloadError(f"{where}.fingerprint must be a string")
    raw_starts = raw.get("startsAt", _ZERO_TIME)
    starts = _time(raw_starts, f"{where}.startsAt")
    ends = _time(raw.get("endsAt", _ZERO_TIME), f"{where}.endsAt")
    return _Notice(
        status,
        fp,
        dict(labels),
        starts,
        raw_starts if starts is not None else None,
        ends,
        _oversize(labels, fp),
    )


def _encodable(text: str) -> bool:
    """Whether ``text`` is Unicode that UTF-8 can carry: JSON's ``\\ud800`` escapes
    make lone surrogates, which would fail later in a log line or a fingerprint."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _oversize(labels: Mapping[str, str], fingerprint: str) -> str | None:
    if len(labels) > MAX_LABELS:
        return f"{len(labels)} labels (at most {MAX_LABELS})"
    size = len(fingerprint) + sum(len(k) + len(v) for k, v in labels.items())
    if size > MAX_ALERT_BYTES:
        return f"{size} characters of labels and fingerprint (at most {MAX_ALERT_BYTES})"
    return None


class AlertReceiver:
    """The alerts one replica received, with their lifecycle (module docstring).

    ``ttl``: seconds a firing alert is held without a re-send. ``limit``: how many
    firing alerts are held, and how many resolved (fingerprint, startsAt) pairs are
    remembered. ``remember``: seconds a resolved pair is remembered (the TTL by
    default: a replay older than that is as stale as an alert never re-sent)."""

    name = "alertmanager"

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL,
        limit: int = DEFAULT_LIMIT,
        remember: float | None = None,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"the alert TTL must be positive, got {ttl:g}")
        if limit < 1:
            raise ValueError(f"the alert limit must be at least 1, got {limit}")
        self.ttl = ttl
        self.limit = limit
        self.remember = ttl if remember is None else remember
        self.firing: dict[str, Alert] = {}
        # (fingerprint, startsAt) of resolved alerts -> when the resolve arrived,
        # oldest first, so that forgetting is a walk from the front.
        self.resolved: OrderedDict[tuple[str, float], float] = OrderedDict()
        self.dropped: Counter[str] = Counter({reason: 0 for reason in DROP_REASONS})
        self.received = 0
        self.last_received: float | None = None

    def ingest(self, payload: Any, now: float) -> Ingested:
        """Applies one parsed webhook body. A body that does not validate changes
        nothing (``PayloadError``)."""
        return self.apply(Notices(tuple(_parse(payload))), now)

    def apply(self, body: Notices, now: float) -> Ingested:
        """Applies one decoded body at once."""
        self.expire(now)
        dropped: Counter[str] = Counter()
        self._apply(body.notices, now, dropped)
        return self._applied(body, now, dropped)

    async def apply_in_slices(
        self, body: Notices, now: float, slice_size: int = APPLY_SLICE
    ) -> Ingested:
        """Applies one decoded body ``slice_size`` alerts at a time, yielding to the
        event loop between slices, so that a body of thousands of alerts never
        holds it for long."""
        self.expire(now)
        dropped: Counter[str] = Counter()
        notices = body.notices
        for start in range(0, len(notices), slice_size):
            if start:
                await asyncio.sleep(0)
            self._apply(notices[start : start + slice_size], now, dropped)
        return self._applied(body, now, dropped)

    def _apply(self, notices: tuple[_Notice, ...], now: float, dropped: Counter[str]) -> None:
        for n in notices:
            if n.status == "firing":
                if n.oversize is not None:
                    dropped["oversize"] += 1
                    log.warning(
                        "alert dropped: %s %s has %s",
                        n.labels["alertname"][:200],
                        n.fingerprint[:64],
                        n.oversize,
                    )
                elif (reason := self._fire(n, now)) is not None:
                    dropped[reason] += 1
            elif n.oversize is None:  # one never held has nothing to resolve
                self._resolve(n, now)

    def _applied(self, body: Notices, now: float, dropped: Counter[str]) -> Ingested:
        """The bookkeeping of one body once all of it is applied."""
        firing = sum(1 for n in body.notices if n.status == "firing")
        resolved = len(body.notices) - firing
        if dropped["limit"]:
            log.warning(
                "%d new alerts dropped: %d alerts are held already (the limit)",
                dropped["limit"],
                self.limit,
            )
        self.dropped.update(dropped)
        self.received += 1
        self.last_received = now
        return Ingested(firing, resolved, {k: v for k, v in sorted(dropped.items()) if v})

    def _fire(self, n: _Notice, now: float) -> str | None:
        """Holds or refreshes one firing alert; returns why it was dropped, if it was."""
        held = self.firing.get(n.fingerprint)
        if n.starts_at is not None and n.starts_raw is not None:
            starts, raw = n.starts_at, n.starts_raw
        elif held is not None:  # a sender without startsAt: the incident goes on
            starts, raw = held.starts_at, held.starts_raw
        else:
            starts, raw = now, _rfc3339(now)
        name = n.labels["alertname"]
        resolved_at = self.resolved.get((n.fingerprint, starts))
        if resolved_at is not None:
            log.debug(
                "stale firing notification ignored: %s %s@%s was resolved at %s",
                name,
                n.fingerprint,
                raw,
                _rfc3339(resolved_at),
            )
            return "stale"
        if held is not None and starts < held.starts_at:
            log.debug(
                "stale firing notification ignored: %s %s@%s is older than the incident held (%s)",
                name,
                n.fingerprint,
                raw,
                held.starts_raw,
            )
            return "stale"
        if held is None and len(self.firing) >= self.limit:
            return "limit"
        if held is None or held.starts_at != starts:
            log.info("alert firing: %s %s", name, dict(n.labels))
        self.firing[n.fingerprint] = Alert(
            n.fingerprint, n.labels, starts, n.ends_at, starts_raw=raw, seen=now
        )
        return None

    def _resolve(self, n: _Notice, now: float) -> None:
        """Forgets a firing alert and remembers its (fingerprint, startsAt)."""
        held = self.firing.get(n.fingerprint)
        if n.starts_at is not None:
            starts = n.starts_at
        elif held is not None:
            starts = held.starts_at
        else:
            return  # neither dated nor held: nothing to forget or to remember
        self.resolved[(n.fingerprint, starts)] = now
        self.resolved.move_to_end((n.fingerprint, starts))
        while len(self.resolved) > self.limit:
            self.resolved.popitem(last=False)
        # A late resolve of an earlier incident leaves the current one firing.
        if held is not None and held.starts_at <= starts:
            del self.firing[n.fingerprint]
            log.info("alert resolved: %s %s", n.labels["alertname"], dict(n.labels))

    def expire(self, now: float) -> None:
        """Drops the alerts whose endsAt passed or whose TTL passed without a
        re-send, and forgets resolved pairs older than ``remember``."""
        while self.resolved:
            key, at = next(iter(self.resolved.items()))
            if now - at <= self.remember:
                break
            del self.resolved[key]
        for fp, a in list(self.firing.items()):
            if a.ends_at is not None and a.ends_at <= now:
                del self.firing[fp]  # Alertmanager's own rule: it ended
                log.info(
                    "alert ended (endsAt passed): %s %s", a.labels["alertname"], dict(a.labels)
                )
            elif now - a.seen > self.ttl:
                del self.firing[fp]
                self.dropped["expired"] += 1
                log.warning(
                    "alert expired: %s %s was not re-sent within %gs; its resolve was "
                    "probably lost (or Alertmanager's repeat_interval is longer than "
                    "--alerts.ttl)",
                    a.labels["alertname"],
                    dict(a.labels),
                    self.ttl,
                )

    def firing_at(self, now: float) -> int:
        """How many alerts fire at ``now``: those ``expire(now)`` would keep, counted
        without dropping any (``/metrics`` reads this and changes nothing)."""
        return sum(
            1
            for a in self.firing.values()
            if (a.ends_at is None or a.ends_at > now) and now - a.seen <= self.ttl
        )

    def clear(self) -> int:
        """Drops every firing alert, when this replica stands down; returns how many.
        The resolved pairs stay: they only ever stop a stale firing, and a resolved
        incident never fires again (a new one has a new startsAt)."""
        dropped = len(self.firing)
        self.firing.clear()
        self.dropped["standby"] += dropped
        if dropped:
            log.info("standing down: firing alerts dropped: %d", dropped)
        return dropped

    def vector(self, alertname: str, now: float) -> QueryResult:
        """The firing alerts of one name, each labelled with its incident."""
        self.expire(now)
        samples = tuple(
            Sample(labels_of({**a.labels, INCIDENT_LABEL: a.incident}), 1.0, now)
            for a in self.firing.values()
            if a.labels.get("alertname") == alertname
        )
        # No firing alert is a known answer: the receiver holds every alert it was sent.
        return Vector(samples)
