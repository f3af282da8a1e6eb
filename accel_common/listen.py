"""Where the HTTP servers listen and how they stop: one listen-address grammar and
one "serve until SIGINT or SIGTERM" for the exporter, the controller and the
placement extender.

It lives below both entry points so that a library module (the extender) need not
import a command module to read a ``--listen`` flag, and so that the three servers
start, refuse a busy port and shut down the same way: the port is bound before
anything else starts, a bind failure is one ``ListenError`` the command turns into
exit status 1, and a signal sets an event that the command waits on, so its own
shutdown (stop polling, step down as leader, drain writes) runs before the server
closes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
from types import TracebackType

from aiohttp import web

from accel_common.httpbounds import BoundedAppRunner, ConnectionLimits

# The signals that stop a server; SIGHUP is left to the commands that reload on it.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


def split_listen_address(address: str) -> tuple[str | None, int]:
    """``:9835`` (all interfaces: host None), ``127.0.0.1:9835``, ``[::1]:9835``;
    raises ValueError for anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid listen address {address!r} (use HOST:PORT or :PORT)")
    return (host.strip("[]") or None), int(port)


class ListenError(Exception):
    """The address could not be bound (in use, not local, not permitted)."""


class Listener:
    """An aiohttp application served on one address until ``stop`` is set, which
    SIGINT and SIGTERM do while the listener is open. ``async with`` closes it: the
    signal handlers go and the server shuts down, after the caller's own shutdown in
    the block has run."""

    def __init__(
        self, runner: web.BaseRunner, host: str | None, port: int, stop: asyncio.Event
    ) -> None:
        self._runner = runner
        self.host = host
        self.port = port
        self.stop = stop
        self._signals: list[signal.Signals] = []

    @classmethod
    async def start(
        cls,
        app: web.Application | web.Server,
        host: str | None,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        stop: asyncio.Event | None = None,
        limits: ConnectionLimits | None = None,
    ) -> Listener:
        """Binds and serves ``app``; raises ListenError when the address cannot be
        bound. ``stop`` is the event to wait on (a new one when not given).
        ``limits``: the connection bounds an application is served with (a
        low-level server brings its own)."""
        # aiohttp's own signal handling is off: the signals set ``stop`` instead, so
        # that the command decides what runs before the server goes.
        # A low-level web.Server (the exporter's, which needs per-connection hooks)
        # brings its own handler settings.
        runner: web.BaseRunner
        if isinstance(app, web.Server):
            runner = web.ServerRunner(app, handle_signals=False)
        elif limits is not None:
            runner = BoundedAppRunner(
                app, limits=limits, logger=logging.getLogger("aiohttp.server")
            )
        else:
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_address=True)
        listener = cls(runner, host, port, stop or asyncio.Event())
        # Before the port answers: whoever sees it answer may send a signal at once.
        listener._catch_signals()
        try:
            await site.start()
        except OSError as e:
            await listener.close()
            where = f"{'[' + host + ']' if host and ':' in host else host or ''}:{port}"
            # asyncio's strerror repeats the address; the errno's own words do not.
            reason = os.strerror(e.errno) if e.errno else str(e)
            raise ListenError(f"cannot listen on {where}: {reason}") from e
        return listener

    def _catch_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            try:
                loop.add_signal_handler(sig, self.stop.set)
            except (NotImplementedError, RuntimeError, ValueError):
                # Not the main thread (a test serving in-process), or no Unix
                # signals: ``stop`` is then set by the caller alone.
                continue
            self._signals.append(sig)

    @property
    def bound_port(self) -> int:
        """The port actually bound: the one asked for, or the kernel's pick for 0."""
        for address in self._runner.addresses:
            if isinstance(address, tuple) and len(address) >= 2:
                return int(address[1])
        return self.port

    async def wait(self) -> None:
        """Until SIGINT, SIGTERM or ``stop.set()``."""
        await self.stop.wait()

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            loop.remove_signal_handler(sig)
        self._signals.clear()
        await self._runner.cleanup()

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


__all__ = ["STOP_SIGNALS", "ListenError", "Listener", "split_listen_address"]
