"""``accel-autoscaler run``: the controller's flags, and the wiring from them to a
running controller: the source, the Kubernetes API (or a dry-run in front of it),
the executor, leader election, the cluster-state reader and the HTTP server. The
engine state and the executor with its ladder hooks come from
``autoscaler/wiring.py``, the builder the simulator uses too, and every
collaborator is handed to the controller when it is built: nothing is swapped in
afterwards.

The HTTP server gets the connection bounds every server of ours has
(``accel_common.httpbounds``: header timeout, idle timeout, a connection cap
under the descriptor limit), so slow-header sockets cannot keep Alertmanager out;
leader election runs in a thread of its own (``ElectionThread``), so a busy event
loop cannot make the leader miss its renewals.

Nothing here decides anything: the controller (``autoscaler/controller.py``)
evaluates, the executor acts, and this module only builds and starts them.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

from accel_common import logs
from accel_common.httpbounds import ConnectionLimits, fd_headroom, raise_fd_limit
from accel_common.listen import Listener, ListenError, split_listen_address
from accel_common.names import REMEDIATION_ANNOTATION, STATE_CONFIGMAP_SUFFIX
from accel_common.secrets import SecretError, redact
from accel_common.yamlread import count_text
from autoscaler.actions.context import ActionContext
from autoscaler.clusterstate import collect
from autoscaler.commands.flags import (
    add_source_arguments,
    basic_auth_file,
    byte_size,
    duration,
    source_options,
    token_file,
)
from autoscaler.controller import (
    DEFAULT_PORT,
    ClusterRows,
    Controller,
    LeaderLabel,
    StateRecord,
    always_leading,
)
from autoscaler.executor import Executor
from autoscaler.kube.cache import CachedKube
from autoscaler.kube.client import ClientKube, KubeConfigError
from autoscaler.kube.dryrun import DryRunKube
from autoscaler.kube.leader import ElectionThread, LeaderElector
from autoscaler.kube.protocol import Kube
from autoscaler.pools.base import NodePoolProvider
from autoscaler.pools.clusterapi import ClusterAPIProvider
from autoscaler.provisioning import Provisioner
from autoscaler.ruleset.loader import RuleSetError
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.server import make_app
from autoscaler.sources.alertmanager import DEFAULT_LIMIT, DEFAULT_TTL, MAX_BODY, AlertReceiver
from autoscaler.sources.base import Source
from autoscaler.sources.build import build_source
from autoscaler.sources.scrape import parse_targets
from autoscaler.wiring import wire

log = logging.getLogger("accel_autoscaler")


def _alert_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """The bounds of the API's connections (``accel_common.httpbounds``)."""
    bounds = ConnectionLimits()
    p.add_argument(
        "--web.header-timeout",
        dest="header_timeout",
        type=duration,
        default=bounds.header_timeout,
        metavar="DURATION",
        help="a connection that has not sent its first request's headers within this is "
        "closed, so half-sent requests cannot hold sockets (default 10s)",
    )
    p.add_argument(
        "--web.idle-timeout",
        dest="idle_timeout",
        type=duration,
        default=bounds.idle_timeout,
        metavar="DURATION",
        help="a keep-alive connection with no request for this long is closed (default 75s)",
    )
    p.add_argument(
        "--web.max-connections",
        dest="max_connections",
        type=_alert_limit,
        default=bounds.max_connections,
        metavar="N",
        help="most open connections; past it the oldest idle one is closed. Lowered to what "
        "the file descriptor limit leaves (default %(default)s)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rules",
        action="append",
        required=True,
        metavar="PATH",
        help="rule file or directory (repeatable); reloaded on change and on SIGHUP",
    )
    add_source_arguments(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="change nothing: actions run against the API read-only, their writes are "
        "logged (and sent with dryRun=All); with no Kubernetes API, decisions are only "
        "recorded",
    )
    p.add_argument(
        "--web.listen-address",
        dest="listen_address",
        default=f":{DEFAULT_PORT}",
        metavar="ADDR",
        help="API and /metrics address (default %(default)s)",
    )
    p.add_argument(
        "--api.token-file",
        dest="token_file",
        type=token_file,
        metavar="FILE",
        help="bearer token that POST /api/v1/alerts and /api/v1/breaker/reset require; "
        "an empty file is refused",
    )
    p.add_argument(
        "--api.basic-auth-file",
        dest="basic_auth_file",
        type=basic_auth_file,
        metavar="FILE",
        help="user:password that the same endpoints accept as basic auth",
    )
    p.add_argument(
        "--api.allow-unauthenticated",
        dest="allow_unauthenticated",
        action="store_true",
        help="serve the Alertmanager webhook without auth on a non-loopback address "
        "(refused otherwise; a warning at every start)",
    )
    _add_connection_arguments(p)
    alerts = p.add_argument_group("alertmanager webhook")
    alerts.add_argument(
        "--alerts.ttl",
        dest="alerts_ttl",
        type=duration,
        default=DEFAULT_TTL,
        metavar="DURATION",
        help="drop a firing alert that Alertmanager has not re-sent for this long (its "
        "resolve was lost); keep it above Alertmanager's repeat_interval (default 12h: "
        "three of Alertmanager's default 4h)",
    )
    alerts.add_argument(
        "--alerts.limit",
        dest="alerts_limit",
        type=_alert_limit,
        default=DEFAULT_LIMIT,
        metavar="N",
        help="most firing alerts held; new ones beyond it are dropped and counted "
        "(default %(default)s)",
    )
    alerts.add_argument(
        "--alerts.body-size-limit",
        dest="alerts_body_size_limit",
        type=byte_size,
        default=MAX_BODY,
        metavar="SIZE",
        help="largest webhook body read (sizes as 512KiB, 4MiB, or bytes); a larger one "
        "gets 413. Alertmanager sends a group's alerts in one body (default 4MiB)",
    )
    kube = p.add_argument_group("kubernetes")
    kube.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig to use; default: the pod's service account in a cluster, else "
        "$KUBECONFIG, else ~/.kube/config. Without any, only --dry-run runs (decisions "
        "are then recorded, not acted on)",
    )
    kube.add_argument(
        "--controller-name",
        dest="controller_name",
        default="accel-autoscaler",
        metavar="NAME",
        help=f"owner recorded in the {REMEDIATION_ANNOTATION} node annotation; every "
        "replica of one controller uses the same name (default %(default)s)",
    )
    kube.add_argument(
        "--eviction.retry-interval",
        dest="retry_interval",
        type=duration,
        default=5.0,
        metavar="DURATION",
        help="wait between eviction attempts that a PodDisruptionBudget refused (default 5s)",
    )
    kube.add_argument(
        "--pool-provider",
        dest="pool_provider",
        choices=("none", "clusterapi"),
        default="none",
        help="where scale_node_pool resizes node pools (default %(default)s)",
    )
    kube.add_argument(
        "--clusterapi.namespace",
        dest="clusterapi_namespace",
        default="default",
        metavar="NS",
        help="namespace of the MachineDeployments that are node pools (default %(default)s)",
    )
    le = p.add_argument_group("leader election")
    le.add_argument(
        "--leader-elect",
        dest="leader_elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="only the replica holding a coordination.k8s.io Lease acts (default on; "
        "off in --dry-run, which changes nothing)",
    )
    le.add_argument(
        "--leader-elect.namespace",
        dest="lease_namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        metavar="NS",
        help="the Lease's namespace, and the state record's (the ConfigMap "
        "<controller-name>-state; default $POD_NAMESPACE, else default)",
    )
    le.add_argument(
        "--leader-elect.lease-name",
        dest="lease_name",
        default="accel-autoscaler",
        metavar="NAME",
        help="(default %(default)s)",
    )
    le.add_argument(
        "--leader-elect.lease-duration",
        dest="lease_duration",
        type=duration,
        default=15.0,
        metavar="DURATION",
        help="how long a standby waits, on its own clock, after it last saw the Lease renewed "
        "before taking over (default 15s)",
    )
    le.add_argument(
        "--leader-elect.renew-deadline",
        dest="renew_deadline",
        type=duration,
        default=10.0,
        metavar="DURATION",
        help="a leader that has not renewed for this long stops acting (default 10s)",
    )
    le.add_argument(
        "--leader-elect.retry-period",
        dest="retry_period",
        type=duration,
        default=2.0,
        metavar="DURATION",
        help="how often to renew or try to acquire (default 2s)",
    )
    le.add_argument(
        "--leader-elect.identity",
        dest="identity",
        default=os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
        metavar="ID",
        help="this replica's name in the Lease (default $POD_NAME, else host-pid)",
    )
    logs.add_arguments(p.add_argument_group("output"))


def _fail(message: str) -> int:
    print(f"accel-autoscaler: error: {message}", flush=True, file=sys.stderr)
    return 2


def is_loopback(host: str | None) -> bool:
    """Whether only this machine can reach ``host``: ``localhost``, 127.0.0.0/8 or
    ::1. None (``:PORT``, every interface), ``0.0.0.0``, ``::`` and any other name
    or address are reachable from elsewhere."""
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_problem(args: argparse.Namespace) -> str | None:
    """Why the API must not start as asked: the webhook would take alerts (which
    make the controller cordon and drain) from anyone who can reach a non-loopback
    address. None when auth is configured, the address is loopback, or the operator
    accepted the risk with --api.allow-unauthenticated."""
    if args.token_file is not None or args.basic_auth_file is not None:
        return None
    host, port = split_listen_address(args.listen_address)
    if is_loopback(host) or args.allow_unauthenticated:
        return None
    return (
        f"--web.listen-address {args.listen_address} is reachable from other machines and "
        "no auth is configured: anyone who reaches it could post alerts to "
        "POST /api/v1/alerts. Give --api.token-file or --api.basic-auth-file, or listen "
        f"on loopback only (--web.listen-address 127.0.0.1:{port}), or pass "
        "--api.allow-unauthenticated to serve it without auth anyway"
    )


def _source_location(args: argparse.Namespace) -> str:
    """Where the source reads, for the start log, with any password masked."""
    if args.source == "prometheus" and args.prometheus_url:
        return f" at {redact(args.prometheus_url)}"
    if args.source == "scrape" and args.targets:
        count = len(parse_targets(args.targets))
        return f" of {count} target{'' if count == 1 else 's'}"
    return ""


async def _serve(
    controller: Controller, args: argparse.Namespace, elector: LeaderElector | None = None
) -> int:
    host, port = split_listen_address(args.listen_address)
    try:
        app = make_app(
            controller,
            token_file=args.token_file,
            basic_auth_file=args.basic_auth_file,
            max_body=args.alerts_body_size_limit,
        )
    except SecretError as e:  # the file changed since the flags were checked
        log.error("%s", e)
        return 2
    if args.token_file is None and args.basic_auth_file is None:
        if args.allow_unauthenticated:
            log.warning(
                "--api.allow-unauthenticated: POST /api/v1/alerts takes alerts from anyone "
                "who reaches %s, with no auth; give --api.token-file or --api.basic-auth-file",
                args.listen_address,
            )
        else:
            log.info("no API auth: the webhook answers on loopback (%s) only", host)
    try:
        listener = await Listener.start(app, host, port, limits=_connection_limits(args))
    except ListenError as e:
        log.error("%s", e)
        return 1
    loop = asyncio.get_running_loop()
    # SIGHUP reloads the rules in a worker thread and then runs a cycle; the
    # handler itself only sets an event.
    loop.add_signal_handler(signal.SIGHUP, controller.request_reload)
    log.info(
        "listening on http://%s:%d, source %s%s, %d rules, every %gs%s",
        host or "0.0.0.0",
        port,
        controller.source.name,
        _source_location(args),
        len(controller.ruleset.rules),
        controller.interval(),
        ", dry-run" if controller.dry_run else "",
    )
    tasks = [asyncio.create_task(controller.run_forever())]
    executor = controller.executor
    election: ElectionThread | None = None
    if elector is not None and executor is not None:
        election = await _elect(controller, executor, elector)
    elif executor is not None:
        await controller.restore()
    await listener.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if election is not None:
        # Steps down and clears the Lease, so that a standby takes over at once.
        await election.stop(timeout=5)
    if executor is not None:
        await executor.stop()
    await controller.source.close()
    await listener.close()
    return 0


async def _elect(
    controller: Controller, executor: Executor, elector: LeaderElector
) -> ElectionThread:
    """Leader election started: this replica acts (and labels its pod) only while
    it holds the Lease, and drops what it received when it steps down."""

    async def lead() -> None:
        # Rebuild from the cluster what the last leader did, and resume its
        # in-flight work, before acting (the cycle waits for this too).
        await controller.restore()
        await asyncio.Event().wait()  # leads until the elector cancels it

    label = LeaderLabel(executor.ctx.kube)
    # A container restarted after a crash may find its pod still labelled.
    await label.set(False)

    async def step_down() -> None:
        # What this replica received is stale by the time it leads again (it
        # refuses the webhook while standing by): drop it now.
        controller.alerts.clear()
        controller.stand_down()
        await executor.stop()
        await label.set(False)

    async def lead_and_label() -> None:
        await label.set(True)
        await lead()

    # Renewals in a thread of their own: no request on this loop can starve them.
    election = ElectionThread(elector)
    election.start(lead_and_label, step_down)
    return election


def _connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    """The flags' connection bounds, the cap lowered to what the descriptor limit
    (raised to the hard one first) leaves."""
    raise_fd_limit()
    limits = fd_headroom(
        ConnectionLimits(
            header_timeout=args.header_timeout,
            idle_timeout=args.idle_timeout,
            max_connections=args.max_connections,
        )
    )
    if limits.max_connections < args.max_connections:
        log.info(
            "--web.max-connections lowered to %d: the file descriptor limit leaves no room "
            "for more",
            limits.max_connections,
        )
    return limits


def _leader_problem(args: argparse.Namespace) -> str | None:
    if not args.renew_deadline < args.lease_duration:
        return (
            "--leader-elect.renew-deadline must be shorter than --leader-elect.lease-duration "
            "(a leader must give up before a standby may take over)"
        )
    if not args.retry_period < args.renew_deadline:
        return "--leader-elect.retry-period must be shorter than --leader-elect.renew-deadline"
    return None


@dataclass(frozen=True)
class KubeHandles:
    """The Kubernetes API twice: as the informers watch it (``client``: watches
    cannot go through a dry-run wrapper) and as the actions call it (``acting``:
    the client, or in ``--dry-run`` a ``DryRunKube`` in front of it)."""

    client: ClientKube
    acting: Kube


def build_kube(args: argparse.Namespace) -> KubeHandles | None:
    """The API handles; in ``--dry-run`` the actions' goes through a DryRunKube in
    front of a client that sends its writes with dryRun=All. None when there is no
    configuration and ``--dry-run`` allows running without one."""
    try:
        client = ClientKube.from_config(args.kubeconfig, dry_run=args.dry_run)
    except KubeConfigError as e:
        if args.dry_run and not args.kubeconfig:
            log.warning("no Kubernetes API configured (%s): dry-run only records decisions", e)
            return None
        raise ValueError(str(e)) from e
    return KubeHandles(client, DryRunKube(client) if args.dry_run else client)


def main(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    # A SIGHUP before the loop's handler is installed (a reload sent while the
    # controller starts) must not kill it: the files are watched anyway.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if problem := _leader_problem(args):
        return _fail(problem)
    try:
        watcher = RuleWatcher(args.rules, source=args.source)
    except RuleSetError as e:
        print(str(e), file=sys.stderr)
        return _fail(f"the rules did not load ({count_text(len(e.problems), 'problem')} above)")
    try:
        source = build_source(source_options(args))
        # Before anything connects or listens: a refused start has done nothing.
        if problem := exposure_problem(args):
            return _fail(problem)
        handles = build_kube(args)
    except (ValueError, OSError) as e:
        return _fail(redact(str(e)))
    return asyncio.run(_main(args, watcher, source, handles))


async def _main(
    args: argparse.Namespace, watcher: RuleWatcher, source: Source, handles: KubeHandles | None
) -> int:
    alerts = AlertReceiver(ttl=args.alerts_ttl, limit=args.alerts_limit)
    if handles is None:
        # --dry-run with no API: decisions are recorded, not acted on.
        return await _serve(Controller(watcher, source, alerts, dry_run=args.dry_run), args)
    kube = handles.acting
    pools: NodePoolProvider | None = None
    if args.pool_provider == "clusterapi":
        pools = ClusterAPIProvider(kube, args.clusterapi_namespace)
    elector = _elector(args, kube)
    leading = elector.is_leader if elector is not None else always_leading
    ctx = ActionContext(
        kube=kube,
        controller=args.controller_name,
        replica=args.identity,
        dry_run=args.dry_run,
        pools=pools,
        query=source.query,
        retry_interval=args.retry_interval,
        leading=leading,
    )
    # The cluster-state series (and the nodes the controller reads each cycle) come
    # from watched nodes and pods; actions read the API itself.
    cached = CachedKube(handles.client, inner=kube)
    cached.start()
    try:
        await cached.wait_synced(10.0)

        async def read_cluster(now: float) -> ClusterRows:
            return list(await collect(cached, pools, now))

        controller = Controller(
            watcher,
            source,
            alerts,
            dry_run=args.dry_run,
            wiring=wire(source, lambda: watcher.current, ctx),
            kube=cached,
            leading=leading,
            cluster_state=read_cluster,
            # What the engine must not forget on a restart or a failover and that
            # no node records (engine/restore.py), in the controller's namespace.
            # ($POD_NAMESPACE may be set and empty outside a pod.)
            record=StateRecord(
                kube,
                args.lease_namespace or "default",
                args.controller_name + STATE_CONFIGMAP_SUFFIX,
            ),
            lost_watches=cached.lost,
            # ProvisioningRequests of accel-fleet.io/atomic-scale-up (docs/kueue.md).
            provisioner=Provisioner(kube, pools, controller=args.controller_name)
            if isinstance(pools, ClusterAPIProvider)
            else None,
        )
        return await _serve(controller, args, elector)
    finally:
        await asyncio.to_thread(cached.stop)


def _elector(args: argparse.Namespace, kube: Kube) -> LeaderElector | None:
    """The Lease elector; None when every replica acts (no election, or --dry-run,
    which changes nothing)."""
    if not args.leader_elect or args.dry_run:
        return None
    return LeaderElector(
        kube,
        namespace=args.lease_namespace,
        name=args.lease_name,
        identity=args.identity,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
