"""How long and how many: the connection bounds of every HTTP server we run (the
exporter's ``/metrics``, the controller's API and Alertmanager webhook).

aiohttp waits an hour for a request on an open connection and takes as many
connections as the process has file descriptors. A server that anyone on the
network can reach then falls to the oldest trick there is: open sockets that send
half a request line and stall (slowloris). A thousand of them exhaust the
descriptors, and the one request that matters (a scrape, an alert) gets no
connection. Both servers had that hole; the exporter closed it first, and the
machinery moved here so that there is one of it:

* **Header timeout.** From connect until its first request's headers are complete,
  a connection has ``header_timeout`` (Go's ``ReadHeaderTimeout``); then it is
  closed. The timer is a ``call_later`` per connection, cancelled when aiohttp's
  parser hands over a request (or refuses one with a 400).
* **Idle timeout.** A keep-alive connection with no request in flight is closed
  after ``idle_timeout`` (aiohttp's ``keepalive_timeout``).
* **Connection cap.** Past ``max_connections`` the oldest *idle* connection is
  closed to make room, so a newcomer (Prometheus, Alertmanager) always gets in;
  when every connection has a request in flight, the newcomer itself is closed.
  ``fd_headroom`` lowers the cap to what the process's descriptor limit leaves,
  and ``raise_fd_limit`` raises the soft limit to the hard one first, as Go
  programs do.
* **Line and header sizes** are aiohttp's own bounds, set explicitly.

The bounds need aiohttp's per-connection hooks, which only its low-level
``web.Server`` has. ``BoundedServer`` is that server with the bounds; a server
with its own dispatch (the exporter) subclasses it, and a ``web.Application``
(the controller) is served through ``BoundedAppRunner``, which hands the
application's handler and request factory to a ``BoundedServer`` instead of a plain
one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("accel_common.httpbounds")


@dataclass(frozen=True)
class ConnectionLimits:
    """How much any one client can hold of a server. The defaults suit a server
    that a few well-behaved peers talk to (Prometheus, Alertmanager, a person)."""

    # From connect until the first request's headers are complete (Go's
    # ReadHeaderTimeout; slow-header clients are closed after it).
    header_timeout: float = 10.0
    # A keep-alive connection with no request in flight. Longer than the usual
    # scrape intervals (15-60 s), so Prometheus keeps reusing its connection.
    idle_timeout: float = 75.0
    # Open connections; past it the oldest idle one is closed.
    max_connections: int = 1024
    # aiohttp's defaults for one line; real headers are a few hundred bytes.
    max_line_size: int = 8190
    max_field_size: int = 8190
    max_headers: int = 64
    # How long a request body the handlers never read may keep draining.
    lingering_time: float = 2.0

    def problems(self) -> list[str]:
        """What is wrong with these bounds, for a flag's error message; empty when
        they can serve."""
        found = []
        if not self.header_timeout > 0:
            found.append(f"the header timeout must be positive, got {self.header_timeout:g}s")
        if not self.idle_timeout > 0:
            found.append(f"the idle timeout must be positive, got {self.idle_timeout:g}s")
        if self.max_connections < 1:
            found.append(f"the connection cap must be at least 1, got {self.max_connections}")
        return found


L = TypeVar("L", bound=ConnectionLimits)

# asyncio accepts up to the listen backlog (aiohttp's 128) in one turn of the loop,
# makes their transports in the next, and calls ``connection_made``, where the cap
# acts, in the one after; the connections it closes then are gone a turn later.
# So the descriptors in use can run past the cap by up to three such bursts (seen:
# 245 past it, under a flood of 1,100 connections at once).
ACCEPT_BURST = 128
# Descriptors kept back from the connection cap: three accept bursts, and 128 for
# files, sockets to the API server or the devices, and logs.
FD_RESERVE = 3 * ACCEPT_BURST + 128


def fd_headroom(limits: L) -> L:
    """``limits`` with ``max_connections`` lowered to what this process's file
    descriptor limit leaves room for (``FD_RESERVE`` kept back for the rest)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return limits
    if soft == resource.RLIM_INFINITY:
        return limits
    room = max(16, soft - FD_RESERVE)
    if room >= limits.max_connections:
        return limits
    return dataclasses.replace(limits, max_connections=room)


def raise_fd_limit() -> None:
    """Soft file-descriptor limit up to the hard one, as Go programs (node_exporter,
    Prometheus) do at start: every open connection costs one, and the server caps
    connections below what is left (``fd_headroom``)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard and soft != resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, OSError, ValueError) as e:
        log.debug("file descriptor limit left as it is: %s", e)


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
RequestFactory = Callable[..., web.BaseRequest]


class BoundedServer(web.Server):
    """aiohttp's low-level server with ``ConnectionLimits`` (module docstring).

    ``handler`` answers each request; ``request_factory`` builds the request object
    (aiohttp's ``BaseRequest`` when not given). Every request marks its connection
    busy while it is handled, so the cap never closes a connection in the middle
    of an answer."""

    def __init__(
        self,
        handler: Handler,
        *,
        limits: ConnectionLimits,
        logger: logging.Logger,
        request_factory: RequestFactory | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            self._handle_bounded,
            request_factory=self._headers_arrived,
            access_log=None,
            logger=logger,
            keepalive_timeout=limits.idle_timeout,
            max_line_size=limits.max_line_size,
            max_field_size=limits.max_field_size,
            max_headers=limits.max_headers,
            lingering_time=limits.lingering_time,
            **kwargs,
        )
        self.limits = limits
        self._answer = handler
        self._build_request: RequestFactory = request_factory or self._make_request
        # Open connections, oldest first; those still owing their first request's
        # headers, with the timer that closes them; those with a request in flight.
        self._open: dict[RequestHandler, None] = {}
        self._header_timers: dict[RequestHandler, asyncio.TimerHandle] = {}
        self._busy: set[RequestHandler] = set()

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        self._open[handler] = None
        loop = asyncio.get_running_loop()
        self._header_timers[handler] = loop.call_later(
            self.limits.header_timeout, self._header_deadline, handler
        )
        if len(self._open) > self.limits.max_connections:
            self._make_room(handler)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        super().connection_lost(handler, exc)
        self._forget(handler)

    def _forget(self, handler: RequestHandler) -> None:
        self._open.pop(handler, None)
        self._busy.discard(handler)
        timer = self._header_timers.pop(handler, None)
        if timer is not None:
            timer.cancel()

    def _header_deadline(self, handler: RequestHandler) -> None:
        if self._header_timers.pop(handler, None) is not None:
            log.debug("closing a connection that sent no complete request in time")
            self._close(handler)

    def _make_room(self, newcomer: RequestHandler) -> None:
        """Closes the oldest idle connections until within the cap; the newcomer
        itself when every other connection has a request in flight."""
        excess = len(self._open) - self.limits.max_connections
        victims: list[RequestHandler] = []
        for handler in self._open:  # oldest first
            if len(victims) >= excess:
                break
            if handler is not newcomer and handler not in self._busy:
                victims.append(handler)
        for victim in victims:
            self._close(victim)
        if len(victims) < excess:
            # Not from inside connection_made: aiohttp has yet to start this
            # connection's task, which expects the connection still open.
            asyncio.get_running_loop().call_soon(self._close, newcomer)

    def _close(self, handler: RequestHandler) -> None:
        self._forget(handler)
        handler.force_close()

    def _headers_arrived(
        self,
        message: Any,
        payload: Any,
        protocol: RequestHandler,
        writer: Any,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        # A whole request line and headers arrived (or the parser refused them):
        # the connection has met its header deadline.
        timer = self._header_timers.pop(protocol, None)
        if timer is not None:
            timer.cancel()
        return self._build_request(message, payload, protocol, writer, task)

    async def _handle_bounded(self, request: web.BaseRequest) -> web.StreamResponse:
        protocol = request.protocol
        self._busy.add(protocol)
        try:
            return await self._answer(request)
        finally:
            self._busy.discard(protocol)

    async def shutdown(self, timeout: float | None = None) -> None:
        await super().shutdown(timeout)
        for timer in self._header_timers.values():
            timer.cancel()
        self._header_timers.clear()


class BoundedAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server is a ``BoundedServer``: the application's
    routes, middlewares and size limit, with ``ConnectionLimits`` around them."""

    def __init__(
        self, app: web.Application, *, limits: ConnectionLimits, logger: logging.Logger
    ) -> None:
        super().__init__(app, access_log=None, handle_signals=False)
        self.limits = limits
        self._logger = logger

    async def _make_server(self) -> web.Server:
        # The plain server aiohttp builds for the application (after its startup
        # signal and freeze) gives the handler and the request factory; the
        # bounded one serves them.
        plain = await super()._make_server()
        return BoundedServer(
            plain.request_handler,
            limits=self.limits,
            logger=self._logger,
            request_factory=plain.request_factory,
        )

    @property
    def bounded(self) -> BoundedServer | None:
        """The running server, once ``setup()`` has made it."""
        server = self.server
        return server if isinstance(server, BoundedServer) else None


__all__ = [
    "ACCEPT_BURST",
    "FD_RESERVE",
    "BoundedAppRunner",
    "BoundedServer",
    "ConnectionLimits",
    "fd_headroom",
    "raise_fd_limit",
]
