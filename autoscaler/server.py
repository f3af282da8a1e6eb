"""The controller's HTTP API: its own ``/metrics``, ``/healthz``, the rules, the
decision log and the engine state as JSON, Alertmanager's webhook, and the breaker
reset.

The two endpoints that change state (alerts in, breaker reset) require a bearer
token or basic auth when one is configured; the breaker reset is refused outright
when none is, since anyone who can reach the port could otherwise re-open the
fleet to remediation during a fault storm. Without one, ``run`` serves the webhook
only on a loopback address, or where ``--api.allow-unauthenticated`` says so
(``commands/run.py`` checks that before anything listens).

The webhook takes bodies of up to ``--alerts.body-size-limit`` (4 MiB: thousands
of alerts) from a network it does not control, on the event loop that also runs
the evaluation cycle. So a body is read chunk by chunk up to its limit, then
decoded and applied a slice of a few milliseconds at a time
(``sources/alertmanager.py``): however many large bodies arrive, the loop keeps
turning. Not in a worker thread: decoding is Python work that holds the
interpreter lock, and a thread decoding beside the loop made every one of the
loop's socket calls wait up to the 5 ms switch interval for it back (a 4 MiB body
still stalled the loop for 0.4 s that way). Only a body that is not laid out as a
v4 payload, or is not JSON, is read in one piece, in a thread of the webhook's own
(``DECODE_WORKERS``), for ``jsonread``'s verdict. The connection bounds (header
and idle timeouts, the connection cap) are ``accel_common.httpbounds``, set where
the server starts (``commands/run.py``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import Any

from aiohttp import web

from accel_common.ownmetrics import CONTENT_TYPE
from accel_common.secrets import read_basic_auth, read_token
from autoscaler import __version__, metrics
from autoscaler.controller import Controller
from autoscaler.engine.state import reset_breaker
from autoscaler.kube.cache import CachedKube
from autoscaler.kube.client import ClientKube
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.metrics import ControllerStatus, Counts
from autoscaler.rhythm import rows_of
from autoscaler.ruleset.model import Rule
from autoscaler.sources.alertmanager import (
    MAX_BODY,
    Notices,
    PayloadError,
    decode_in_slices,
    load,
)

log = logging.getLogger("accel_autoscaler.api")

# Bodies read in one piece at once (those that are not v4 payloads). It is work
# under the interpreter lock, so more threads would not finish sooner; two keep
# one from holding up the next, and bound the memory their values take.
DECODE_WORKERS = 2


def snapshot(c: Controller) -> ControllerStatus:
    """What the controller's series say now, copied into one frozen status (no
    state changes: the alerts past their TTL are counted out, not expired; the
    evaluation cycle expires them)."""
    stats, ex = c.stats, c.executor
    watches, requests = _api_counters(c.kube)
    return ControllerStatus(
        rules=tuple(r.name for r in c.ruleset.rules),
        decisions=_keyed(
            ((rule, action, kind, str(dry).lower()), n)
            for (rule, action, kind, dry), n in stats.decisions.items()
        ),
        unknown=MappingProxyType(dict(stats.unknown)),
        pending=MappingProxyType(c.state.pending_counts()),
        active=MappingProxyType(c.state.active_counts()),
        last_duration=stats.last_duration,
        last_timestamp=stats.last_timestamp,
        source=c.source.name,
        source_up=c.source_up,
        breaker_open=c.state.breaker_open,
        reload_success=c.watcher.reload_success,
        outcomes=_keyed((key, n) for key, n in (ex.outcomes if ex else {}).items()),
        in_flight=ex.in_flight if ex else 0,
        remediations=tuple(sorted(c.remediations)),
        leader=c.leading(),
        cluster_state_errors=stats.cluster_state_errors,
        unrestored=stats.unrestored,
        state_record_errors=stats.state_record_errors,
        record_refused=stats.record_refused,
        failed_cycles=stats.failed_cycles,
        healthy=not c.health(),
        watch_failures=watches,
        kube_requests=requests,
        alerts_firing=c.alerts.firing_at(c.clock()),
        alerts_dropped=_keyed(((reason,), n) for reason, n in c.alerts.dropped.items()),
        provisioning=_keyed(((k,), n) for k, n in c.provisioner.counts().items())
        if c.provisioner is not None
        else (),
        # The jobs' learned rhythm rides with the cluster state (autoscaler/rhythm.py).
        cluster_rows=(*c.cluster_rows, *rows_of(c.state)),
    )


def _keyed(counts: Iterable[tuple[tuple[str, ...], int]]) -> Counts:
    """Counts by label values, sorted by them: the order the series are listed in."""
    return tuple(sorted(counts))


def _api_counters(kube: object) -> tuple[Counts | None, Counts | None]:
    """The informers' failed list/watch attempts by resource, and the API client's
    requests by verb, resource and status; None for what this controller does not
    have. ``commands/run.py`` wraps the client (``ClientKube``) in a ``DryRunKube``
    under --dry-run and either in a ``CachedKube`` that holds the informers."""
    watches: Counts | None = None
    if isinstance(kube, CachedKube):
        watches = _keyed(((r,), i.failures) for r, i in kube.informers.items())
        kube = kube.client
    if isinstance(kube, DryRunKube):
        kube = kube.inner
    if not isinstance(kube, ClientKube):
        return watches, None
    requests = _keyed(
        ((verb, resource, str(code)), n)
        for (verb, resource, code), n in kube.request_counts.items()
    )
    return watches, requests


def render_metrics(c: Controller) -> str:
    """The controller's ``/metrics``: its own series (``accel_autoscaler_*``), then
    the cluster-state series, from one snapshot through the catalogue's collector
    (``autoscaler/metrics.py``). Reading it changes nothing."""
    return metrics.render(snapshot(c))


def _rule_json(r: Rule) -> dict[str, Any]:
    return {
        "name": r.name,
        "description": r.description,
        "expr": r.expr,
        "alertname": r.alertname,
        "for": r.for_,
        "target": r.target,
        "action": {"type": r.action.type, **dict(r.action.params)},
        "cooldown": r.cooldown,
        "recover": None if r.recover is None else {"expr": r.recover.expr, "for": r.recover.for_},
        "source": str(r.position),
    }


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Auth:
    """Bearer token and/or basic auth, read from files at start.

    A file that is empty or holds only whitespace is refused (``SecretError``), so
    ``Authorization: Bearer `` can never match. Credentials are compared as bytes
    with ``hmac.compare_digest``, the user and the password of basic auth each in
    full, so the time an answer takes says nothing about how much of a guess was
    right.
    """

    def __init__(self, token_file: Path | None, basic_auth_file: Path | None) -> None:
        self.token = read_token(token_file) if token_file else None
        self.basic = read_basic_auth(basic_auth_file) if basic_auth_file else None

    @property
    def configured(self) -> bool:
        return self.token is not None or self.basic is not None

    def allows(self, header: str | None) -> bool:
        if not self.configured:
            return True
        if header is None:
            return False
        scheme, _, credentials = header.partition(" ")
        # aiohttp decodes header bytes with surrogateescape; this gives them back.
        given = credentials.strip().encode("utf-8", "surrogateescape")
        if scheme.lower() == "bearer" and self.token is not None:
            return hmac.compare_digest(given, self.token)
        if scheme.lower() == "basic" and self.basic is not None:
            try:
                decoded = base64.b64decode(given, validate=True)
            except (binascii.Error, ValueError):
                return False
            user, sep, password = decoded.partition(b":")
            # Both comparisons always run: no early answer for a wrong user.
            user_ok = hmac.compare_digest(user, self.basic[0])
            password_ok = hmac.compare_digest(password, self.basic[1])
            return bool(sep) and user_ok and password_ok
        return False


def refuse(status: int, reason: str) -> web.Response:
    """An error answer as JSON, with the reason."""
    return web.json_response({"status": "error", "error": reason}, status=status)


async def _read_body(request: web.Request, max_body: int) -> bytes | web.Response:
    """The whole body, or the answer that refuses it."""
    too_big = f"body larger than {max_body} bytes"
    if request.content_length is not None and request.content_length > max_body:
        return refuse(413, too_big)
    raw = bytearray()
    try:
        # Chunk by chunk until the end or the limit: a body is never held whole
        # past max_body, with or without a Content-Length.
        async for chunk in request.content.iter_chunked(64 * 1024):
            raw += chunk
            if len(raw) > max_body:
                return refuse(413, too_big)
    except (ValueError, web.RequestPayloadError) as e:
        # A chunked encoding or a Content-Encoding that does not decode.
        return refuse(400, f"cannot read the body: {str(e).strip()}")
    except ConnectionError:  # the sender went away; there is no one to answer
        return refuse(400, "the connection closed before the body was read")
    return bytes(raw)


def make_app(
    c: Controller,
    token_file: Path | None = None,
    basic_auth_file: Path | None = None,
    *,
    max_body: int = MAX_BODY,
) -> web.Application:
    """The API as an aiohttp application; ``max_body``: the largest webhook body
    read, in bytes."""
    auth = Auth(token_file, basic_auth_file)
    # The webhook's own threads: a queue of large bodies never takes the default
    # pool's threads, which the Kubernetes client's requests run in.
    decoder = ThreadPoolExecutor(max_workers=DECODE_WORKERS, thread_name_prefix="webhook-decode")
    # /metrics writes its snapshot here: 16,000 cluster-state rows take 0.3 s of
    # generate_latest, which stalled the loop (the webhook, /healthz) for all of it;
    # beside the loop, its longest stall was 23 ms. One thread: scrapes are rare.
    renderer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-render")

    async def stop_decoding(app: web.Application) -> None:
        decoder.shutdown(wait=False, cancel_futures=True)

    async def stop_rendering(app: web.Application) -> None:
        renderer.shutdown(wait=False, cancel_futures=True)

    app = web.Application(client_max_size=max_body)
    app.on_cleanup.append(stop_decoding)
    app.on_cleanup.append(stop_rendering)
    for path, handler in _read_pages(c, renderer):
        app.router.add_get(path, handler)
    app.router.add_post("/api/v1/alerts", _alerts_webhook(c, auth, decoder, max_body))
    app.router.add_post("/api/v1/breaker/reset", _breaker_reset(c, auth))
    return app


async def _landing(request: web.Request) -> web.StreamResponse:
    return web.Response(
        text=(
            f"accel-autoscaler {__version__}\n"
            "/metrics /healthz /api/v1/rules /api/v1/decisions /api/v1/actions "
            "/api/v1/state\n"
            "POST /api/v1/alerts (Alertmanager webhook) POST /api/v1/breaker/reset\n"
        )
    )


def _read_pages(c: Controller, renderer: ThreadPoolExecutor) -> list[tuple[str, Handler]]:
    """The GET routes, in the order they are registered: they only read the
    controller, so they need no auth; ``renderer`` is /metrics' one thread."""

    async def metrics_page(request: web.Request) -> web.StreamResponse:
        status = snapshot(c)  # on the loop, where the controller's state changes
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(renderer, metrics.render, status)
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.StreamResponse:
        # Red when the controller cannot do its job (Controller.health): a probe
        # that restarts it is the right answer to all of those.
        reasons = c.health()
        if reasons:
            text = "unhealthy:\n" + "".join(f"- {r}\n" for r in reasons)
            return web.Response(status=503, text=text)
        return web.Response(text="ok\n")

    async def rules(request: web.Request) -> web.StreamResponse:
        rs = c.ruleset
        return web.json_response(
            {
                "evaluationInterval": rs.evaluation_interval,
                "files": list(rs.files),
                "reloadSuccess": c.watcher.reload_success,
                "problems": [str(p) for p in c.watcher.last_problems],
                "rules": [_rule_json(r) for r in rs.rules],
            }
        )

    async def decisions(request: web.Request) -> web.StreamResponse:
        return web.json_response({"decisions": [d.as_json() for d in c.state.decisions]})

    async def actions(request: web.Request) -> web.StreamResponse:
        history = c.executor.history if c.executor else ()
        return web.json_response(
            {
                "acting": c.executor is not None,
                "inFlight": c.executor.in_flight if c.executor else 0,
                "actions": [r.as_json() for r in history],
            }
        )

    async def state(request: web.Request) -> web.StreamResponse:
        body = c.state.to_json()
        body["sourceUp"] = c.source_up
        return web.json_response(body)

    return [
        ("/", _landing),
        ("/metrics", metrics_page),
        ("/healthz", healthz),
        ("/api/v1/rules", rules),
        ("/api/v1/decisions", decisions),
        ("/api/v1/actions", actions),
        ("/api/v1/state", state),
    ]


def _alerts_webhook(
    c: Controller, auth: Auth, decoder: ThreadPoolExecutor, max_body: int
) -> Handler:
    """Alertmanager's webhook: only the leader takes alerts, and a body is decoded
    in slices on the loop (``decoder`` reads only what is not a v4 payload)."""

    async def one_piece(raw: bytes) -> Any:
        return await asyncio.get_running_loop().run_in_executor(decoder, load, raw, max_body)

    async def alerts(request: web.Request) -> web.StreamResponse:
        if not auth.allows(request.headers.get("Authorization")):
            return refuse(401, "authorization required")
        if not c.leading():
            # Alertmanager retries a 5xx; a new connection through the webhook Service
            # (which selects the leader's pod) reaches the replica that acts.
            response = refuse(503, "this replica is standing by; the leader takes alerts")
            response.force_close()
            return response
        raw = await _read_body(request, max_body)
        if isinstance(raw, web.Response):
            return raw
        try:
            # A 4 MiB body takes a few hundred milliseconds to check: in slices.
            body: Notices = await decode_in_slices(raw, max_body, one_piece=one_piece)
        except PayloadError as e:  # BodyError included: its message says "malformed JSON"
            return refuse(400, str(e))
        done = await c.alerts.apply_in_slices(body, c.clock())
        if not c.leading():
            # It stood down while this body was decoded or applied: what it holds
            # now is as stale as what step-down dropped (Alertmanager retries).
            c.alerts.clear()
            response = refuse(503, "this replica stood down while taking the alerts")
            response.force_close()
            return response
        # Dropped alerts (stale replays, over the limit) still answer 200: a retry
        # would be dropped the same way.
        return web.json_response(
            {
                "status": "success",
                "firing": done.firing,
                "resolved": done.resolved,
                "dropped": dict(done.dropped),
            }
        )

    return alerts


def _breaker_reset(c: Controller, auth: Auth) -> Handler:
    """The breaker reset: refused outright without configured credentials, since
    anyone who can reach the port could otherwise re-open the fleet."""

    async def breaker_reset(request: web.Request) -> web.StreamResponse:
        if not auth.configured:
            return refuse(
                403,
                "breaker reset needs --api.token-file or --api.basic-auth-file to be set",
            )
        if not auth.allows(request.headers.get("Authorization")):
            return refuse(401, "authorization required")
        async with c.lock:
            was_open = c.state.breaker_open
            reset_breaker(c.state, c.clock())
        log.warning(
            "circuit breaker reset through the API (was %s)", "open" if was_open else "closed"
        )
        return web.json_response({"status": "success", "wasOpen": was_open})

    return breaker_reset
