"""``run_cycle`` as it is, recording what each call decided: the tests that hold
the controller, the simulator and the rule tests to the same decisions patch it in
where each of them calls ``run_cycle``."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.decision import Decision
from autoscaler.engine.cycle import CycleResult, run_cycle
from autoscaler.promql.store import SeriesStore

Act = tuple[float, str, str, tuple[tuple[str, str], ...]]


class RecordingCycle:
    """Each call's time and decisions, and the source of the first call (the
    simulator's store, for a replay on it)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, list[Decision]]] = []
        self.source: Any = None

    async def __call__(self, *args: Any, **kwargs: Any) -> CycleResult:
        if self.source is None:
            self.source = args[1]
        result = await run_cycle(*args, **kwargs)
        self.calls.append((result.now, result.decisions))
        return result

    def first_decision(self) -> tuple[float, tuple[str, tuple[tuple[str, str], ...]]]:
        for now, decisions in self.calls:
            if decisions:
                d = decisions[0]
                return now, (d.rule, tuple(sorted(d.target.items())))
        raise AssertionError(f"no decision in {len(self.calls)} cycles")

    def acts(self) -> list[Act]:
        """Every act (not recover) as (time, rule, action, target)."""
        return [
            (now, d.rule, d.action, tuple(sorted(d.target.items())))
            for now, decisions in self.calls
            for d in decisions
            if d.kind == "act"
        ]


def keeping_the_past(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores made from now on keep every metric for the whole retention. A replay
    reads a finished run's past from its store, which a store keeping of each
    metric only what the rules read (``SeriesStore.kept_by_name``) has trimmed:
    the replay's reads would be unknown (``HistoryNotKept``), not the run's."""
    monkeypatch.setattr(SeriesStore, "kept_ms", lambda self, name: self.retention_ms)
