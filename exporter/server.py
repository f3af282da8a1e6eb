"""The exporter's HTTP face: aiohttp serving bytes the poller already rendered.

A scrape never calls a vendor library and never formats a metric: it picks the
cached plain or gzip body and writes it. Basic auth checks run bcrypt, which is
slow on purpose, so an uncached check runs in a thread rather than on the loop.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Awaitable, Callable

from aiohttp import web

from exporter import __version__
from exporter.poller import Poller
from exporter.webconfig import WebConfig

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip()
            return not (q.startswith("q=") and float(q[2:] or 0) == 0)
    return False


def make_app(poller: Poller, telemetry_path: str, web_config: WebConfig | None) -> web.Application:
    @web.middleware
    async def security(request: web.Request, handler: Handler) -> web.StreamResponse:
        if web_config is None:
            return await handler(request)
        resp: web.StreamResponse
        auth = request.headers.get("Authorization")
        if web_config.users and not await asyncio.to_thread(web_config.check_basic_auth, auth):
            resp = web.Response(
                status=401,
                text="Unauthorized\n",
                headers={"WWW-Authenticate": 'Basic realm="accel-exporter"'},
            )
        else:
            resp = await handler(request)
        # Configured headers (HSTS, CSP...) go on every answer, refusals included.
        resp.headers.update(web_config.headers)
        return resp

    async def metrics(request: web.Request) -> web.StreamResponse:
        snap = poller.snapshot
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            return web.Response(
                body=snap.gzipped,
                headers={"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"},
            )
        return web.Response(body=snap.text, headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.StreamResponse:
        # Liveness of the exporter itself: a missing vendor backend is data
        # (accel_exporter_backend_up 0), not a reason to restart the pod.
        lines = ["ok"] + [
            f"backend {n}: {'up' if up else 'down'}" for n, up in poller.backend_up.items()
        ]
        return web.Response(text="\n".join(lines) + "\n")

    async def landing(request: web.Request) -> web.StreamResponse:
        rows = "".join(
            f"<li>{html.escape(n)}: {'up' if up else 'down'}</li>"
            for n, up in poller.backend_up.items()
        )
        path = html.escape(telemetry_path)
        body = (
            "<!doctype html><html><head><title>accel-exporter</title></head><body>"
            f"<h1>accel-exporter {__version__}</h1>"
            "<p>Accelerator metrics for NVIDIA, AMD, Intel oneAPI and the CPU.</p>"
            f'<p><a href="{path}">{path}</a> · <a href="/healthz">/healthz</a></p>'
            f"<h2>Backends</h2><ul>{rows}</ul></body></html>"
        )
        return web.Response(text=body, content_type="text/html")

    app = web.Application(middlewares=[security])
    app.router.add_get(telemetry_path, metrics)
    app.router.add_get("/healthz", healthz)
    if telemetry_path != "/":
        app.router.add_get("/", landing)
    return app
