"""The state record: what the controller writes of its engine state on the cluster,
and how it reads it back, entry by entry, as input from someone else.

The record is a ConfigMap (``<controller-name>-state``) that the controller writes,
but anyone who may write ConfigMaps in its namespace can change it, and a record
that cannot be read must never stop remediation or widen it. So it is read with the
bounded reader (``accel_common.clusterjson``: size, depth, finite numbers) and then
one entry at a time: every time is a finite number from the epoch to a day past
``now`` (a cooldown of ``1e300`` or ``Infinity`` would never end), every count is a
whole number in range, every name and label a bounded string. A refused entry is
dropped and named in ``problems`` (the caller logs them); the rest is kept; the
next write leaves the refused value out, so it is never written back.

What each refusal costs: a cooldown, incident or active target dropped is as if
it had not been recorded (the nodes' remediation entries still say which targets
are under remediation, ``engine/restore.py``); an hourly action dropped lowers the
count it adds to ``maxActionsPerHour`` by one. The breaker alone errs the other
way: an unreadable breaker reads as *open*, with a reason that says so, because a
breaker that a person must reset (``breakerReset: manual``) read as closed would
re-open the fleet to remediation. ``POST /api/v1/breaker/reset`` closes it.

Only a text that is no record at all (not bounded JSON, not an object, another
version) raises ``RecordError``: then the controller starts from the node entries
alone and overwrites the record with its own on the next write.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from accel_common import clusterjson
from accel_common.clusterjson import ClusterValueError
from accel_common.remedies import ACTION_CLASSES
from autoscaler.engine.breaker import UNHEALTHY_ACTIONS
from autoscaler.engine.state import Active, EngineState, Incident, Ladder, TargetKey
from autoscaler.types import Labels, labels_of

# The record's format; a record of another version is not read (see ``parse_record``).
RECORD_VERSION = 1

# Actions whose remediation is recorded on its node (ops/nodes.py, claim): for these the
# node entry, not the state record, says whether a target is under remediation.
NODE_RECORDED = UNHEALTHY_ACTIONS

# A ConfigMap holds at most 1 MiB; the record is parsed within that.
MAX_RECORD_BYTES = 1024 * 1024
# Our record nests 4 deep (record, part, entry, target); deeper values inside an
# entry cost that entry (a label value must be a string), deeper than this the record.
MAX_RECORD_DEPTH = 64
# Times later than this past ``now`` are refused: replicas' clocks differ by
# seconds, not days.
FUTURE_SLACK = 86_400.0
# Entries in one part, labels in one target, identities in one incident.
MAX_ENTRIES = 100_000
MAX_LABELS = 64
MAX_IDS = 64
MAX_STEP = 64
# "unsupported": a step the node cannot perform (engine/ladder.py).
OUTCOMES = ("done", "partial", "skipped", "failed", "unknown", "unsupported")
# The fault classes a ladder may follow (accel_common.remedies).
CLASSES = frozenset(ACTION_CLASSES)
# Ladder starts kept per target for a recurrence cap: more than any cap counts.
MAX_STARTS = 64

PARTS = ("breaker", "cooldowns", "actions", "incidents", "active", "ladders", "ladderStarts")

T = TypeVar("T")


class RecordError(ValueError):
    """A state record that cannot be read at all (not JSON, another version)."""


def record_of(state: EngineState) -> dict[str, Any]:
    """What the state record keeps of ``state``: the parts of ``EngineState.to_json``
    that the node entries cannot tell (see ``engine/restore.py``)."""
    # Without the decision log and the notes, which the record does not keep and
    # which would make this cost a thousand decisions per cycle.
    doc = dataclasses.replace(state, decisions=deque(), notes=[]).to_json()
    return {
        "version": RECORD_VERSION,
        "breaker": doc["breaker"],
        "cooldowns": doc["cooldowns"],
        "actions": doc["actions"],
        "incidents": [i for i in doc.get("incidents", []) if i.get("handledAt") is not None],
        "active": [a for a in doc["active"] if a["action"] not in NODE_RECORDED],
        "ladders": doc["ladders"],
        "ladderStarts": doc["ladderStarts"],
    }


def record_text(state: EngineState) -> str:
    """The record as it is stored (stable key order, so an unchanged state writes
    the same text and the controller can skip the write)."""
    return json.dumps(record_of(state), sort_keys=True, separators=(",", ":"))


class _Reader:
    """Reads the entries of one record, keeping the problems."""

    def __init__(self, now: float | None, problems: list[str]) -> None:
        self.latest = float("inf") if now is None else now + FUTURE_SLACK
        self.problems = problems

    def time(self, value: Any, where: str) -> float:
        return clusterjson.number(value, where, lo=0.0, hi=self.latest)

    def opt_time(self, value: Any, where: str) -> float | None:
        return None if value is None else self.time(value, where)

    def labels(self, value: Any, where: str, most: int = MAX_LABELS) -> Labels:
        if not isinstance(value, dict):
            raise ClusterValueError(where, "expected an object of label names and values")
        if len(value) > most:
            raise ClusterValueError(where, f"{len(value)} labels (at most {most})")
        return labels_of(
            {
                clusterjson.text(k, f"{where} label name", max_len=256): clusterjson.text(
                    v, f"{where}.{k[:64]}"
                )
                for k, v in value.items()
            }
        )

    def key(self, entry: Mapping[str, Any], where: str) -> TargetKey:
        rule = clusterjson.text(entry.get("rule"), f"{where}.rule", max_len=253)
        return (rule, self.labels(entry.get("target"), f"{where}.target"))

    def part(self, doc: Mapping[str, Any], name: str, read: Callable[[Any, str], T]) -> list[T]:
        """Each readable entry of list ``name``; a bad one is dropped and named."""
        entries = doc.get(name, [])
        if not isinstance(entries, list):
            self.problems.append(f"{name}: expected a list; all of it dropped")
            return []
        if len(entries) > MAX_ENTRIES:
            self.problems.append(f"{name}: {len(entries)} entries, the first {MAX_ENTRIES} read")
        out: list[T] = []
        for i, entry in enumerate(entries[:MAX_ENTRIES]):
            where = f"{name}[{i}]"
            try:
                if not isinstance(entry, dict):
                    raise ClusterValueError(where, "expected an object")
                out.append(read(entry, where))
            except ClusterValueError as e:
                self.problems.append(f"{e}; dropped")
        return out

    def cooldown(self, e: Mapping[str, Any], where: str) -> tuple[TargetKey, float]:
        return self.key(e, where), self.time(e.get("lastActedAt"), f"{where}.lastActedAt")

    def action(self, e: Mapping[str, Any], where: str) -> tuple[float, str]:
        at = self.time(e.get("at"), f"{where}.at")
        return at, clusterjson.text(e.get("rule"), f"{where}.rule", max_len=253)

    def incident(self, e: Mapping[str, Any], where: str) -> tuple[TargetKey, Incident]:
        ids = e.get("ids", [])
        if not isinstance(ids, list) or len(ids) > MAX_IDS:
            raise ClusterValueError(f"{where}.ids", f"expected a list of at most {MAX_IDS}")
        return self.key(e, where), Incident(
            self.time(e.get("since"), f"{where}.since"),
            tuple(sorted(clusterjson.text(i, f"{where}.ids") for i in ids)),
            self.opt_time(e.get("handledAt"), f"{where}.handledAt"),
        )

    def active(self, e: Mapping[str, Any], where: str) -> tuple[TargetKey, Active]:
        node = e.get("node")
        return self.key(e, where), Active(
            self.time(e.get("since"), f"{where}.since"),
            clusterjson.text(e.get("action"), f"{where}.action", max_len=64),
            None if node is None else clusterjson.text(node, f"{where}.node", max_len=253),
        )

    def ladder(self, e: Mapping[str, Any], where: str) -> tuple[TargetKey, Ladder]:
        outcome = e.get("outcome")
        if outcome is not None and outcome not in OUTCOMES:
            raise ClusterValueError(f"{where}.outcome", f"not one of {', '.join(OUTCOMES)}")
        labels = e.get("labels")
        klass = e.get("class")
        if klass is not None and klass not in CLASSES:
            # Unreadable: the ladder follows every step, the gentlest first, rather
            # than a class nobody can vouch for.
            self.problems.append(f"{where}.class: not a fault class; the ladder takes every step")
            klass = None
        return self.key(e, where), Ladder(
            clusterjson.whole(e.get("step"), f"{where}.step", lo=1, hi=MAX_STEP),
            self.time(e.get("since"), f"{where}.since"),
            self.time(e.get("started"), f"{where}.started"),
            outcome,
            () if labels is None else self.labels(labels, f"{where}.labels"),
            klass,
            clusterjson.text(e.get("why") or "", f"{where}.why", max_len=4096),
        )

    def starts(self, e: Mapping[str, Any], where: str) -> tuple[TargetKey, tuple[float, ...]]:
        """A recurrence cap's count: an unreadable one is dropped whole, so it counts
        fewer ladders, never more (it can never push a device to isolation)."""
        at = e.get("at")
        if not isinstance(at, list) or len(at) > MAX_STARTS:
            raise ClusterValueError(f"{where}.at", f"expected a list of at most {MAX_STARTS}")
        return self.key(e, where), tuple(self.time(t, f"{where}.at") for t in at)

    def breaker(self, doc: Mapping[str, Any], state: EngineState) -> None:
        b = doc.get("breaker")
        if b is None:
            return
        try:
            if not isinstance(b, dict):
                raise ClusterValueError("breaker", "expected an object")
            is_open = b.get("open")
            if not isinstance(is_open, bool):
                raise ClusterValueError("breaker.open", "expected true or false")
            opened = self.opt_time(b.get("openedAt"), "breaker.openedAt")
            reason = clusterjson.text(b.get("reason", ""), "breaker.reason", max_len=4096)
        except ClusterValueError as e:
            self.problems.append(f"{e}; the breaker reads as open until a person resets it")
            state.breaker_open = True
            state.breaker_opened_at = None
            state.breaker_reason = (
                f"the state record's breaker could not be read ({e.why}); "
                "POST /api/v1/breaker/reset closes it"
            )
            return
        state.breaker_open, state.breaker_opened_at, state.breaker_reason = is_open, opened, reason


def parse_record(
    text: str, *, now: float | None = None, problems: list[str] | None = None
) -> EngineState:
    """The state that a record holds (every other part empty), read as the module
    docstring says; refused entries are named in ``problems`` when given. Times
    past ``now`` plus a day are refused (any time is taken without ``now``).
    RecordError when the text is no record of this version at all."""
    try:
        doc = clusterjson.loads_object(
            text, "state record", max_bytes=MAX_RECORD_BYTES, max_depth=MAX_RECORD_DEPTH
        )
    except ClusterValueError as e:
        raise RecordError(e.why) from None
    if doc.get("version") != RECORD_VERSION:
        raise RecordError(
            f"version {str(doc.get('version'))[:40]!r}, this controller reads {RECORD_VERSION}"
        )
    r = _Reader(now, problems if problems is not None else [])
    state = EngineState(
        last_acted=dict(r.part(doc, "cooldowns", r.cooldown)),
        actions=r.part(doc, "actions", r.action),
        incidents=dict(r.part(doc, "incidents", r.incident)),
        active=dict(r.part(doc, "active", r.active)),
        ladders=dict(r.part(doc, "ladders", r.ladder)),
        ladder_starts=dict(r.part(doc, "ladderStarts", r.starts)),
    )
    r.breaker(doc, state)
    return state


__all__ = [
    "MAX_RECORD_BYTES",
    "NODE_RECORDED",
    "PARTS",
    "RECORD_VERSION",
    "RecordError",
    "parse_record",
    "record_of",
    "record_text",
]
