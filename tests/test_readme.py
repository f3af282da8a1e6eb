"""The README stays true: its metric table is the catalogue's, and it documents
every flag that --help shows."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from exporter import schema
from exporter.cli import build_parser
from tests.procs import REPO

README = (REPO / "README.md").read_text()


def test_metric_table_is_the_catalogue() -> None:
    assert schema.markdown_table() in README


def test_every_flag_is_documented() -> None:
    flags = {
        opt
        for action in build_parser()._actions
        for opt in action.option_strings
        if opt.startswith("--") and opt != "--help"
    }
    documented = set(re.findall(r"`(--[a-z.-]+)`", README))
    assert flags - documented == set()


def test_top_shows_the_two_commands() -> None:
    top = README.split("\n## ")[0]
    assert "make demo" in top and "make test" in top


def test_ci_calls_make_test() -> None:
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_every_autoscaler_run_flag_is_documented() -> None:
    from autoscaler.cli import build_parser as autoscaler_parser

    sub = next(a for a in autoscaler_parser()._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    flags = {
        opt
        for action in run._actions
        for opt in action.option_strings
        if opt.startswith("--") and opt != "--help"
    }
    documented = set(re.findall(r"`(--[a-z.-]+)`", README))
    assert flags - documented == set()


def test_the_rule_example_loads(tmp_path: Path) -> None:
    from autoscaler.ruleset.loader import load_ruleset

    section = README.split("### Rules", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(example)
    ruleset = load_ruleset([path], source="scrape")
    assert [r.name for r in ruleset.rules] == ["fatal-device-fault", "gpu-fault-alert"]
