"""The source contract the controller drives once per evaluation cycle."""

from __future__ import annotations

from typing import Protocol

from autoscaler.types import QueryResult, Unknown, Vector


class Source(Protocol):
    name: str

    async def refresh(self, at: float) -> bool:
        """Called once at the start of a cycle: scrape, or check that the source has
        data at all. Returns whether the source is healthy; when it is not, every
        rule is Unknown this cycle and no query is sent."""
        ...

    async def query(self, expr: str, at: float) -> QueryResult:
        """An instant query. Never raises for a failed query: returns Unknown."""
        ...

    async def close(self) -> None: ...


def known_or_unknown(result: QueryResult) -> QueryResult:
    """An empty vector becomes Unknown: with PromQL a missing metric and a condition
    that is false look the same, and neither may trigger nor undo an action."""
    if isinstance(result, Vector) and not result.samples:
        return Unknown("empty result")
    return result
