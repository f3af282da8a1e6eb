"""How the controller reloads rules, in process: off the event loop, one load at a
time, any exception a failed reload that is retried on the next change, and an
evaluation interval that can neither stop nor stall the loop.

The loader is replaced here by functions that sleep, count or raise, so that each
property is shown by itself; ``test_hostile_reload.py`` feeds the real hostile
files to a real process.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from autoscaler.controller import MAX_INTERVAL, MIN_INTERVAL, Controller
from autoscaler.ruleset import loader, watch
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.model import RuleSet
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app, render_metrics
from autoscaler.sources.alertmanager import AlertReceiver
from tests.autoscaler.controller.hostile_rules import good
from tests.support.exposition import value
from tests.support.procs import free_port
from tests.support.sources import HealthySource
from tests.support.waits import until

pytestmark = pytest.mark.timeout(60)


def rules_file(tmp: Path, text: str, mtime: float) -> Path:
    """Writes the rule file with an explicit mtime, so a change never depends on
    the file system's timestamp granularity."""
    path = tmp / "rules.yaml"
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


def controller(tmp: Path) -> Controller:
    path = rules_file(tmp, good(), 1_000_000)
    return Controller(
        RuleWatcher([str(path)], source="prometheus"), HealthySource(), AlertReceiver()
    )


def replace_loader(monkeypatch: pytest.MonkeyPatch, load: Callable[..., RuleSet]) -> None:
    monkeypatch.setattr(watch, "load_ruleset", load)


# --- any exception is a failed reload, retried on the next change -----------------------


class Panic(BaseException):
    """What a Rust panic in a native parser surfaces as (pyo3's PanicException)."""


@pytest.mark.parametrize(
    "error",
    [RecursionError("maximum recursion depth exceeded"), MemoryError(), ValueError("x"), Panic()],
    ids=["RecursionError", "MemoryError", "ValueError", "panic"],
)
def test_any_exception_is_a_failed_reload_that_keeps_the_rules_and_is_retried(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    error: BaseException,
) -> None:
    c = controller(tmp_path)
    good_rules = c.ruleset
    real = loader.load_ruleset
    calls: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> RuleSet:
        calls.append(1)
        raise error

    async def go() -> None:
        replace_loader(monkeypatch, failing)
        rules_file(tmp_path, good(description="changed"), 1_000_100)
        with caplog.at_level(logging.ERROR, logger="accel_autoscaler.rules"):
            assert await c.watcher.refresh() is False
        assert c.ruleset is good_rules
        assert c.watcher.reload_success is False
        assert value(render_metrics(c), "accel_autoscaler_rules_reload_success") == 0
        logged = [r for r in caplog.records if r.name == "accel_autoscaler.rules"]
        assert len(logged) == 1, [r.getMessage() for r in logged]
        assert "keeping the 1 rules in force" in logged[0].getMessage()
        assert str(tmp_path / "rules.yaml") in logged[0].getMessage()
        [problem] = c.watcher.last_problems
        assert str(problem).startswith(f"{tmp_path / 'rules.yaml'}: the rules cannot be loaded: ")
        assert str(problem) in logged[0].getMessage()
        # Nothing changed: not loaded again (a bad file costs one load).
        assert await c.watcher.refresh() is False
        assert len(calls) == 1
        # The next change is tried, and loads.
        replace_loader(monkeypatch, real)
        rules_file(tmp_path, good(description="fixed"), 1_000_200)
        assert await c.watcher.refresh() is True
        assert c.watcher.reload_success is True
        assert c.ruleset.rules[0].description == "fixed"

    asyncio.run(go())


def test_an_unexpected_error_at_start_is_a_clean_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = rules_file(tmp_path, good(), 1_000_000)

    def deep(*args: Any, **kwargs: Any) -> RuleSet:
        raise RecursionError("maximum recursion depth exceeded")

    replace_loader(monkeypatch, deep)
    with pytest.raises(RuleSetError, match="nested too deeply"):
        RuleWatcher([str(path)])


# --- off the event loop, one at a time ---------------------------------------------------


def test_healthz_answers_while_a_slow_file_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load holds its thread until the test lets it go: every probe and a whole
    cycle are answered while it is held, which they could not be if the load ran on
    the event loop (they would wait for it), whatever the machine's speed."""
    c = controller(tmp_path)
    real = loader.load_ruleset
    loading, release, loaded = threading.Event(), threading.Event(), threading.Event()

    def slow(*args: Any, **kwargs: Any) -> RuleSet:
        loading.set()
        # Blocking, as a parser is. The bound only ends a broken run, in which the
        # loop waits here and the probes below are answered after ``loaded``.
        release.wait(15.0)
        loaded.set()
        return real(*args, **kwargs)

    async def go() -> None:
        runner = web.AppRunner(make_app(c))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            replace_loader(monkeypatch, slow)
            rules_file(tmp_path, good(description="slow"), 1_000_100)
            c.request_reload()
            watcher = asyncio.create_task(c.watch_rules(period=0.1))
            assert await asyncio.to_thread(loading.wait, 20.0), "the load never started"
            async with aiohttp.ClientSession() as s:
                for _ in range(10):
                    async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                        assert r.status == 200
                    assert not loaded.is_set(), "/healthz waited for the load"
                    assert c.watcher.busy
                    await asyncio.sleep(0.1)  # ten probes spread over the load
            # A cycle meanwhile goes on with the rules in force, without waiting.
            await c.cycle()
            assert not loaded.is_set(), "the cycle waited for the load"
            assert c.ruleset.rules[0].description == ""
            release.set()
            await until(lambda: not c.watcher.busy, what="the slow load finished")
            assert c.ruleset.rules[0].description == "slow"
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        finally:
            release.set()
            await runner.cleanup()

    asyncio.run(go())


def test_never_two_loads_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = controller(tmp_path)
    real = loader.load_ruleset
    lock = threading.Lock()
    running = 0
    most = 0
    loads = 0

    def counting(*args: Any, **kwargs: Any) -> RuleSet:
        nonlocal running, most, loads
        with lock:
            running += 1
            loads += 1
            most = max(most, running)
        time.sleep(1.0)  # long enough that the other callers ask while it runs
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                running -= 1

    async def go() -> None:
        replace_loader(monkeypatch, counting)
        rules_file(tmp_path, good(description="new"), 1_000_100)
        results = await asyncio.gather(*(c.watcher.refresh(force=True) for _ in range(10)))
        assert most == 1
        # The first load, and one more for everything that asked while it ran.
        assert loads == 2
        assert results.count(True) == 10  # each caller learns the rules changed
        assert c.ruleset.rules[0].description == "new"

    asyncio.run(go())


# --- never put to sleep --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "used"),
    [
        (math.inf, 15.0),
        (math.nan, 15.0),
        (-math.inf, 15.0),
        (0.0, MIN_INTERVAL),
        (-5.0, MIN_INTERVAL),
        (1e-9, MIN_INTERVAL),
        (1e12, MAX_INTERVAL),
        (30.0, 30.0),
    ],
)
def test_an_interval_out_of_range_never_reaches_a_sleep(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, interval: float, used: float
) -> None:
    c = controller(tmp_path)
    c.watcher.current = RuleSet(evaluation_interval=interval, rules=c.ruleset.rules)
    with caplog.at_level(logging.WARNING, logger="accel_autoscaler"):
        assert c.interval() == used
        assert c.interval() == used
    warned = [r for r in caplog.records if "evaluationInterval" in r.getMessage()]
    assert len(warned) == (0 if interval == used else 1)


def test_a_reload_wakes_the_loop_out_of_a_long_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = rules_file(tmp_path, good(interval="1h"), 1_000_000)
    c = Controller(RuleWatcher([str(path)], source="prometheus"), HealthySource(), AlertReceiver())
    monkeypatch.setattr("autoscaler.controller.WATCH_PERIOD", 0.1)

    async def go() -> None:
        loop = asyncio.create_task(c.run_forever())
        try:
            await until(lambda: c.stats.cycles >= 1, what="the first cycle")
            await _watched(c, 3)  # the file watch turned three times meanwhile
            assert c.stats.cycles == 1  # asleep for the hour
            c.request_reload()  # SIGHUP, nothing changed: still a cycle now
            await until(lambda: c.stats.cycles >= 2, 3.0, "a cycle after the SIGHUP")
            rules_file(tmp_path, good(interval="1s"), 1_000_100)  # a change, no SIGHUP
            await until(lambda: c.stats.cycles >= 3, 3.0, "a cycle after the change")
            assert c.interval() == 1.0
            await until(lambda: c.stats.cycles >= 4, 3.0, "a cycle a second later")
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(go())


async def _watched(c: Controller, times: int) -> None:
    """Waits until the rule watcher has looked at the files ``times`` more times."""
    for n in range(times):
        before = c.watcher.checked_at
        await until(
            lambda before=before: c.watcher.checked_at > before,  # type: ignore[misc]
            what=f"look {n + 1} of {times} at the rule files",
        )
