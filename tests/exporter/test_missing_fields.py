"""``MissingFields``: the one bookkeeping of absent fields, their reasons, and the
warnings about them, that every vendor backend uses (``exporter.backends.base``)."""

from __future__ import annotations

import logging

import pytest

from exporter.backends.base import MissingFields

log = logging.getLogger("accel_exporter.test")


def test_a_read_starts_from_the_static_reasons_and_leaves_them_alone() -> None:
    missing = MissingFields(log)
    static = {"energy_joules": "NotSupported"}
    reasons = missing.begin("gpu0", static)
    reasons["power_watts"] = "first sample"
    assert missing == {"gpu0": {"energy_joules": "NotSupported", "power_watts": "first sample"}}
    assert static == {"energy_joules": "NotSupported"}


def test_a_note_with_static_reasons_holds_for_later_reads() -> None:
    missing = MissingFields(log)
    static: dict[str, str] = {}
    missing.begin("gpu0", static)
    missing.note("gpu0", ("clocks_hz.graphics", "throttle"), "unsupported", static)
    missing.note("gpu0", ("utilization",), "busy")
    assert missing["gpu0"] == {
        "clocks_hz.graphics": "unsupported",
        "throttle": "unsupported",
        "utilization": "busy",
    }
    assert missing.begin("gpu0", static) == {
        "clocks_hz.graphics": "unsupported",
        "throttle": "unsupported",
    }


@pytest.mark.parametrize(
    ("recorded", "found", "expected"),
    [
        ({}, {"utilization"}, {"power_watts": "no source"}),
        (
            {"power_watts": "first sample"},
            set(),
            {"utilization": "no source", "power_watts": "first sample"},
        ),
        ({"utilization": "stale"}, {"utilization", "power_watts"}, {}),
    ],
)
def test_settling_leaves_each_field_found_or_explained(
    recorded: dict[str, str], found: set[str], expected: dict[str, str]
) -> None:
    missing = MissingFields(log)
    missing.begin("gpu0", recorded)
    missing.settle("gpu0", ("utilization", "power_watts"), found, "no source")
    assert missing["gpu0"] == expected


def test_a_warning_is_said_once_per_mark_even_across_rediscovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    missing = MissingFields(log)
    with caplog.at_level(logging.WARNING, log.name):
        for _ in range(3):
            missing.warn_once(("gpu0", "power"), "%s: no %s", "gpu0", "power")
        missing.clear()
        missing.warn_once(("gpu0", "power"), "%s: no %s", "gpu0", "power")
        missing.warn_once(("gpu1", "power"), "%s: no %s", "gpu1", "power")
    assert [r.getMessage() for r in caplog.records] == ["gpu0: no power", "gpu1: no power"]
