"""The engine: from query results to decisions, as a pure function of the rule set,
the results, the engine state and the time (``evaluate``), with everything it
remembers between cycles in one serialisable ``EngineState``."""

from autoscaler.decision import Decision
from autoscaler.engine.evaluate import evaluate, format_duration, target_of
from autoscaler.engine.state import (
    Active,
    ClusterInfo,
    EngineState,
    Note,
    reset_breaker,
)

__all__ = [
    "Active",
    "ClusterInfo",
    "Decision",
    "EngineState",
    "Note",
    "evaluate",
    "format_duration",
    "reset_breaker",
    "target_of",
]
