"""The node agent's page shows the vendor table from its declaration
(``docs/hooks/agent_support.py`` over ``accel_common.agentsupport``): mkdocs runs the
hook, the page asks for the table, every vendor the exporter and the simulator know
has a row saying what the agent does, and the declaration covers them all."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from accel_common.agentsupport import SUPPORT
from autoscaler.simulate.scenario import VENDORS
from exporter import faults
from tests.support.paths import REPO

HOOK = REPO / "docs" / "hooks" / "agent_support.py"
PAGE = REPO / "docs" / "agent.md"


def hook() -> ModuleType:
    """The hook, loaded from its path the way mkdocs loads it."""
    spec = importlib.util.spec_from_file_location("agent_support", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_runs_the_hook() -> None:
    assert "docs/hooks/agent_support.py" in (REPO / "mkdocs.yml").read_text()


def test_the_declaration_covers_every_vendor_of_the_exporter_and_the_simulator() -> None:
    assert set(SUPPORT) == set(VENDORS) == set(faults.CATALOGUES)


def test_the_agent_page_has_one_row_per_vendor_from_the_declaration() -> None:
    text = PAGE.read_text()
    assert "<!-- agent-support -->" in text
    out = hook().on_page_markdown(text)
    assert "<!-- agent-support" not in out
    for vendor, s in SUPPORT.items():
        rows = [line for line in out.splitlines() if line.startswith(f"| `{vendor}` (")]
        assert len(rows) == 1, vendor
        cells = [c.strip() for c in rows[0].strip("|").split(" | ")]
        if s.reset is None:
            assert cells[1] == "no" and " ".join(s.no_reset.split()) in cells[5]
        else:
            assert cells[1] == f"yes: `{s.reset.how}`" and cells[3] == s.reset.after
        for p in s.partitions:
            assert f"`{p.kind}`: {p.how}" in cells[4]
        if not s.partitions:
            assert cells[4] == "none" and s.no_partitions in cells[5]
