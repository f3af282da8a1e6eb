"""The exporter's HTTP face: aiohttp serving bytes the poller already rendered, to
anyone on the network, hostile clients included.

A scrape never calls a vendor library and never formats a metric: it picks the
cached plain or gzip body and writes it. What the rest of this module does is keep
that true when clients misbehave, the way Prometheus's exporter-toolkit does for
Go exporters, and a little further:

* **Valid scrapes never wait on bcrypt.** A credential that passed before is
  recognised on the event loop (``exporter.basicauth``). Only unknown credentials,
  which under attack are wrong passwords, go to bcrypt, in a pool of their own
  (``AuthPool``): one thread, at the lowest CPU priority, taking them in turn from
  bounded lines, one per client address, with a bounded wait; past either bound
  the request is refused without bcrypt. A flood of guesses queues behind itself,
  costs one core at most, never sits in front of a cached scrape, and a valid
  credential that is not cached yet still gets its turn within seconds, however
  many addresses the flood comes from: addresses whose guesses failed wait
  behind those that have not, and a full pool makes room by refusing from the
  longest line, never a newcomer's.
* **No connection is held forever.** aiohttp waits an hour for a request on an
  open connection; here a connection must finish its first request's headers
  within ``header_timeout`` and may sit idle between requests for
  ``idle_timeout``; request lines and headers are bounded; and past
  ``max_connections`` the oldest idle connection is closed to make room, so that
  thousands of idle or slow-header sockets cannot starve a scrape of a connection
  (or the process of file descriptors). That machinery is
  ``accel_common.httpbounds``, which the controller's webhook shares.
* **The configured headers on every answer**: 200s, 401s, 404s, 405s, and the
  400s the HTTP parser itself sends for a malformed request.
* **Lenient ``Accept-Encoding``**: a malformed element (``gzip;q=x``) is ignored,
  as HTTP says it may be; the answer is then plain text, never a 500.

The connection limits need the per-connection hooks of aiohttp's low-level
``web.Server`` (``accel_common.httpbounds.BoundedServer``); with three routes, the
dispatch is a dictionary.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import html
import ipaddress
import logging
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from accel_common.httpbounds import BoundedServer, ConnectionLimits, fd_headroom
from exporter import __version__
from exporter.basicauth import BasicAuth
from exporter.poller import Poller
from exporter.webconfig import WebConfig

log = logging.getLogger("accel_exporter.server")


class _ClientMistakes(logging.Filter):
    """aiohttp logs a traceback at ERROR for every request its parser refuses (a
    bad URL, an oversized header). That is the client's mistake, answered with a
    400, and anyone can send one: it becomes a debug line, so that no client can
    fill the exporter's log with tracebacks. The server's own errors stay errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            reason = " ".join(str(error).split()).replace("%", "%%")  # msg is a %-format
            record.msg = f"{record.msg}: {reason}"
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            # The level was checked at ERROR before this filter ran.
            return http_log.isEnabledFor(logging.DEBUG)
        return True


# The logger aiohttp's connection handlers report to.
http_log = logging.getLogger("accel_exporter.http")
http_log.addFilter(_ClientMistakes())

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HEALTH_PATH = "/healthz"
LANDING_PATH = "/"
# Paths the server answers itself; the telemetry path may not take one of them.
RESERVED_PATHS = (HEALTH_PATH,)
_UNAUTHORIZED = {"WWW-Authenticate": 'Basic realm="accel-exporter"'}
# What a telemetry path may hold: an absolute path of URL path characters, no
# query, fragment, space or control character (a request could never match it).
_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@/%-]*$")


@dataclass(frozen=True)
class Limits(ConnectionLimits):
    """How much any one client can hold: the connection bounds every server of
    ours has (``ConnectionLimits``: header and idle timeouts, the connection cap),
    and the exporter's own bounds on basic auth. The defaults suit a node
    exporter, which one or two Prometheus servers and the odd person scrape."""

    # bcrypt checks of unknown credentials: threads, checks allowed to wait for
    # one (in all, and per client), and for how long (under Prometheus's default
    # scrape timeout of 10 s).
    auth_workers: int = 1
    auth_queue: int = 256
    auth_queue_per_address: int = 16
    auth_wait: float = 5.0
    # Clients (addresses, IPv6 /64s) whose last check failed, remembered so that
    # those not on record go first; the oldest is forgotten past this many.
    auth_failed_addresses: int = 4096
    # The pause before refusing a check the full line cannot take: it slows a
    # guessing client down without costing a thread or bcrypt.
    refusal_delay: float = 0.25


LIMITS = Limits()


def fd_headroom_limits(limits: Limits = LIMITS) -> Limits:
    """``limits`` with ``max_connections`` lowered to what this process's file
    descriptor limit leaves room for (a margin kept for sysfs reads and logs)."""
    return fd_headroom(limits)


def check_telemetry_path(path: str) -> str | None:
    """Why ``path`` cannot be the telemetry path, or None when it can."""
    if not path.startswith("/"):
        return f"must start with '/', got {path!r}"
    if not _PATH.match(path):
        return (
            f"{path!r} is not a plain URL path (no query, fragment, space or control "
            "character); use e.g. /metrics"
        )
    if path in RESERVED_PATHS:
        return f"{path} is served by the exporter itself (its health check); use e.g. /metrics"
    return None


def accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip (RFC 9110 12.5.3): gzip with
    a weight above 0, or ``*`` above 0 when gzip is not named. A malformed element
    is skipped, so the worst a client's typo does is get plain text."""
    gzip_q: float | None = None
    star_q: float | None = None
    for element in header.split(","):
        coding, *params = element.split(";")
        coding = coding.strip().lower()
        q = _weight(params)
        if q is None:
            continue
        if coding == "gzip":
            gzip_q = q
        elif coding == "*":
            star_q = q
    if gzip_q is not None:
        return gzip_q > 0
    return star_q is not None and star_q > 0


_QVALUE = re.compile(r"^(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)$")


def _weight(params: list[str]) -> float | None:
    """The q of one element (1 without one); None when malformed."""
    for param in params:
        name, sep, value = param.strip().partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            if not sep or not _QVALUE.match(value):
                return None
            return float(value)
    return 1.0


def _lowest_priority() -> None:
    # bcrypt releases the GIL and burns a core; at nice 19 it only gets CPU the
    # event loop and the poller do not want. Linux applies nice per thread.
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _granted(turn: asyncio.Future[bool]) -> bool:
    return turn.done() and not turn.cancelled() and turn.result()


def client_key(address: str) -> str:
    """Whom a check counts against: the address, or its /64 for IPv6, since one
    host is handed a whole /64 and could otherwise be 2^64 new clients."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address  # not an IP (a unix socket's peer): one client
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
            return str(ip.ipv4_mapped)
        # The /64 by its number: a link-local address's %zone is no other host.
        return f"{ipaddress.IPv6Address(int(ip) >> 64 << 64)}/64"
    return str(ip)


Line = collections.deque[asyncio.Future[bool]]


class AuthPool:
    """bcrypt checks of credentials the cache does not know, bounded and in turn.

    ``workers`` checks run at once (one, as exporter-toolkit's mutex allows); the
    others wait for at most ``auth_wait``, in one line per client (an address, an
    IPv6 /64) served in rotation, at most ``auth_queue`` in all and
    ``auth_queue_per_address`` per client. Why each part:

    * **Rotation** lets a valid credential that is not cached yet (a restarted
      exporter, a changed password) in during a flood from one host: it waits
      behind at most one check of each other client, however many requests the
      flooding host keeps in line.
    * **Clients on record go last.** A client whose check failed is kept on a
      record (the last ``auth_failed_addresses`` of them, oldest forgotten first;
      a success takes it off), and the clients not on it are served first. So
      once each host of a flood from many addresses has had one guess refused,
      a newcomer waits for the check running and its own, whatever the number
      of flooding hosts (in rotation alone it would wait for one guess of each:
      32 hosts at cost 10 are four seconds here, and the line's 5 s wait is
      reached near 40). While a flood starts, before its hosts are on record, a
      newcomer is one client among them: no scheduler can tell it from a host
      it has not heard from. The record keys on clients, not on credentials or
      user names: guesses are fresh passwords each time, and a line that served
      existing users first would tell which users exist by its speed.
    * **The global bound refuses from the longest line**, as fair queues drop
      from their fattest flow: when ``auth_queue`` checks wait, a newcomer takes
      the place of the last check of the longest line of a client on record (or,
      with none on record, of a longer line than the newcomer's own would be),
      and is refused only when no line is longer than its own. A flood from many
      addresses fills the queue but cannot keep a client with nothing waiting
      out of it (today's defect, issue 27, was a newcomer refused because the
      queue was full). The check pushed out is refused as a full line's is.
    * **Bounded memory**: the lines hold at most ``auth_queue`` checks (each also
      an open connection, itself capped), the record ``auth_failed_addresses``
      keys.

    Past a bound a check is refused without bcrypt, after ``refusal_delay``, which
    slows a guessing client without costing a thread.
    """

    def __init__(self, auth: BasicAuth, limits: Limits) -> None:
        self._auth = auth
        self._executor = ThreadPoolExecutor(
            max_workers=limits.auth_workers,
            thread_name_prefix="accel-auth",
            initializer=_lowest_priority,
        )
        self._workers = limits.auth_workers
        self._max_waiting = limits.auth_queue
        self._max_waiting_per_address = limits.auth_queue_per_address
        self._max_record = limits.auth_failed_addresses
        self._wait = limits.auth_wait
        self._delay = limits.refusal_delay
        self._running = 0
        # Waiting checks by client, in rotation order, clients not on record apart
        # from those on it; each line first come, first served. Every entry is a
        # check still waiting (one that timed out, was cancelled or pushed out has
        # left its line).
        self._fresh: dict[str, Line] = {}
        self._suspect: dict[str, Line] = {}
        # Clients whose last check failed, least recently failed first.
        self._record: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.waiting = 0
        self.refused = 0
        self._last_warning = -1e9
        self._refused_since_warning = 0

    def on_record(self, address: str) -> bool:
        """Whether the client at ``address`` failed its last check (as far as the
        bounded record remembers)."""
        return client_key(address) in self._record

    async def check(self, authorization: str | None, address: str = "") -> bool:
        """Whether ``authorization`` passes; ``address`` is the client's, whose line
        this check waits in."""
        client = client_key(address)
        if not await self._turn(client):
            return False
        try:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(self._executor, self._auth.check, authorization)
            self._remember(client, ok)
            return ok
        finally:
            self._release()

    async def _turn(self, client: str) -> bool:
        """Waits for a worker; False (refused) when the lines are full, too slow,
        or this check was pushed out by a newcomer."""
        if self._running < self._workers and not self.waiting:
            self._running += 1
            return True
        line = self._line(client)
        if len(line) >= self._max_waiting_per_address or not self._make_room(client, line):
            return await self._refuse()
        lines = self._suspect if client in self._record else self._fresh
        if not line:
            lines[client] = line
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        line.append(turn)
        self.waiting += 1
        try:
            await asyncio.wait_for(turn, self._wait)
        except TimeoutError:
            pass  # unless the turn came just as the wait ran out: checked below
        except asyncio.CancelledError:
            if _granted(turn):
                self._release()  # handed a worker just as the request went away
            raise
        finally:
            if turn in line:
                # Timed out or cancelled before its turn came: leave the line.
                line.remove(turn)
                self.waiting -= 1
                self._drop_if_empty(client, line)
        if _granted(turn):
            return True
        if turn.done() and not turn.cancelled():
            return await self._refuse()  # pushed out: refused as a full line is
        self._note_refusal()
        return False

    def _line(self, client: str) -> Line:
        line = self._fresh.get(client)
        if line is None:
            line = self._suspect.get(client)
        return line if line is not None else collections.deque()

    def _make_room(self, client: str, line: Line) -> bool:
        """Whether a check of ``client`` may wait: there is room, or the last check
        of a longer line (a line on record before any other) gave its place."""
        if self.waiting < self._max_waiting:
            return True
        newcomer_suspect = client in self._record
        victim: tuple[str, Line] | None = None
        if self._suspect:
            victim = max(self._suspect.items(), key=lambda item: len(item[1]))
            if newcomer_suspect and len(victim[1]) <= len(line) + 1:
                victim = None
        elif not newcomer_suspect and self._fresh:
            victim = max(self._fresh.items(), key=lambda item: len(item[1]))
            if len(victim[1]) <= len(line) + 1:
                victim = None
        if victim is None:
            return False
        address, longest = victim
        turn = longest.pop()
        self.waiting -= 1
        self._drop_if_empty(address, longest)
        # Done: cancelled (timed out, or its request went away) but not yet out of
        # the line; its place is free all the same.
        if not turn.done():
            turn.set_result(False)
        return True

    def _drop_if_empty(self, client: str, line: Line) -> None:
        if line:
            return
        for lines in (self._fresh, self._suspect):
            if lines.get(client) is line:
                del lines[client]

    def _remember(self, client: str, ok: bool) -> None:
        """Puts a client on record when its check failed, takes it off when one
        passed; its waiting checks move with it."""
        if ok:
            self._record.pop(client, None)
            line = self._suspect.pop(client, None)
            if line is not None:
                self._fresh[client] = line
            return
        self._record[client] = None
        self._record.move_to_end(client)
        while len(self._record) > self._max_record:
            forgotten, _ = self._record.popitem(last=False)
            line = self._suspect.pop(forgotten, None)
            if line is not None:
                self._fresh[forgotten] = line
        if client in self._record:
            line = self._fresh.pop(client, None)
            if line is not None:
                self._suspect[client] = line

    def _release(self) -> None:
        """Hands the worker to the first waiter of the next client in rotation,
        clients not on record first, or frees it."""
        for lines in (self._fresh, self._suspect):
            while lines:
                client = next(iter(lines))
                line = lines.pop(client)
                turn = line.popleft()
                self.waiting -= 1
                if line:
                    lines[client] = line  # to the back of the rotation
                if not turn.done():  # done: cancelled, its request on the way out
                    turn.set_result(True)
                    return
        self._running -= 1

    async def _refuse(self) -> bool:
        self._note_refusal()
        await asyncio.sleep(self._delay)
        return False

    def _note_refusal(self) -> None:
        self.refused += 1
        self._refused_since_warning += 1
        now = time.monotonic()
        # Once a minute at most: a flood of guesses must not become a flood of logs.
        if now - self._last_warning >= 60.0:
            log.warning(
                "basic auth: %d check(s) of unknown credentials refused without bcrypt "
                "(%d waiting at most, %gs each); password guessing? valid scrapes whose "
                "credentials passed before are not affected",
                self._refused_since_warning,
                self._max_waiting,
                self._wait,
            )
            self._last_warning = now
            self._refused_since_warning = 0

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


Route = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class _Request(web.BaseRequest):
    """A request whose every response, the HTTP parser's own 400s included, carries
    the configured headers."""

    security_headers: Mapping[str, str] = {}

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        response.headers.update(self.security_headers)


class ExporterServer(BoundedServer):
    """The exporter's aiohttp server: routes, basic auth and the ``Limits``."""

    def __init__(
        self,
        poller: Poller,
        telemetry_path: str,
        web_config: WebConfig | None,
        limits: Limits = LIMITS,
    ) -> None:
        problem = check_telemetry_path(telemetry_path)
        if problem is not None:
            raise ValueError(f"telemetry path {problem}")
        super().__init__(
            self._dispatch,
            limits=limits,
            logger=http_log,
            request_factory=self._make_exporter_request,
        )
        self.limits = limits
        self._poller = poller
        self._telemetry_path = telemetry_path
        headers = dict(web_config.headers) if web_config is not None else {}
        self._request_class = type("ExporterRequest", (_Request,), {"security_headers": headers})
        users = web_config is not None and bool(web_config.users)
        self._auth = web_config.auth if web_config is not None and users else None
        self.auth_pool = AuthPool(self._auth, limits) if self._auth is not None else None
        self._routes: dict[str, Route] = {telemetry_path: self._metrics, HEALTH_PATH: self._health}
        self._routes.setdefault(LANDING_PATH, self._landing)

    # -- requests ----------------------------------------------------------------

    def _make_exporter_request(
        self,
        message: Any,
        payload: Any,
        protocol: RequestHandler,
        writer: Any,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        request: web.BaseRequest = self._request_class(
            message, payload, protocol, writer, task, asyncio.get_running_loop()
        )
        return request

    async def shutdown(self, timeout: float | None = None) -> None:
        await super().shutdown(timeout)
        if self.auth_pool is not None:
            self.auth_pool.close()

    async def _dispatch(self, request: web.BaseRequest) -> web.StreamResponse:
        # BoundedServer marks the connection busy around this.
        if not await self._authorized(request):
            return web.Response(status=401, text="Unauthorized\n", headers=_UNAUTHORIZED)
        route = self._routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="404: Not Found\n")
        if request.method not in ("GET", "HEAD"):
            return web.Response(
                status=405, text="405: Method Not Allowed\n", headers={"Allow": "GET, HEAD"}
            )
        return await route(request)

    async def _authorized(self, request: web.BaseRequest) -> bool:
        if self._auth is None or self.auth_pool is None:
            return True
        authorization = request.headers.get("Authorization")
        verdict = self._auth.cached(authorization)
        if verdict is not None:
            return verdict
        return await self.auth_pool.check(authorization, request.remote or "")

    async def _metrics(self, request: web.BaseRequest) -> web.StreamResponse:
        snap = await self._poller.first_snapshot()
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            return web.Response(
                body=snap.gzipped,
                headers={"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"},
            )
        return web.Response(body=snap.text, headers={"Content-Type": CONTENT_TYPE})

    async def _health(self, request: web.BaseRequest) -> web.StreamResponse:
        # Liveness of the exporter itself: a missing vendor backend is data
        # (accel_exporter_backend_up 0), not a reason to restart the pod.
        lines = ["ok"] + [
            f"backend {n}: {'up' if up else 'down'}" for n, up in self._poller.backend_up.items()
        ]
        return web.Response(text="\n".join(lines) + "\n")

    async def _landing(self, request: web.BaseRequest) -> web.StreamResponse:
        rows = "".join(
            f"<li>{html.escape(n)}: {'up' if up else 'down'}</li>"
            for n, up in self._poller.backend_up.items()
        )
        path = html.escape(self._telemetry_path)
        body = (
            "<!doctype html><html><head><title>accel-exporter</title></head><body>"
            f"<h1>accel-exporter {__version__}</h1>"
            "<p>Accelerator metrics for NVIDIA, AMD, Intel oneAPI and Gaudi, Huawei Ascend, "
            "Google TPU and the CPU.</p>"
            f'<p><a href="{path}">{path}</a> · <a href="{HEALTH_PATH}">{HEALTH_PATH}</a></p>'
            f"<h2>Backends</h2><ul>{rows}</ul></body></html>"
        )
        return web.Response(text=body, content_type="text/html")
