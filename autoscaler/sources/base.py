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
        """An instant query. Never raises for a failed query: returns Unknown. An
        empty Vector is a real answer ("no target"), asked only of a healthy source."""
        ...

    async def close(self) -> None: ...


def has_data(result: QueryResult) -> bool:
    """Whether a health query found data. A source whose health query comes back
    empty or failed is down: with PromQL a missing metric and a false condition look
    the same, so rule results are only trusted (an empty one as "no target") while
    the source shows it has data at all."""
    if isinstance(result, Unknown):
        return False
    return not (isinstance(result, Vector) and not result.samples)
