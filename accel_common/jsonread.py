"""The one reader of JSON request bodies: bounded in size and in nesting depth.

The controller's Alertmanager webhook and the scheduler extender parse JSON that
anyone who reaches their port can send. Python's ``json`` module recurses once
per nesting level: 100,000 ``[`` raise ``RecursionError``, which escaped the
handlers as a 500 and a logged traceback. Legitimate bodies are shallow (an
Alertmanager payload nests 4 deep, an ExtenderArgs with full Node objects about
10), so a body is refused, with a message that says which limit, when it is
larger than its size limit, nested deeper than ``MAX_DEPTH``, not UTF-8, not
JSON (``NaN`` and ``Infinity`` included, which Python alone would accept, and
``1e999``, which it reads as infinite), or
holds an integer past 64 bits. The depth is measured on the parsed value,
without recursion; a body so deep that the parser itself gives up is refused
the same way.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64
"""Arrays and objects open at once; far above any body these servers accept."""


MAX_INT_DIGITS = 20
"""Digits in an integer: 64 bits, signed or not."""


class JSONBodyError(ValueError):
    """A body that is not bounded, well-formed JSON. The message says why, with no
    prefix: each server words its own ("malformed JSON: ...")."""


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (a scalar is 0), by an
    explicit stack: the value may be as deep as the parser allowed."""
    deepest = 0
    containers = (dict, list)
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, containers) else []
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, level + 1) for c in children if isinstance(c, containers))
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _float(text: str) -> float:
    # 1e999 parses as an infinite float, as non-finite as the Infinity refused above.
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is not a finite number")
    return value


def _integer(text: str) -> int:
    # int() of thousands of digits is slow (and past 4,300 refused with advice
    # meant for programmers); no field of these bodies needs more than 64 bits.
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} characters is out of range (64-bit)")
    return int(text)


def decoder() -> json.JSONDecoder:
    """A decoder with the refusals ``loads`` makes (``NaN``, ``Infinity``, ``1e999``,
    integers past 64 bits), for a reader that decodes a large body a value at a
    time with ``raw_decode`` (the Alertmanager webhook, between turns of the event
    loop). That reader bounds the size and the depth itself."""
    return json.JSONDecoder(parse_constant=_no_constant, parse_int=_integer, parse_float=_float)


def loads(raw: bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """The value of a JSON body, or ``JSONBodyError`` saying what is wrong with it."""
    if len(raw) > max_bytes:
        raise JSONBodyError(f"larger than {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JSONBodyError(f"not UTF-8: {e}") from None
    try:
        value = json.loads(
            text, parse_constant=_no_constant, parse_int=_integer, parse_float=_float
        )
    except RecursionError:
        raise JSONBodyError(f"nested deeper than {max_depth} arrays and objects") from None
    except ValueError as e:  # JSONDecodeError, and the refusals above
        raise JSONBodyError(str(e)) from None
    found = depth(value)
    if found > max_depth:
        raise JSONBodyError(
            f"nested {found} deep; at most {max_depth} arrays and objects may be open at once"
        )
    return value


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "JSONBodyError", "decoder", "depth", "loads"]
