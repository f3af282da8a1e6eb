"""Log setup: logfmt (node_exporter's default) or JSON, one event per line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

LEVELS = ("debug", "info", "warn", "error")


def _logfmt_value(v: object) -> str:
    s = str(v)
    if s == "" or any(c in s for c in ' ="\n'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return s


def _ts(record: logging.LogRecord) -> str:
    t = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "warn" if record.levelname == "WARNING" else record.levelname.lower()
        line = (
            f"ts={_ts(record)} level={level} "
            f"logger={record.name} msg={_logfmt_value(record.getMessage())}"
        )
        if record.exc_info:
            line += " err=" + _logfmt_value(self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "warn" if record.levelname == "WARNING" else record.levelname.lower()
        out = {"ts": _ts(record), "level": level, "logger": record.name, "msg": record.getMessage()}
        if record.exc_info:
            out["err"] = self.formatException(record.exc_info)
        return json.dumps(out)


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
