"""Log setup: logfmt (node_exporter's default) or JSON, one event per line.

A line is read by machines (Loki, jq, grep) as much as by people, so a mapping
passed as a log argument (a decision's ``target``, an alert's labels) is made
structure here, in the formatters, and no call site has to change:

* ``log.info("decision %s: target=%s", kind, {"node": "n1", "device": "nvidia3"})``
  in logfmt is ``msg="decision act:" target_node=n1 target_device=nvidia3``: the
  ``name=%s`` leaves the message and each key of the mapping becomes a key of the
  line, prefixed with the name (nested mappings join their keys with ``_``). In
  JSON the mapping is nested: ``"target": {"node": "n1", "device": "nvidia3"}``.
* A mapping without a ``name=`` before its placeholder (``"alert firing: %s %s",
  name, labels``) gives its keys as keys of the line; one that would clash with the
  line's own (``ts``, ``level``, ``logger``, ``msg``, ``err``) gets a ``_`` suffix.
* Everything else is formatted as ``logging`` formats it. A format the splitter does
  not understand (``%*d``, a wrong argument count) falls back to that too, so a log
  call never fails because of this.

``Once`` is the one "log this problem once" bookkeeping: a problem that a cluster
object repeats on every cycle is worth one line, not one a cycle.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

LEVELS = ("debug", "info", "warn", "error")

# The keys every line has; a field from a mapping never replaces one of them.
_RESERVED = frozenset({"ts", "level", "logger", "msg", "err"})
# One %-placeholder of a logging format (no mapping keys: those take a dict argument).
_PLACEHOLDER = re.compile(r"%[#0 +-]*(\d+|\*)?(\.(\d+|\*))?[hlL]?([diouxXeEfFgGcrsa%])")
# ``name=`` right before a placeholder, and the space before it if any.
_NAMED = re.compile(r"( ?)(\w[\w.-]*)=$")


def _logfmt_value(v: object) -> str:
    s = str(v)
    if s == "" or any(c in s for c in ' ="\n'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return s


def _ts(record: logging.LogRecord) -> str:
    t = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"


def _level(record: logging.LogRecord) -> str:
    return "warn" if record.levelname == "WARNING" else record.levelname.lower()


def split_mappings(
    record: logging.LogRecord,
) -> tuple[str, list[tuple[str | None, Mapping[Any, Any]]]]:
    """The record's message without its mapping arguments, and those mappings with
    the name each was given (``target=%s``), or None (see the module docstring)."""
    args = record.args
    if isinstance(args, Mapping) and isinstance(record.msg, str) and "%(" not in record.msg:
        # logging keeps a lone mapping argument as ``args`` itself (for ``%(key)s``).
        args = (args,)
    if not isinstance(record.msg, str) or not isinstance(args, tuple):
        return record.getMessage(), []
    if not any(isinstance(a, Mapping) for a in args):
        return record.getMessage(), []
    text, rest = record.msg, []
    out: list[str] = []
    fields: list[tuple[str | None, Mapping[Any, Any]]] = []
    pos = index = 0
    for m in _PLACEHOLDER.finditer(text):
        if m.group(4) == "%":
            continue
        if "*" in m.group(0) or index >= len(args):
            return record.getMessage(), []
        before = text[pos : m.start()]
        arg = args[index]
        index += 1
        if isinstance(arg, Mapping):
            named = _NAMED.search(before)
            if named is not None:
                before = before[: named.start()]
                fields.append((named.group(2), arg))
            else:
                before = before[:-1] if before.endswith(" ") else before
                fields.append((None, arg))
            out.append(before)
        else:
            out.append(before + m.group(0))
            rest.append(arg)
        pos = m.end()
    if index != len(args):
        return record.getMessage(), []
    out.append(text[pos:])
    try:
        message = "".join(out) % tuple(rest)
    except (TypeError, ValueError):
        return record.getMessage(), []
    return message, fields


def _key(key: object) -> str:
    return re.sub(r"[^\w.-]", "_", str(key)) or "_"


def _flat(prefix: str, mapping: Mapping[Any, Any]) -> Iterator[tuple[str, object]]:
    for k, v in mapping.items():
        key = f"{prefix}_{_key(k)}" if prefix else _key(k)
        if isinstance(v, Mapping):
            yield from _flat(key, v)
        else:
            yield key, v


def _free(key: str) -> str:
    return f"{key}_" if key in _RESERVED else key


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message, fields = split_mappings(record)
        line = (
            f"ts={_ts(record)} level={_level(record)} logger={record.name} "
            f"msg={_logfmt_value(message)}"
        )
        for name, mapping in fields:
            for key, value in _flat(name or "", mapping):
                line += f" {_free(key)}={_logfmt_value(value)}"
        if record.exc_info:
            line += " err=" + _logfmt_value(self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message, fields = split_mappings(record)
        out: dict[str, Any] = {
            "ts": _ts(record),
            "level": _level(record),
            "logger": record.name,
            "msg": message,
        }
        for name, mapping in fields:
            if name is not None:
                out[_free(name)] = mapping
            else:
                out.update({_free(_key(k)): v for k, v in mapping.items()})
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class Once:
    """Which problems were logged already, so that one met on every cycle (an
    unreadable annotation, a list the Role forbids) is logged once, not every
    cycle, and again only when its key changes (the key holds what changed: a
    value's hash, say). One per owner: each module or object that reports such
    problems holds its own, so one owner's keys never hide another's.

    Bounded: at ``limit`` keys it forgets them all and starts again, since memory
    that grows with what a hostile cluster writes costs more than a problem logged
    a second time. Safe from several threads (a cluster read may run in one)."""

    def __init__(self, limit: int = 10_000) -> None:
        if limit < 1:
            raise ValueError(f"Once: limit must be at least 1, got {limit}")
        self.limit = limit
        self._seen: set[Hashable] = set()
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        """True the first time ``key`` is met (and remembered); False after."""
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= self.limit:
                self._seen.clear()
            self._seen.add(key)
            return True

    def clear(self) -> None:
        """Forget every key: each problem is logged again when next met."""
        with self._lock:
            self._seen.clear()

    def __len__(self) -> int:
        return len(self._seen)


def add_arguments(group: argparse._ActionsContainer) -> None:
    """``--log.level`` and ``--log.format``, the same in every command."""
    group.add_argument(
        "--log.level",
        dest="log_level",
        choices=LEVELS,
        default="info",
        help="minimum log level (default %(default)s)",
    )
    group.add_argument(
        "--log.format",
        dest="log_format",
        choices=("logfmt", "json"),
        default="logfmt",
        help="log line format (default %(default)s)",
    )


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel({"warn": logging.WARNING}.get(level, getattr(logging, level.upper())))
    # aiohttp's access log would add a line per scrape.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
