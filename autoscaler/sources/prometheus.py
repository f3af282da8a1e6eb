"""The ``prometheus`` source: instant queries through Prometheus's HTTP API.

Retries are for the transport only (connection refused, timeouts, 429 and 5xx),
bounded so that one cycle cannot stall the loop; a query Prometheus rejects
(``status: error``) is not retried. Every failure ends as ``Unknown`` for that rule
in that cycle.

``refresh`` asks a health query (``count(accel_up)`` by default) before the rules
run: a Prometheus that answers but has no accelerator data (its scrape is broken,
the exporters are gone) is as unknown as one that is down, and the controller must
not read its silence as "all healthy".

An answer is outside input too, and one malformed answer must cost only its own
rule: the body is read up to ``--prometheus.body-size-limit`` (64 MiB, uncompressed,
``sources/base.py``'s ``read_body``), its JSON is read by the one bounded JSON
reader (``accel_common.jsonread``: nesting depth, integer size), and
``parse_result`` checks the shape of what it reads
(a list of ``{"metric": {str: str}, "value": [time, "number"]}``, at most
``textformat.MAX_LABELS`` labels each), so bad JSON, a wrong shape, a value that
is not a number or a label that is not a string is ``Unknown`` for that query with
the reason, and nothing escapes to the cycle. A large answer is decoded in a
thread, so the event loop (``/healthz``) keeps answering meanwhile.

``--prometheus.url`` may carry a user and password; every message this source
writes (log lines, the reasons of ``Unknown`` that reach the decision log and the
API) goes through ``accel_common.secrets.redact``, so the password never leaves it.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import math
import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from accel_common import jsonread
from accel_common.secrets import read_basic_auth, read_token, redact
from autoscaler.promql.textformat import MAX_LABELS, LineError, parse_value
from autoscaler.sources.base import BodyError, bounded_session, has_data, read_body
from autoscaler.types import QueryResult, Sample, Scalar, Unknown, Vector, labels_of

log = logging.getLogger("accel_autoscaler.sources.prometheus")

DEFAULT_BODY_SIZE_LIMIT = 64 * 1024 * 1024
# Answers above this are decoded in a thread, off the event loop.
_THREAD_ABOVE = 1024 * 1024


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
    body_size_limit: int = DEFAULT_BODY_SIZE_LIMIT


class MalformedAnswer(ValueError):
    """An answer that is JSON but not the shape of ``/api/v1/query``'s."""


def _time(v: object, where: str) -> float:
    # bool is an int to Python, and never a time to Prometheus.
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise MalformedAnswer(f"{where}: the time is {type(v).__name__}, not a number")
    t = float(v)
    if not math.isfinite(t):
        raise MalformedAnswer(f"{where}: the time {v!r} is not finite")
    return t


def _value(v: object, where: str) -> float:
    if not isinstance(v, str):
        raise MalformedAnswer(f"{where}: the value is {type(v).__name__}, not a string")
    try:
        return parse_value(v)
    except LineError as e:
        raise MalformedAnswer(f"{where}: {e}") from None


def _pair(v: object, where: str) -> tuple[float, float]:
    if not isinstance(v, list) or len(v) != 2:
        raise MalformedAnswer(f'{where}: expected [time, "value"]')
    return _time(v[0], where), _value(v[1], where)


def _metric(v: object, where: str) -> dict[str, str]:
    if not isinstance(v, dict):
        raise MalformedAnswer(f"{where}: metric is {type(v).__name__}, not an object")
    if len(v) > MAX_LABELS:
        raise MalformedAnswer(f"{where}: {len(v)} labels (at most {MAX_LABELS})")
    for k, label_value in v.items():
        if not isinstance(label_value, str):
            raise MalformedAnswer(
                f"{where}: label {k[:40]!r} is {type(label_value).__name__}, not a string"
            )
    return v


def parse_result(data: object) -> QueryResult:
    """Converts the ``data`` object of /api/v1/query into our result types; an
    answer of the wrong shape is Unknown with what is wrong and where."""
    try:
        if not isinstance(data, dict):
            raise MalformedAnswer(f"data is {type(data).__name__}, not an object")
        kind = data.get("resultType")
        result = data.get("result")
        if kind == "vector" and isinstance(result, list):
            samples = []
            for i, item in enumerate(result):
                where = f"result[{i}]"
                if not isinstance(item, dict):
                    raise MalformedAnswer(f"{where} is {type(item).__name__}, not an object")
                t, v = _pair(item.get("value"), where)
                samples.append(Sample(labels_of(_metric(item.get("metric"), where)), v, t))
            return Vector(tuple(samples))
        if kind == "scalar":
            t, v = _pair(result, "result")
            return Scalar(v, t)
    except MalformedAnswer as e:
        return Unknown(f"malformed Prometheus answer: {e}")
    kind_text = repr(kind)[:40]
    return Unknown(f"unsupported result type {kind_text} (a rule must yield a vector)")


def decode_json(body: bytes) -> object:
    """The answer's JSON, through the one bounded JSON reader
    (``accel_common.jsonread``: at most ``MAX_DEPTH`` arrays and objects open at
    once, no 5,000-digit integers); ValueError saying what is wrong."""
    return jsonread.loads(body, max_bytes=len(body))


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
            self._session = bounded_session(
                self.config.timeout, self._headers(), aiohttp.TCPConnector(ssl=ssl_ctx)
            )
        return self._session

    async def _get(self, expr: str, at: float) -> object:
        # Inside _query's try: a secret file emptied since the start is "query failed".
        session = self._session_now()
        url = self.config.url.rstrip("/") + "/api/v1/query"
        try:
            async with session.get(url, params={"query": expr, "time": f"{at:.3f}"}) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise TransientError(f"HTTP {resp.status} from {redact(url)}")
                raw = await read_body(
                    resp, self.config.body_size_limit, "--prometheus.body-size-limit"
                )
        except (aiohttp.ClientConnectionError, TimeoutError) as e:
            raise TransientError(redact(f"{type(e).__name__}: {e}")) from e
        try:
            if len(raw) > _THREAD_ABOVE:
                body = await asyncio.to_thread(decode_json, raw)
            else:
                body = decode_json(raw)
        except ValueError as e:
            raise ValueError(redact(f"not a Prometheus API answer: {e}")) from e
        if not isinstance(body, dict):
            raise ValueError(f"not a Prometheus API answer: a JSON {type(body).__name__}")
        if body.get("status") != "success":
            error = f"{body.get('errorType', 'error')}: {body.get('error', body)}"
            raise ValueError(error[:500])
        return body.get("data")

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
        except (ValueError, BodyError, aiohttp.ClientError) as e:
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
