"""The README stays true: its metric table is the catalogue's, and it documents
every flag that --help shows."""

from __future__ import annotations

import re

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
