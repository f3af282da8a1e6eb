"""What an action does with a record on the cluster that it cannot read: nothing.

Records the actions keep on the cluster (the remediation entries on a Node, a gang's
restart record on its JobSet, a Job's requeue record, a Machine's replacement
request) are written by us but stored where others may write too: a tenant owns its
JobSet's annotations, any identity that may patch a Node owns that Node's. Such a
record is read through ``accel_common.clusterjson`` (bounded: depth, size, finite
numbers, types), and what it cannot read is *unknown*, which is not the same as
*absent*:

- an absent gang-restart record means "never restarted": restart it;
- an unreadable one may hide "restarted a minute ago" or "limit reached": restarting
  again, or reporting the step ``failed`` so that a ladder escalates to a reboot or a
  Machine deletion, would both act on a guess.

So a reader raises ``UnknownFact`` (naming the fact, the object, the key and what
is wrong), and ``answering_unknown`` turns it, at the edge of the action, into an
``Outcome("unknown", ..., details={"unknown": fact})``: the action answers without
acting, the rest of the cycle goes on, and a ladder holds the step until its timeout
instead of escalating.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from accel_common.clusterjson import (
    ClusterValueError,
    annotations_of,
    describe,
    loads_object,
    text,
    whole,
)
from autoscaler.actions.base import ActionSpec, Execute
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.decision import Decision

log = logging.getLogger("accel_autoscaler.actions")

# Times in our records are plausible between 2000 and 2100: a stamp outside is
# garbage, and one in year 9999 would keep a backoff or a cooldown closed forever.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC).timestamp()
LATEST = datetime(2100, 1, 1, tzinfo=UTC).timestamp()
# Counts in our records (restarts, requeues, versions) stay far below this.
MAX_COUNT = 2**31 - 1


class UnknownFact(Exception):
    """A fact an action needs that the cluster holds in a form we cannot read.
    ``fact`` names it for the outcome (``gang-restart record``); ``error`` says
    where (object and key) and what is wrong."""

    def __init__(self, fact: str, error: ClusterValueError) -> None:
        super().__init__(f"{fact} unknown: {error}")
        self.fact = fact
        self.error = error


def unknown_outcome(e: UnknownFact) -> Outcome:
    """The answer of an action that met ``e``: it did nothing."""
    return Outcome(
        "unknown",
        f"not acting: {e}; fix or remove that value and the next cycle reads it again",
        {"unknown": e.fact, "where": e.error.where},
    )


def answering_unknown(spec: ActionSpec) -> ActionSpec:
    """``spec`` whose ``execute`` answers ``unknown_outcome`` instead of raising
    ``UnknownFact``: whichever helper found the unreadable value, the action ends
    without acting more, and never reports ``failed`` (which escalates)."""
    inner = spec.execute
    if inner is None:
        return spec
    run: Execute = inner

    async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
        try:
            return await run(ctx, decision)
        except UnknownFact as e:
            log.warning("action %s for rule %s: %s", decision.action, decision.rule, e)
            return unknown_outcome(e)

    return dataclasses.replace(spec, execute=execute)


def record(obj: Mapping[str, Any], key: str, fact: str) -> dict[str, Any]:
    """The JSON object in annotation ``key`` of ``obj``: {} when absent or empty
    (no record), the object when readable; raises ``UnknownFact`` otherwise."""
    raw = annotations_of(obj).get(key)
    if raw is None or raw == "":
        return {}
    try:
        return loads_object(raw, where(obj, key))
    except ClusterValueError as e:
        log.warning("%s; %s treated as unknown", e, fact)
        raise UnknownFact(fact, e) from None


def where(obj: Mapping[str, Any], key: str, field: str = "") -> str:
    """``kind namespace/name annotation KEY[ field F]``, for messages."""
    return f"{describe(obj)} annotation {key}" + (f" field {field}" if field else "")


def count(rec: Mapping[str, Any], field: str, at: str, fact: str) -> int:
    """``rec[field]`` as a count (absent or null: 0); ``UnknownFact`` otherwise."""
    value = rec.get(field)
    if value is None:
        return 0
    try:
        return whole(value, f"{at} field {field}", hi=MAX_COUNT)
    except ClusterValueError as e:
        raise UnknownFact(fact, e) from None


def stamp(rec: Mapping[str, Any], field: str, at: str, fact: str) -> float | None:
    """``rec[field]`` as unix seconds from ``2026-01-02T03:04:05Z`` (absent: None);
    ``UnknownFact`` when it is not such a time between 2000 and 2100."""
    value = rec.get(field)
    if value is None:
        return None
    try:
        return plausible_time(value, f"{at} field {field}")
    except ClusterValueError as e:
        raise UnknownFact(fact, e) from None


def counted(
    obj: Mapping[str, Any], key: str, fact: str
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A record that counts what we did (a gang's restarts, a Job's requeues): the
    record as read, its checked ``count`` (and ``last`` when set), and where it is
    for messages; the first two empty when there is none. ``UnknownFact`` when it
    cannot be read."""
    rec = record(obj, key, fact)
    at = where(obj, key)
    if not rec:
        return {}, {}, at
    out: dict[str, Any] = {"count": count(rec, "count", at, fact)}
    if rec.get("last") is not None:
        stamp(rec, "last", at, fact)
        out["last"] = rec["last"]
    return rec, out, at


def uid_list(rec: Mapping[str, Any], field: str, at: str, fact: str, most: int) -> list[str]:
    """``rec[field]`` as a list of at most ``most`` pod uids (absent: none);
    ``UnknownFact`` otherwise."""
    values = rec.get(field) or []
    try:
        if not isinstance(values, list) or len(values) > most:
            raise ClusterValueError(f"{at} field {field}", f"expected at most {most} pod uids")
        return [text(u, f"{at} field {field}", max_len=64) for u in values]
    except ClusterValueError as e:
        raise UnknownFact(fact, e) from None


def plausible_time(value: Any, at: str) -> float:
    """``value``, a ``%Y-%m-%dT%H:%M:%SZ`` string, as unix seconds in 2000..2100;
    ``ClusterValueError`` otherwise."""
    if not isinstance(value, str) or len(value) > 64:
        raise ClusterValueError(at, "expected a time such as 2026-01-02T03:04:05Z")
    try:
        t = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        why = f"{value!r} is not a time such as 2026-01-02T03:04:05Z"
        raise ClusterValueError(at, why) from None
    if not (math.isfinite(t) and EARLIEST <= t <= LATEST):
        raise ClusterValueError(at, f"{value} is not a plausible time (2000..2100)")
    return t


__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_COUNT",
    "UnknownFact",
    "answering_unknown",
    "count",
    "plausible_time",
    "record",
    "stamp",
    "unknown_outcome",
    "where",
]
