"""The example rule that reshapes idle whole GPUs into small slices
(rules/examples/small-slices.yaml) loads, passes ``check`` and its own unit tests,
and asks for a layout the shipped layouts file knows."""

from __future__ import annotations

import pytest

from autoscaler.cli import main
from autoscaler.ruleset.loader import load_ruleset
from nodeagent import layouts
from tests.support.paths import REPO

EXAMPLE = REPO / "rules" / "examples" / "small-slices.yaml"


def test_the_example_rule_checks_and_its_tests_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(EXAMPLE)]) == 0
    assert main(["test", str(REPO / "rules" / "examples" / "tests")]) == 0
    assert "2 tests passed" in capsys.readouterr().out


def test_the_example_asks_for_a_layout_the_agent_ships() -> None:
    (rule,) = load_ruleset([EXAMPLE]).rules
    assert rule.action.type == "repartition"
    layout = layouts.load()[rule.action.params["layout"]]
    assert layout.mig == ("1g.10gb",) * 7
