"""Log lines a machine can read: a mapping argument (a decision's target, an
alert's labels) becomes keys of a logfmt line and a nested object of a JSON line,
in the formatters, with the call sites as they are."""

from __future__ import annotations

import json
import logging
import shlex
from typing import Any

import pytest

from accel_common.logs import JsonFormatter, LogfmtFormatter, split_mappings

TARGET = {"node": "n1", "device": "nvidia3"}
# The controller's decision line, as autoscaler/controller.py writes it.
DECISION = "decision %s: rule=%s action=%s target=%s value=%g%s%s"
DECISION_ARGS = ("act", "fatal-device-fault", "migrate_jobs", TARGET, 1.0, " dry-run", "")


def record(msg: str, *args: Any, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            import sys

            exc_info = sys.exc_info()
    return logging.LogRecord("accel_autoscaler", logging.INFO, __file__, 1, msg, args, exc_info)


def logfmt(rec: logging.LogRecord) -> dict[str, str]:
    """A logfmt line as key -> value (shlex reads its quoting)."""
    return dict(pair.split("=", 1) for pair in shlex.split(LogfmtFormatter().format(rec)))


def test_logfmt_flattens_a_named_mapping_into_keys() -> None:
    fields = logfmt(record(DECISION, *DECISION_ARGS))
    assert (
        fields["msg"] == "decision act: rule=fatal-device-fault action=migrate_jobs value=1 dry-run"
    )
    assert (fields["target_node"], fields["target_device"]) == ("n1", "nvidia3")
    assert "target" not in fields and "{" not in LogfmtFormatter().format(
        record(DECISION, *DECISION_ARGS)
    )


def test_json_nests_a_named_mapping() -> None:
    line = json.loads(JsonFormatter().format(record(DECISION, *DECISION_ARGS)))
    assert line["target"] == TARGET
    assert (
        line["msg"] == "decision act: rule=fatal-device-fault action=migrate_jobs value=1 dry-run"
    )
    assert (line["level"], line["logger"]) == ("info", "accel_autoscaler")


def test_an_unnamed_mapping_gives_its_keys_and_spares_the_lines_own() -> None:
    labels = {"alertname": "GPUFault", "node": "n2", "msg": "mine", "nested": {"a": 1}}
    rec = record("alert firing: %s %s", "GPUFault", labels)
    fields = logfmt(rec)
    assert fields["msg"] == "alert firing: GPUFault"
    assert (fields["alertname"], fields["node"], fields["msg_"]) == ("GPUFault", "n2", "mine")
    assert fields["nested_a"] == "1"
    line = json.loads(JsonFormatter().format(rec))
    assert (line["alertname"], line["msg_"], line["nested"]) == ("GPUFault", "mine", {"a": 1})


@pytest.mark.parametrize(
    ("msg", "args"),
    [
        ("plain %s and %d%%", ("text", 5)),
        ("width %*d %s", (3, 7, {"a": 1})),  # a '*' width: left to logging
    ],
)
def test_what_it_does_not_split_is_formatted_as_logging_does(
    msg: str, args: tuple[Any, ...]
) -> None:
    rec = record(msg, *args)
    assert split_mappings(rec) == (rec.getMessage(), [])
    assert logfmt(rec)["msg"] == rec.getMessage()
    assert json.loads(JsonFormatter().format(rec))["msg"] == rec.getMessage()


def test_a_wrong_argument_count_fails_as_logging_fails() -> None:
    rec = record("too few %s %s", "a", {"b": 1}, "c")
    with pytest.raises(TypeError):
        rec.getMessage()
    with pytest.raises(TypeError):
        split_mappings(rec)


def test_percent_signs_and_values_with_spaces_survive() -> None:
    rec = record("at 100%% on %s: target=%s", "n1", {"why": "too hot", "t": 'a "b"'})
    fields = logfmt(rec)
    assert fields["msg"] == "at 100% on n1:"
    assert (fields["target_why"], fields["target_t"]) == ("too hot", 'a "b"')


def test_an_exception_is_still_err() -> None:
    rec = record("failed target=%s", TARGET, exc=True)
    fields = logfmt(rec)
    assert fields["target_node"] == "n1" and "RuntimeError: boom" in fields["err"]
    assert "RuntimeError: boom" in json.loads(JsonFormatter().format(rec))["err"]
