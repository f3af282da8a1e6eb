"""Where the test tree's data lives, named once: the repository root, the sysfs and
rule fixture trees, and the golden exposition files."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
GOLDEN_DIR = TESTS / "golden"
