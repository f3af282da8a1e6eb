"""The source contract the controller drives once per evaluation cycle, the
optional capabilities a source may have, and the one bounded reader of the HTTP
bodies the sources fetch.

Capabilities are Protocols checked with ``isinstance``, never probed with
``getattr``: a source that keeps its series in memory says so by having
``retain`` (``Retaining``: the history it keeps follows the rules), ``store``
(``StoreBacked``: the controller's cluster-state series are written there, so the
built-in evaluator answers rules on them) and ``query_targets``
(``TargetedSource``: a result cut down to some targets before it is built).
Prometheus has none of them; it keeps its own history and reads the controller's
``/metrics``.

Both HTTP sources read answers from outside (an exporter's exposition, a
Prometheus API answer), so neither lets its client library read a body whole:
``read_body`` reads in chunks and stops one byte past a limit, and inflates gzip
itself with a bounded output per step, so that the limit holds for the
uncompressed body and a gzip bomb costs no more than a plain body of the limit's
size. Its ``BodyError`` names the flag that raises the limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import aiohttp

from autoscaler.promql.evaluator import Columns
from autoscaler.promql.store import SeriesStore
from autoscaler.types import QueryResult, Unknown, Vector

_CHUNK = 64 * 1024


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


@runtime_checkable
class Retaining(Protocol):
    """A source that keeps its own history (``sources/store.py``): told which
    expressions the rules ask, it keeps what their longest window needs."""

    def retain(self, exprs: Sequence[str]) -> None: ...


@runtime_checkable
class TargetedSource(Protocol):
    """A source that can cut a result down to some targets before building it
    (``sources/store.py``); the evaluation cycle cuts others' down after the
    query (a rule's recover condition, asked only about its active targets)."""

    async def query_targets(
        self, expr: str, at: float, names: tuple[str, ...], targets: Iterable[tuple[str, ...]]
    ) -> QueryResult: ...


@runtime_checkable
class ColumnarSource(Protocol):
    """A source that can hand a result back as label code columns, without
    building a ``Sample`` per row (``sources/store.py``): the rhythm learner reads
    one row per job of thousands every cycle. Unknown as ``query`` would be."""

    async def query_columns(
        self, expr: str, at: float, names: tuple[str, ...]
    ) -> Columns | Unknown: ...


@runtime_checkable
class StoreBacked(Protocol):
    """A source that answers from an in-memory ``SeriesStore`` (scrape, the
    simulator, rule tests): series written into ``store`` are queryable."""

    store: SeriesStore


def has_data(result: QueryResult) -> bool:
    """Whether a health query found data. A source whose health query comes back
    empty or failed is down: with PromQL a missing metric and a false condition look
    the same, so rule results are only trusted (an empty one as "no target") while
    the source shows it has data at all."""
    if isinstance(result, Unknown):
        return False
    return not (isinstance(result, Vector) and not result.samples)


class BodyError(ValueError):
    """An HTTP body that was not read: over the limit, or broken compression."""


def _inflater(encoding: str) -> zlib._Decompress | None:
    """A decompressor for the response's Content-Encoding; None for identity."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS)
    raise BodyError(f"unsupported Content-Encoding {encoding[:40]!r} (gzip was asked for)")


async def read_body(resp: aiohttp.ClientResponse, limit: int, flag: str) -> bytes:
    """The response's uncompressed body, at most ``limit`` bytes. ``resp`` must come
    from a session with ``auto_decompress=False`` (``bounded_session``). BodyError
    one byte past the limit (naming ``flag``, which raises it), or when the
    compressed stream is broken or cut short."""
    too_large = BodyError(f"body larger than {limit} bytes (raise {flag})")
    encoding = resp.headers.get("Content-Encoding", "")
    if resp.content_length is not None and resp.content_length > limit and not encoding:
        raise too_large
    inflater = _inflater(encoding)
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in resp.content.iter_chunked(_CHUNK):
            if inflater is None:
                parts.append(chunk)
                size += len(chunk)
                if size > limit:
                    raise too_large
                continue
            data = chunk
            while data and not inflater.eof:
                # max_length bounds what one call may inflate: a bomb stops here.
                out = inflater.decompress(data, limit + 1 - size)
                parts.append(out)
                size += len(out)
                if size > limit:
                    raise too_large
                if not out and inflater.unconsumed_tail == data:
                    break  # no progress: the rest waits for the next chunk
                data = inflater.unconsumed_tail
    except zlib.error as e:
        raise BodyError(f"the compressed body is broken: {e}") from None
    if inflater is not None and not inflater.eof:
        raise BodyError("the compressed body ends before its end marker")
    return b"".join(parts)


def bounded_session(
    timeout: float, headers: dict[str, str], connector: aiohttp.BaseConnector | None = None
) -> aiohttp.ClientSession:
    """A client session for ``read_body``: it asks for gzip and leaves inflating to
    ``read_body``, under the limit."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout),
        headers={**headers, "Accept-Encoding": "gzip"},
        connector=connector,
        auto_decompress=False,
    )
