"""Reading the agent channel's requests and answers, and the answer to one that cannot
be read.

The request and status annotations on a Node are written by the controller and by
this agent, but any identity that may patch the Node can write them too, and a value
there is read with ``accel_common.clusterjson``, never ``json.loads``: a few thousand
``[`` used to end the round in ``RecursionError``, ``NaN`` passed as a number, and a
value of the wrong type raised deep inside a task. The agent skipped that task every
round, so one bad annotation blocked the node's channel for good.

Why it is built this way:

* **A request is read whole or not at all.** Every field the task uses is checked
  here (type, length, count), so the task code below never meets a surprise. What is
  refused comes back as ``Unreadable``, with the reason and, when it can be found,
  the request's id.
* **An unreadable request gets an answer, not silence.** The task answers it with the
  documented ``failed`` status whose ``reason`` is ``unreadable`` (docs/agent.md):
  the controller waiting for that id reads a final answer instead of waiting out its
  timeout, nothing is done to the node, and the next request (a new id) is served.
* **The id of a broken request is recovered without parsing it.** The controller
  writes the id first (``{"id": ...``); a value too deep or too large for the JSON
  reader is matched against that prefix only, a linear scan of at most ``ID_MAX``
  characters. When even that fails the answer carries ``"id": ""``.
* **An unreadable status is not a free slot.** The status may have been the
  controller's ``failed`` that closed the request; the agent cannot tell, so it does
  not carry the request out: it answers ``failed`` (unreadable status) for the
  request's id, which also gives the channel a readable status again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_common import clusterjson
from accel_common.clusterjson import ClusterValueError

# A request is a few hundred bytes; a status carries a message naming pods.
REQUEST_MAX_BYTES = 64 * 1024
STATUS_MAX_BYTES = 64 * 1024
# Fields, in characters: an id is a rule name and a digest, a device a UUID or a
# PCI address, a message a few lines.
ID_MAX = 256
DEVICE_MAX = 256
MAX_DEVICES = 1024
MESSAGE_MAX = 16 * 1024
# What the agent writes is cut to this, so that its own answer always reads back.
WRITTEN_MESSAGE_MAX = 4000

# The id as the controller writes it, first in the object; matched on a prefix only.
_LEADING_ID = re.compile(r'\A\s*\{\s*"id"\s*:\s*"([^"\\\x00-\x1f]{1,' + str(ID_MAX) + r'})"')

UNREADABLE = "unreadable"


@dataclass(frozen=True)
class Unreadable:
    """A request or status annotation that cannot be used: ``why`` says what is wrong
    (with the node and key), ``id`` is the request id when it could be recovered."""

    id: str
    why: str


@dataclass(frozen=True)
class Request:
    """A request on the channel: its id, the devices (reset only; empty: all) and the
    boot id the controller saw (reboot only; may be empty)."""

    id: str
    devices: tuple[str, ...] = ()
    boot_id: str = ""


@dataclass(frozen=True)
class Status:
    """An answer on the channel, as far as the agent reads it back."""

    id: str
    state: str
    devices: tuple[str, ...] = ()
    boot_id: str = ""
    message: str = ""


def raw_value(node: Mapping[str, Any], key: str) -> Any:
    """The annotation's raw value; None when absent or empty."""
    value = clusterjson.annotations_of(node).get(key)
    return None if value is None or value == "" else value


def recover_id(raw: Any) -> str:
    """The id of a request that cannot be read as JSON, from its leading ``{"id":``."""
    if not isinstance(raw, str):
        return ""
    found = _LEADING_ID.match(raw[: ID_MAX + 64])
    return found.group(1) if found else ""


def _object(node: Mapping[str, Any], key: str, max_bytes: int) -> dict[str, Any] | Unreadable:
    raw = raw_value(node, key)
    where = f"{clusterjson.describe(node)} annotation {key}"
    try:
        return clusterjson.loads_object(raw, where, max_bytes=max_bytes)
    except ClusterValueError as e:
        return Unreadable(recover_id(raw), str(e))


def _devices(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ClusterValueError(where, "expected a list of device UUIDs")
    if len(value) > MAX_DEVICES:
        raise ClusterValueError(where, f"{len(value)} devices (at most {MAX_DEVICES})")
    return tuple(
        clusterjson.text(d, f"{where}[{i}]", max_len=DEVICE_MAX) for i, d in enumerate(value)
    )


def _optional_text(data: Mapping[str, Any], field: str, where: str, max_len: int) -> str:
    value = data.get(field)
    return "" if value is None else clusterjson.text(value, f"{where}.{field}", max_len=max_len)


def _id(data: Mapping[str, Any], where: str) -> str:
    rid = clusterjson.text(data.get("id"), f"{where}.id", max_len=ID_MAX)
    if not rid.strip():
        raise ClusterValueError(f"{where}.id", "an empty id")
    return rid


def read_request(node: Mapping[str, Any], key: str) -> Request | Unreadable | None:
    """The request in annotation ``key``: None when there is none."""
    if raw_value(node, key) is None:
        return None
    data = _object(node, key, REQUEST_MAX_BYTES)
    if isinstance(data, Unreadable):
        return data
    where = f"{clusterjson.describe(node)} annotation {key}"
    raw_id = data.get("id")
    try:
        rid = _id(data, where)
        devices = _devices(data.get("devices"), f"{where}.devices")
        boot = _optional_text(data, "bootID", where, ID_MAX)
        for field in ("requestedAt", "by"):
            _optional_text(data, field, where, ID_MAX)
    except ClusterValueError as e:
        known = isinstance(raw_id, str) and bool(raw_id.strip()) and len(raw_id) <= ID_MAX
        return Unreadable(raw_id if known and isinstance(raw_id, str) else "", str(e))
    return Request(rid, devices, boot)


def read_status(node: Mapping[str, Any], key: str) -> Status | Unreadable | None:
    """The answer in annotation ``key``: None when there is none."""
    if raw_value(node, key) is None:
        return None
    data = _object(node, key, STATUS_MAX_BYTES)
    if isinstance(data, Unreadable):
        return data
    where = f"{clusterjson.describe(node)} annotation {key}"
    try:
        return Status(
            id=clusterjson.text(data.get("id"), f"{where}.id", max_len=ID_MAX),
            state=clusterjson.text(data.get("state"), f"{where}.state", max_len=32),
            devices=_devices(data.get("devices"), f"{where}.devices"),
            boot_id=_optional_text(data, "bootID", where, ID_MAX),
            message=_optional_text(data, "message", where, MESSAGE_MAX),
        )
    except ClusterValueError as e:
        return Unreadable("", str(e))


def cut(message: str) -> str:
    """A message the agent writes, cut so that it reads back (``MESSAGE_MAX``)."""
    if len(message) <= WRITTEN_MESSAGE_MAX:
        return message
    return message[: WRITTEN_MESSAGE_MAX - 3] + "..."


def unreadable_message(what: Unreadable, nothing: str) -> str:
    """The message of the ``failed`` answer to an unreadable request or status."""
    return cut(f"{UNREADABLE}: {what.why}; {nothing}")


__all__ = [
    "ID_MAX",
    "UNREADABLE",
    "Request",
    "Status",
    "Unreadable",
    "cut",
    "raw_value",
    "read_request",
    "read_status",
    "recover_id",
    "unreadable_message",
]
