"""Shared test harness: golden exposition files, promtool, and the fake API server
with a client of it (``api``, ``kube``).

``pytest --update-golden`` rewrites ``tests/golden/*.prom`` from the current output
(node_exporter's ``-u`` habit); review the diff before committing it.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from autoscaler.kube.client import ClientKube
from tests.support.fakes.apiserver import FakeApiServer
from tests.support.kubeobjs import client
from tests.support.paths import GOLDEN_DIR
from tests.support.pki import Pki, make_pki
from tests.support.procs import promtool_path


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked ``slow`` run first under ``make test``'s worker processes
    (pytest-xdist, ``--dist loadscope --no-loadscope-reorder``: a module's tests on
    one worker, so a module's shared fixture, its simulated fleet or its
    Prometheus, is built once; modules handed out in this order). Started last, a
    slow module would keep one worker busy after the others ran out of work. A
    stable sort, so the order is the same in every worker, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# The programs' top loggers, which a command's main may set a level on (simulate
# quiets the controller's to warnings).
PROGRAM_LOGGERS = ("accel_autoscaler", "accel_exporter", "accel_node_agent", "")


# Their levels as the test process starts, before any test or fixture ran a command.
_FIRST_LEVELS = {name: logging.getLogger(name).level for name in PROGRAM_LOGGERS}


@pytest.fixture(autouse=True)
def _logger_levels() -> Iterator[None]:
    """Puts the levels of the programs' loggers and the root logger back to what
    they were when the process started, before and after each test: a command run
    in-process (``simulate_command.main``, also from a module's fixture, which runs
    before this one) sets them for the whole process, and a later test on the same
    worker would then miss the records it looks for in ``caplog``."""
    for name, level in _FIRST_LEVELS.items():
        logging.getLogger(name).setLevel(level)
    yield
    for name, level in _FIRST_LEVELS.items():
        logging.getLogger(name).setLevel(level)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "unvalidated_api: the api fixture skips schema checks (thousands of objects "
        "would take minutes to validate)",
    )


@pytest.fixture
async def api(request: pytest.FixtureRequest) -> AsyncIterator[FakeApiServer]:
    """The fake API server, checking every object it stores against the schemas
    unless the test is marked ``unvalidated_api``."""
    validate = request.node.get_closest_marker("unvalidated_api") is None
    async with FakeApiServer(validate=validate) as server:
        yield server


@pytest.fixture
def kube(api: FakeApiServer, tmp_path: Path) -> Iterator[ClientKube]:
    """The real client of ``api``, with millisecond retry backoff."""
    c = client(api, tmp_path)
    yield c
    c.close()
