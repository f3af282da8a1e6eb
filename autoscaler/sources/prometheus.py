"""The ``prometheus`` source: instant queries through Prometheus's HTTP API.

Retries are for the transport only (connection refused, timeouts, 429 and 5xx),
bounded so that one cycle cannot stall the loop; a query Prometheus rejects
(``status: error``) is not retried. Every failure ends as ``Unknown`` for that rule
in that cycle.

``refresh`` asks a health query (``count(accel_up)`` by default) before the rules
run: a Prometheus that answers but has no accelerator data (its scrape is broken,
the exporters are gone) is as unknown as one that is down, and the controller must
not read its silence as "all healthy".

``--prometheus.url`` may carry a user and password; every message this source
writes (log lines, the reasons of ``Unknown`` that reach the decision log and the
API) goes through ``accel_common.secrets.redact``, so the password never leaves it.
"""

from __future__ import annotations

import base64
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from accel_common.secrets import read_basic_auth, read_token, redact
from autoscaler.sources.base import has_data
from autoscaler.types import QueryResult, Sample, Scalar, Unknown, Vector, labels_of

log = logging.getLogger("accel_autoscaler.sources.prometheus")


class TransientError(Exception):
    """A failure worth one more try: connection, timeout, 429, 5xx."""


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    timeout: float = 10.0
    bearer_token_file: Path | None = None
    basic_auth_file: Path | None = None  # one line: user:password
    ca_file: Path | None = None
    health_query: str = "count(accel_up)"
    attempts: int = 3


def parse_result(data: dict[str, Any]) -> QueryResult:
    """Converts the ``data`` object of /api/v1/query into our result types."""
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "vector" and isinstance(result, list):
        samples = tuple(
            Sample(labels_of(item["metric"]), float(item["value"][1]), float(item["value"][0]))
            for item in result
        )
        return Vector(samples)
    if kind == "scalar" and isinstance(result, list):
        return Scalar(float(result[1]), float(result[0]))
    return Unknown(f"unsupported result type {kind!r} (a rule must yield a vector)")


class PrometheusSource:
    name = "prometheus"

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None
        self.up = False
        self.last_error = ""

    def _headers(self) -> dict[str, str]:
        # Secrets are read on every session start, so a rotated token file is picked
        # up without a restart. One emptied since the start raises SecretError (a
        # ValueError): the query is unknown rather than sent without credentials.
        if self.config.bearer_token_file is not None:
            token = read_token(self.config.bearer_token_file).decode()
            return {"Authorization": f"Bearer {token}"}
        if self.config.basic_auth_file is not None:
            user, password = read_basic_auth(self.config.basic_auth_file)
            return {"Authorization": "Basic " + base64.b64encode(user + b":" + password).decode()}
        return {}

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl_ctx: ssl.SSLContext | bool = True
            if self.config.ca_file is not None:
                ssl_ctx = ssl.create_default_context(cafile=str(self.config.ca_file))
            self._session = aiohttp.ClientSession(
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=self.config.timeout),
                connector=aiohttp.TCPConnector(ssl=ssl_ctx),
            )
        return self._session

    async def _get(self, expr: str, at: float) -> dict[str, Any]:
        # Inside _query's try: a secret file emptied since the start is "query failed".
        session = self._session_now()
        url = self.config.url.rstrip("/") + "/api/v1/query"
        try:
            async with session.get(url, params={"query": expr, "time": f"{at:.3f}"}) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise TransientError(f"HTTP {resp.status} from {redact(url)}")
                body: dict[str, Any] = await resp.json(content_type=None)
        except (aiohttp.ClientConnectionError, TimeoutError) as e:
            raise TransientError(redact(f"{type(e).__name__}: {e}")) from e
        except (aiohttp.ContentTypeError, ValueError) as e:
            raise ValueError(redact(f"not a Prometheus API answer: {e}")) from e
        if body.get("status") != "success":
            raise ValueError(f"{body.get('errorType', 'error')}: {body.get('error', body)}")
        data: dict[str, Any] = body["data"]
        return data

    async def _query(self, expr: str, at: float) -> QueryResult:
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.config.attempts),
                wait=wait_exponential(multiplier=0.2, max=2.0),
                retry=retry_if_exception_type(TransientError),
                reraise=True,
            ):
                with attempt:
                    data = await self._get(expr, at)
        except TransientError as e:
            self.up = False
            self.last_error = str(e)
            return Unknown(f"prometheus unreachable: {e}")
        except (ValueError, KeyError, aiohttp.ClientError) as e:
            return Unknown(redact(f"query failed: {e}"))
        return parse_result(data)

    async def refresh(self, at: float) -> bool:
        result = await self._query(self.config.health_query, at)
        healthy = has_data(result)
        if not healthy:
            reason = result.reason if isinstance(result, Unknown) else "empty result"
            if reason != self.last_error:
                log.warning(
                    "source prometheus is down: health query %r: %s",
                    self.config.health_query,
                    reason,
                )
            self.last_error = reason
        elif not self.up:
            log.info("source prometheus is up")
            self.last_error = ""
        self.up = healthy
        return healthy

    async def query(self, expr: str, at: float) -> QueryResult:
        return await self._query(expr, at)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
