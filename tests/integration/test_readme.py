"""The README stays the first screen: short, the two commands on top, the three
programs, the two flow diagrams, a quickstart for the exporter and the controller, and
a link to the one "where code goes" table, on the design page (which
tests/integration/test_docs.py holds to every module there is). Everything else
lives in docs/."""

from __future__ import annotations

import re

from tests.support.paths import REPO

README = (REPO / "README.md").read_text()

# The README is the first screen, not the manual.
MAX_README_BYTES = 16 * 1024

# Sentences that were true once and are not any more.
STALE = (
    "arrive with their own issue",
    "For now it records its decisions",
    "shared/DESIGN.md",
)


def section(title: str) -> str:
    assert f"\n## {title}\n" in README, f"README has no '## {title}' section"
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_is_at_most_16_kb() -> None:
    size = len(README.encode())
    assert size <= MAX_README_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_top_shows_the_two_commands() -> None:
    top = README.split("\n## ")[0]
    assert "make demo" in top and "make test" in top


def test_top_names_the_three_programs_and_placement() -> None:
    top = README.split("\n## ")[0]
    assert "three programs" in top
    for name in ("accel-exporter", "accel-autoscaler", "accel-node-agent", "Placement"):
        assert f"**`{name}`**" in top or f"**{name}**" in top, name
    for link in ("docs/index.md", "docs/agent.md", "docs/actions.md"):
        assert f"]({link})" in top, link


def test_ci_calls_make_test() -> None:
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_two_flow_diagrams() -> None:
    flows = section("How data flows")
    diagrams = re.findall(r"```\n(.*?)```", flows, re.S)
    assert len(diagrams) == 2
    exporter, autoscaler = diagrams
    for step in ("backend", "Reading", "Poller", "/metrics"):
        assert step in exporter
    for step in ("Prometheus", "scrape", "Alertmanager", "Decision", "Action", "API server"):
        assert step in autoscaler


def test_a_quickstart_per_program_of_five_lines() -> None:
    for program in ("accel-exporter", "accel-autoscaler"):
        body = section(f"Quickstart: {program}")
        lines = re.findall(r"```sh\n(.*?)```", body, re.S)[0].strip().splitlines()
        assert len(lines) == 5, f"{program}: {len(lines)} lines"
        assert any(program in line for line in lines)


def test_where_code_goes_links_to_the_one_table() -> None:
    """The table lives on the design page; a copy here would need a test to hold the
    two equal."""
    body = section("Where code goes")
    assert "](docs/design.md#where-code-goes)" in body
    assert "| path | holds |" not in README


def test_no_stale_sentences() -> None:
    for phrase in STALE:
        assert phrase not in README, phrase
