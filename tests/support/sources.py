"""Sources for tests that exercise something other than the rule data: the
controller's alert path, its reloads, its webhook."""

from __future__ import annotations

from autoscaler.types import QueryResult, Unknown


class HealthySource:
    """A source that is up and answers every query with no data, so that no rule
    fires from it: what the test sends another way (alerts, reloads) is tested."""

    name = "prometheus"

    async def refresh(self, at: float) -> bool:
        return True

    async def query(self, expr: str, at: float) -> QueryResult:
        return Unknown("empty result")

    async def close(self) -> None:
        pass
