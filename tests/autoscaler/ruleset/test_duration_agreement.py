"""One duration grammar: every file format and every parameter that takes a
duration (rule files, rule unit tests, scenarios, action parameters, sim scripts)
accepts and refuses the same texts, with the same meaning, because they all call
accel_common.durations through accel_common.yamlread."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from accel_common.durations import parse_duration, parse_duration_ms
from autoscaler.actions.base import ParamReader
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.testfile import parse_test_file
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from exporter.backends.sim import SimScriptError, load_script

# Prometheus's model.ParseDuration accepts these (y = 365d, w = 7d) ...
ACCEPTED = {
    "0": 0.0,
    "0s": 0.0,
    "500ms": 0.5,
    "15s": 15.0,
    "90s": 90.0,
    "1m30s": 90.0,
    "1h": 3600.0,
    "1d": 86400.0,
    "1w": 7 * 86400.0,
    "1y": 365 * 86400.0,
    "1y2w3d4h5m6s7ms": 365 * 86400 + 14 * 86400 + 3 * 86400 + 4 * 3600 + 5 * 60 + 6.007,
}
# ... and refuses these: fractions, bare numbers, spaces, signs, units out of order
# or twice, unknown units, nothing at all.
REFUSED = ["1.5m", ".5s", "5", "5 m", " 5m", "-1m", "+1m", "1m5h", "1h1h", "1mo", "soon", ""]


# A rule file bounds each field (a cooldown: at most 30 days): the grammar is the
# same, and a duration past the bound is refused as out of range, not as a typo.
COOLDOWN_MAX = 30 * 86400.0


def rule_file(tmp_path: Path, text: str) -> float:
    path = tmp_path / "rules.yaml"
    path.write_text(
        "apiVersion: accel-fleet/v1\nkind: RuleSet\nspec:\n  rules:\n"
        "    - {name: x, expr: accel_up == 0, target: device, action: {type: cordon},\n"
        f"       cooldown: '{text}'}}\n"
    )
    try:
        return load_ruleset([path]).rules[0].cooldown
    except RuleSetError as e:
        raise ValueError(str(e)) from e


def rule_test(tmp_path: Path, text: str) -> float:
    path = tmp_path / "t.yaml"
    path.write_text(
        "ruleFiles: [rules.yaml]\ntests:\n"
        f"  - {{name: x, expect: [{{at: '{text}', decisions: []}}]}}\n"
    )
    parsed = parse_test_file(path)
    if isinstance(parsed, list):
        raise ValueError("\n".join(parsed))
    return parsed.tests[0].expect[0].at_ms / 1000


def scenario(tmp_path: Path, text: str) -> float:
    path = tmp_path / "s.yaml"
    path.write_text(
        "apiVersion: accel-fleet/v1\nkind: Scenario\nspec:\n  duration: 1h\n  pools:\n"
        f"    - {{name: h100, vendor: nvidia, initial: 1, max: 1, provisionTime: '{text}'}}\n"
        "  workload:\n    arrivalsPerHour: 1\n    sizes: {1: 1}\n"
        "    duration: {distribution: fixed, value: 1h}\n"
    )
    try:
        return load_scenario(path, ("first-fit",)).pools[0].provision_time
    except ScenarioError as e:
        raise ValueError(str(e)) from e


def action_param(tmp_path: Path, text: str) -> float:
    reader = ParamReader("drain", {"drainTimeout": text}, ("drainTimeout",))
    seconds = reader.duration("drainTimeout", -1.0)
    if reader.problems:
        raise ValueError(str(reader.problems[0]))
    return seconds


def sim_script(tmp_path: Path, text: str) -> float:
    path = tmp_path / "sim.yaml"
    path.write_text(f"- {{at: '{text}', device: nvidia0}}\n")
    try:
        return load_script(path, {"nvidia0"})[0].at
    except SimScriptError as e:
        raise ValueError(str(e)) from e


SURFACES: dict[str, Callable[[Path, str], float]] = {
    "rule file": rule_file,
    "rule test": rule_test,
    "scenario": scenario,
    "action parameter": action_param,
    "sim script": sim_script,
}


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(("text", "seconds"), ACCEPTED.items())
def test_every_surface_accepts_the_same_durations(
    tmp_path: Path, surface: str, text: str, seconds: float
) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    if surface == "rule file" and seconds > COOLDOWN_MAX:
        with pytest.raises(ValueError, match=r"cooldown must be at most 4w2d, got"):
            SURFACES[surface](tmp_path, text)
        return
    assert SURFACES[surface](tmp_path, text) == pytest.approx(seconds)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("text", REFUSED)
def test_every_surface_refuses_the_same_durations(tmp_path: Path, surface: str, text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration_ms(text)
    with pytest.raises(ValueError, match=r"invalid duration|must not be negative"):
        SURFACES[surface](tmp_path, text)
