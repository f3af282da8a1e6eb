"""The ``scrape`` source: the controller scrapes exporters itself and evaluates with
the built-in evaluator, so it runs with no Prometheus at all.

Each target is named by the Kubernetes node it runs on (``--targets
node-a=http://10.0.0.5:9835/metrics``) and that name becomes the ``node`` label, as
relabeling does for Prometheus. A target that cannot be scraped is marked down and
its series go stale, exactly as in Prometheus; the source as a whole is healthy
while at least one target answers, so one dead node cannot blind the controller
to the rest of the fleet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import aiohttp

from autoscaler.promql.evaluator import EvalError, Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.types import Matrix, QueryResult, Unknown

log = logging.getLogger("accel_autoscaler.sources.scrape")


def parse_targets(text: str) -> dict[str, str]:
    """``node-a=http://h:9835/metrics,node-b=...`` → {node: url}; raises ValueError."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        node, sep, url = part.partition("=")
        if not sep or not node or not url.startswith(("http://", "https://")):
            raise ValueError(f"bad target {part!r} (use NODE=http://HOST:PORT/metrics)")
        if node in out:
            raise ValueError(f"node {node!r} is named twice")
        out[node] = url
    if not out:
        raise ValueError("no targets given (use NODE=http://HOST:PORT/metrics,...)")
    return out


class ScrapeSource:
    name = "scrape"

    def __init__(
        self,
        targets: Mapping[str, str],
        store: SeriesStore | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.targets = dict(targets)
        self.store = store or SeriesStore()
        self.evaluator = Evaluator(self.store)
        self.timeout = timeout
        self.target_up: dict[str, bool] = dict.fromkeys(self.targets, False)
        self._errors: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None
        self.up = False

    async def _scrape(self, node: str, url: str, at: float) -> None:
        assert self._session is not None
        try:
            async with self._session.get(url) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(
                        resp.request_info, (), status=resp.status, message=resp.reason or ""
                    )
                text = await resp.text()
            self.store.ingest_text(text, at, {"node": node}, target=node)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            reason = f"{type(e).__name__}: {e}"
            if self._errors.get(node) != reason:
                log.warning("scrape of %s (%s) failed: %s", node, url, reason)
            self._errors[node] = reason
            self.target_up[node] = False
            # As in Prometheus: an unreachable target's series go stale at once.
            self.store.end_target(node, at)
            return
        if not self.target_up[node]:
            log.info("scrape of %s (%s) is up", node, url)
        self._errors.pop(node, None)
        self.target_up[node] = True

    def retain(self, exprs: list[str]) -> None:
        """Keeps exactly the history the rules need (their longest range, offset and
        the 5 m lookback), so memory follows the rules, not the uptime."""
        from autoscaler.promql.support import required_retention

        if exprs:
            self.store.retention = max(required_retention(e) for e in exprs)

    async def refresh(self, at: float) -> bool:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"Accept": "text/plain;version=0.0.4"},
            )
        await asyncio.gather(*(self._scrape(n, u, at) for n, u in self.targets.items()))
        self.up = any(self.target_up.values())
        return self.up

    async def query(self, expr: str, at: float) -> QueryResult:
        try:
            # The evaluator is CPU work; at fleet scale it takes long enough to keep
            # the API from answering, so it runs in a thread.
            start = time.perf_counter()
            result = await asyncio.to_thread(self.evaluator.instant, expr, at)
            log.debug("evaluated %r in %.1f ms", expr, (time.perf_counter() - start) * 1e3)
        except EvalError as e:
            return Unknown(f"evaluation failed: {e}")
        if isinstance(result, Matrix):
            return Unknown("a rule must yield an instant vector, not a range vector")
        return result

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
