"""The one reader of JSON that someone else wrote on the cluster.

Annotations, labels, ConfigMap data and custom resources' fields are input from
whoever may patch that object: a tenant owns its JobSet's annotations, any identity
that may patch a Node owns that Node's. A value in them is read here, never with
``json.loads`` directly, because Python's reader recurses once per nesting level
(a few thousand ``[`` end in ``RecursionError``, which no ``except ValueError``
catches, and that ended the controller's cycles), accepts ``NaN`` and ``Infinity``,
and reads ``1e999`` as an infinite float that a cooldown then never leaves.

So a value is refused, with a ``ClusterValueError`` that names the object, the key
and what is wrong, when it is longer than the budget (an object's annotations are
256 KiB in all, ``MAX_BYTES``), nested deeper than ``MAX_DEPTH`` (our records nest
four deep), holds a non-finite number or an integer past 64 bits (``jsonread``),
or is not the JSON type the caller expects. The caller treats the value as unknown
for that one fact and goes on: one bad object never ends a cycle or the process.

``numbers`` does the same for what is read out of a parsed record: a time, a count
or a duration is a finite number inside the range the caller states, or refused.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from accel_common import jsonread

# Kubernetes caps the total size of one object's annotations at 256 KiB.
MAX_BYTES = 256 * 1024
# Far above any record this project writes (an entry with its target: 4 deep).
MAX_DEPTH = 16


class ClusterValueError(ValueError):
    """A value read from the cluster that is not what it must be. ``where`` names
    the object and key (``node n1 annotation accel-fleet.io/remediation``), ``why``
    what is wrong with it; ``str()`` says both."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


def loads(text: Any, where: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of ``text`` (a str, as the API gives annotations and
    ConfigMap data), bounded as the module docstring says."""
    if not isinstance(text, str):
        raise ClusterValueError(where, f"expected a string, got {type(text).__name__}")
    raw = text.encode("utf-8", "surrogatepass")
    try:
        return jsonread.loads(raw, max_bytes=max_bytes, max_depth=max_depth)
    except jsonread.JSONBodyError as e:
        raise ClusterValueError(where, f"not bounded JSON: {e}") from None


def loads_object(
    text: Any, where: str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> dict[str, Any]:
    """``loads`` for a value that must be a JSON object."""
    value = loads(text, where, max_bytes=max_bytes, max_depth=max_depth)
    if not isinstance(value, dict):
        raise ClusterValueError(where, f"expected a JSON object, got {_kind(value)}")
    return value


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's annotations, or none when ``metadata`` or ``annotations`` is not a
    mapping (a fake or a broken object must not raise here)."""
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def describe(obj: Mapping[str, Any]) -> str:
    """``kind namespace/name`` of an object, for messages."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name", "?"))[:253]
    ns = meta.get("namespace")
    kind = str(obj.get("kind") or "object").lower()
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


def annotation_object(
    obj: Mapping[str, Any],
    key: str,
    *,
    log: logging.Logger | None = None,
    max_bytes: int = MAX_BYTES,
) -> dict[str, Any] | None:
    """The JSON object in annotation ``key`` of ``obj``: None when absent, empty or
    refused (then a warning on ``log`` names the object, the key and why)."""
    raw = annotations_of(obj).get(key)
    if raw is None or raw == "":
        return None
    try:
        return loads_object(raw, f"{describe(obj)} annotation {key}", max_bytes=max_bytes)
    except ClusterValueError as e:
        if log is not None:
            log.warning("%s; treated as unknown", e)
        return None


def number(value: Any, where: str, *, lo: float = -math.inf, hi: float = math.inf) -> float:
    """``value`` as a finite float in ``lo``..``hi`` (a bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ClusterValueError(where, f"expected a number, got {_kind(value)}")
    out = float(value)
    if not math.isfinite(out):
        raise ClusterValueError(where, f"{out!r} is not a finite number")
    if not lo <= out <= hi:
        raise ClusterValueError(where, f"{out:g} is outside {lo:g}..{hi:g}")
    return out


def whole(value: Any, where: str, *, lo: int = 0, hi: int = 2**31 - 1) -> int:
    """``value`` as an int in ``lo``..``hi`` (a bool or a float is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClusterValueError(where, f"expected a whole number, got {_kind(value)}")
    if not lo <= value <= hi:
        raise ClusterValueError(where, f"{value} is outside {lo}..{hi}")
    return value


def text(value: Any, where: str, *, max_len: int = 1024) -> str:
    """``value`` as a string of at most ``max_len`` characters."""
    if not isinstance(value, str):
        raise ClusterValueError(where, f"expected a string, got {_kind(value)}")
    if len(value) > max_len:
        raise ClusterValueError(where, f"a string of {len(value)} characters (at most {max_len})")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "ClusterValueError",
    "annotation_object",
    "annotations_of",
    "describe",
    "loads",
    "loads_object",
    "number",
    "text",
    "whole",
]
