"""The ``scrape`` source: the controller scrapes exporters itself and evaluates with
the built-in evaluator, so it runs with no Prometheus at all.

Each target is named by the Kubernetes node it runs on (``--targets
node-a=http://10.0.0.5:9835/metrics``) and that name becomes the ``node`` label, as
relabeling does for Prometheus. A target that cannot be scraped is marked down and
its series go stale, exactly as in Prometheus; the source as a whole is healthy
while at least one target answers, so one dead node cannot blind the controller
to the rest of the fleet.

A target is outside input, so what one scrape may cost is bounded, with
Prometheus's two per-target limits and with nonzero defaults where Prometheus has
none (``ScrapeLimits``):

- ``body_size`` (Prometheus's ``body_size_limit``; ``--scrape.body-size-limit``,
  64 MiB): the body is read in chunks and the read stops one byte past the limit.
  The limit is on the *uncompressed* body: the source asks for gzip and inflates it
  itself with a bounded output per step (``sources/base.py``'s ``read_body``), so
  a gzip bomb costs no more than a plain body. A target that never stops sending
  fails at the limit (or at ``--scrape.timeout``), never after it has filled memory.
- ``samples`` (Prometheus's ``sample_limit``; ``--scrape.sample-limit``, 500,000):
  a body with more sample lines is refused whole, as Prometheus refuses it
  ("sample_limit exceeded"): nothing of it is stored.

Per line, ``promql/textformat.py`` bounds the line length and the number and length
of labels. A body that is not UTF-8 is refused with the byte's line. Every such
failure is the target's failure: it is marked down (``target_up``) with the reason
(``target_error``, logged once per change), and its series go stale, as for a
target that does not answer.

A target URL may carry a user and password (``http://user:pass@10.0.0.5:9835/metrics``,
sent as basic auth); every message that names a target or quotes a client error
goes through ``accel_common.secrets.redact``, so the password is never logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from accel_common.readfile import NotUTF8, decode_utf8
from accel_common.secrets import redact
from autoscaler.promql.store import SeriesStore
from autoscaler.sources.base import BodyError, bounded_session, read_body
from autoscaler.sources.store import StoreSource

log = logging.getLogger("accel_autoscaler.sources.scrape")

DEFAULT_BODY_SIZE_LIMIT = 64 * 1024 * 1024
DEFAULT_SAMPLE_LIMIT = 500_000
# Characters str.splitlines() ends a line at (SeriesStore.ingest_text splits so):
# counting them bounds the number of lines from above without building the list.
_LINE_ENDS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


@dataclass(frozen=True)
class ScrapeLimits:
    """What one scrape of one target may hold; see the module docstring."""

    body_size: int = DEFAULT_BODY_SIZE_LIMIT
    samples: int = DEFAULT_SAMPLE_LIMIT

    def __post_init__(self) -> None:
        if self.body_size <= 0 or self.samples <= 0:
            raise ValueError("scrape limits must be positive")


class ScrapeError(Exception):
    """A scrape that failed for a reason of the target's making; the message says
    which limit or what is wrong, and how to raise a limit."""


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


def decode_body(body: bytes) -> str:
    """The body as strict UTF-8 (the text format's encoding); ScrapeError naming the
    line and column of the first byte that is not."""
    try:
        return decode_utf8(body)
    except NotUTF8 as e:
        raise ScrapeError(
            f"line {e.line}:{e.column}: byte 0x{e.byte:02x} is not UTF-8 "
            "(the exposition format is UTF-8 text)"
        ) from None


def count_samples(text: str, limit: int) -> int:
    """The sample lines in ``text`` (neither blank nor a comment) where there may be
    more than ``limit``, else a cheap upper bound of them (no larger than ``limit``)."""
    bound = sum(text.count(c) for c in _LINE_ENDS) + 1
    if bound <= limit:
        return bound
    count = 0
    for raw in text.splitlines():
        line = raw.strip()
        if line and line[0] != "#":
            count += 1
    return count


def check_samples(text: str, limit: int) -> None:
    """ScrapeError when ``text`` holds more than ``limit`` samples: the whole scrape
    is refused, as Prometheus's ``sample_limit`` refuses it."""
    count = count_samples(text, limit)
    if count > limit:
        raise ScrapeError(
            f"sample_limit exceeded: {count} samples, the limit is {limit} "
            "(raise --scrape.sample-limit)"
        )


class ScrapeSource(StoreSource):
    """Scrapes every target at each ``refresh``; queries are answered as every
    in-memory source answers them (``StoreSource``), in a thread."""

    name = "scrape"

    def __init__(
        self,
        targets: Mapping[str, str],
        store: SeriesStore | None = None,
        timeout: float = 10.0,
        limits: ScrapeLimits | None = None,
    ) -> None:
        super().__init__(store, threaded=True)
        self.targets = dict(targets)
        self.timeout = timeout
        self.limits = limits or ScrapeLimits()
        self.target_up: dict[str, bool] = dict.fromkeys(self.targets, False)
        # Why each down target is down, as last logged (absent while it is up).
        self.target_error: dict[str, str] = {}
        self._session: aiohttp.ClientSession | None = None
        self.up = False

    async def _fetch(self, url: str) -> str:
        assert self._session is not None
        async with self._session.get(url) as resp:
            if resp.status != 200:
                raise aiohttp.ClientResponseError(
                    resp.request_info, (), status=resp.status, message=resp.reason or ""
                )
            body = await read_body(resp, self.limits.body_size, "--scrape.body-size-limit")
        text = decode_body(body)
        del body
        check_samples(text, self.limits.samples)
        return text

    async def _scrape(self, node: str, url: str, at: float) -> None:
        try:
            text = await self._fetch(url)
            self.store.ingest_text(text, at, {"node": node}, target=node)
        except (aiohttp.ClientError, TimeoutError, ValueError, ScrapeError, BodyError) as e:
            reason = redact(f"{type(e).__name__}: {e}")
            if self.target_error.get(node) != reason:
                log.warning("scrape of %s (%s) failed: %s", node, redact(url), reason)
        except Exception as e:
            # A bug met by one target's body: that target fails, loudly; the others
            # and the controller go on.
            reason = redact(f"{type(e).__name__}: {e}")
            if self.target_error.get(node) != reason:
                log.exception("scrape of %s (%s) failed: %s", node, redact(url), reason)
        else:
            if not self.target_up[node]:
                log.info("scrape of %s (%s) is up", node, redact(url))
            self.target_error.pop(node, None)
            self.target_up[node] = True
            return
        self.target_error[node] = reason
        self.target_up[node] = False
        # As in Prometheus: a failed target's series go stale at once.
        self.store.end_target(node, at)

    async def refresh(self, at: float) -> bool:
        if self._session is None:
            self._session = bounded_session(self.timeout, {"Accept": "text/plain;version=0.0.4"})
        await asyncio.gather(*(self._scrape(n, u, at) for n, u in self.targets.items()))
        self.up = any(self.target_up.values())
        return self.up

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
