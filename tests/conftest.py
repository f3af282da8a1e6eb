"""Shared test harness: golden exposition files and promtool.

``pytest --update-golden`` rewrites ``tests/golden/*.prom`` from the current output
(node_exporter's ``-u`` habit); review the diff before committing it.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.pki import Pki, make_pki

GOLDEN_DIR = Path(__file__).parent / "golden"
FIXTURES = Path(__file__).parent / "fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/*.prom from the current output instead of comparing",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """``golden(name, text)`` compares text with tests/golden/NAME (or rewrites it)."""
    update = bool(request.config.getoption("--update-golden"))

    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"{path} is missing: run pytest --update-golden and review it"
        expected = path.read_text()
        assert text == expected, f"output differs from {path}; run pytest --update-golden"

    return check


def promtool_path() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: `make test` installs Debian's prometheus package")
    return path


@pytest.fixture
def promtool_check() -> Callable[[str], None]:
    """``promtool_check(text)`` fails the test on any `promtool check metrics` finding."""

    def check(text: str) -> None:
        proc = subprocess.run(
            [promtool_path(), "check", "metrics"],
            input=text.encode(),
            capture_output=True,
            timeout=30,
        )
        out = (proc.stdout + proc.stderr).decode()
        assert proc.returncode == 0 and not out.strip(), f"promtool check metrics:\n{out}"

    return check


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Server, CA, client and rogue certificates in one directory."""
    return make_pki(tmp_path_factory.mktemp("pki"))
