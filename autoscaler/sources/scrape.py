"""The ``scrape`` source: the controller scrapes exporters itself and evaluates with
the built-in evaluator, so it runs with no Prometheus at all.

Each target is named by the Kubernetes node it runs on (``--targets
node-a=http://10.0.0.5:9835/metrics``) and that name becomes the ``node`` label, as
relabeling does for Prometheus. A target that cannot be scraped is marked down and
its series go stale, exactly as in Prometheus; the source as a whole is healthy
while at least one target answers, so one dead node cannot blind the controller
to the rest of the fleet.

A target URL may carry a user and password (``http://user:pass@10.0.0.5:9835/metrics``,
sent as basic auth); every message that names a target or quotes a client error
goes through ``accel_common.secrets.redact``, so the password is never logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import aiohttp

from accel_common.secrets import redact
from autoscaler.promql.store import SeriesStore
from autoscaler.sources.store import StoreSource

log = logging.getLogger("accel_autoscaler.sources.scrape")


def parse_targets(text: str) -> dict[str, str]:
    """``node-a=http://h:9835/metrics,node-b=...`` → {node: url}; raises ValueError."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        node, sep, url = part.partition("=")
        if not sep or not node or not url.startswith(("http://", "https://")):
            raise ValueError(f"bad target {redact(part)!r} (use NODE=http://HOST:PORT/metrics)")
        if node in out:
            raise ValueError(f"node {node!r} is named twice")
        out[node] = url
    if not out:
        raise ValueError("no targets given (use NODE=http://HOST:PORT/metrics,...)")
    return out


class ScrapeSource(StoreSource):
    """Scrapes every target at each ``refresh``; queries are answered as every
    in-memory source answers them (``StoreSource``), in a thread."""

    name = "scrape"

    def __init__(
        self,
        targets: Mapping[str, str],
        store: SeriesStore | None = None,
        timeout: float = 10.0,
    ) -> None:
        super().__init__(store, threaded=True)
        self.targets = dict(targets)
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
            reason = redact(f"{type(e).__name__}: {e}")
            if self._errors.get(node) != reason:
                log.warning("scrape of %s (%s) failed: %s", node, redact(url), reason)
            self._errors[node] = reason
            self.target_up[node] = False
            # As in Prometheus: an unreachable target's series go stale at once.
            self.store.end_target(node, at)
            return
        if not self.target_up[node]:
            log.info("scrape of %s (%s) is up", node, redact(url))
        self._errors.pop(node, None)
        self.target_up[node] = True

    async def refresh(self, at: float) -> bool:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                headers={"Accept": "text/plain;version=0.0.4"},
            )
        await asyncio.gather(*(self._scrape(n, u, at) for n, u in self.targets.items()))
        self.up = any(self.target_up.values())
        return self.up

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
