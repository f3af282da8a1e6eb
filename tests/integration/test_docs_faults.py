"""The vendor pages' fault-code tables are the catalogue's (docs/hooks/fault_tables.py):
each page asks for its vendor's table, every code of the catalogue has a row with
its severity, class and source, and a marker for a vendor without a catalogue
stops the build."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from exporter import faults
from tests.support.paths import REPO

HOOK = REPO / "docs" / "hooks" / "fault_tables.py"
PAGES = {v: REPO / "docs" / "vendors" / f"{v}.md" for v in faults.CATALOGUES}


def hook() -> ModuleType:
    """The hook, loaded from its path the way mkdocs loads it."""
    spec = importlib.util.spec_from_file_location("fault_tables", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_runs_the_hook() -> None:
    assert "docs/hooks/fault_tables.py" in (REPO / "mkdocs.yml").read_text()


@pytest.mark.parametrize("vendor", sorted(PAGES))
def test_every_vendor_page_has_its_generated_table(vendor: str) -> None:
    text = PAGES[vendor].read_text()
    assert f"<!-- fault-codes: {vendor} -->" in text
    out = hook().on_page_markdown(text)
    assert "<!-- fault-codes" not in out
    for c in faults.CATALOGUES[vendor].values():
        row = next(line for line in out.splitlines() if line.startswith(f"| `{c.code}` |"))
        assert f"`{c.severity}` | `{c.action}` |" in row, row
        assert " ".join(c.source.split()) in row.replace("\\|", "|"), row


def test_a_vendor_the_agent_cannot_reset_says_the_step_is_skipped() -> None:
    h = hook()
    assert "skipped" in h.does("gaudi", "reset")
    assert "skipped" not in h.does("nvidia", "reset")
    assert "no reset is tried" in h.does("nvidia", "reboot")


def test_an_unknown_vendor_stops_the_build() -> None:
    with pytest.raises(ValueError, match="no such catalogue"):
        hook().on_page_markdown("<!-- fault-codes: cuda -->")
