"""``accel-autoscaler run``: the evaluation loop and its HTTP API.

Once per ``evaluationInterval`` the controller picks up changed rule files, reads
the cluster's state from the API (job ages and timeouts, node pools) into series,
asks its source whether it has data at all, queries every rule (and its
``recover`` expression), and hands the results to the engine's pure ``evaluate``.
Decisions are logged, counted and kept (the last 1,000) for the API, and handed to
the executor (autoscaler/executor.py), which carries them out through the ``Kube``
wrapper without holding up the next cycle.

Only the replica that holds the Lease evaluates and acts; the others wait. With no
Kubernetes API configured (``--dry-run`` only) decisions are recorded, not acted
on, and the log says so.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from accel_common import logs
from autoscaler.cliargs import add_source_arguments, duration, existing_file
from autoscaler.engine.decision import Decision
from autoscaler.engine.evaluate import evaluate
from autoscaler.engine.state import ClusterInfo, EngineState
from autoscaler.executor import Executor
from autoscaler.ruleset.loader import RuleSetError
from autoscaler.ruleset.model import RuleSet
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.base import Source
from autoscaler.types import QueryResult, Unknown, Vector

log = logging.getLogger("accel_autoscaler")

DEFAULT_PORT = 9836
# The nodes the breaker counts, from the exporters' own series.
NODES_QUERY = "count by (node) (accel_up)"


@dataclass
class CycleStats:
    cycles: int = 0
    last_duration: float = 0.0
    last_timestamp: float = 0.0
    decisions: Counter[tuple[str, str, str, bool]] = field(default_factory=Counter)
    unknown: Counter[str] = field(default_factory=Counter)
    skipped_source_down: int = 0
    # Cycles skipped because another replica holds the Lease.
    standby: int = 0
    cluster_state_errors: int = 0


# The cluster-state series as (metric, labels, value) rows (autoscaler/clusterstate.py).
ClusterRows = list[tuple[Any, dict[str, str], float]]
ClusterState = Callable[[float], Awaitable[ClusterRows]]


def _always() -> bool:
    return True


class Controller:
    def __init__(
        self,
        watcher: RuleWatcher,
        source: Source,
        alerts: AlertReceiver,
        *,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        executor: Executor | None = None,
        leading: Callable[[], bool] = _always,
        cluster_state: ClusterState | None = None,
    ) -> None:
        self.watcher = watcher
        self.source = source
        self.alerts = alerts
        self.dry_run = dry_run
        self.clock = clock
        self.executor = executor
        self.leading = leading
        self.cluster_state = cluster_state
        self.cluster_rows: ClusterRows = []
        self.cluster_nodes: dict[str, float] = {}
        # (node, rule, action, phase) of this controller's remediation entries.
        self.remediations: list[tuple[str, str, str, str]] = []
        self.kube: Any = executor.ctx.kube if executor is not None else None
        self.state = EngineState()
        self.stats = CycleStats()
        self.source_up = False
        self.lock = asyncio.Lock()

    @property
    def ruleset(self) -> RuleSet:
        return self.watcher.current

    def _retain(self) -> None:
        retain = getattr(self.source, "retain", None)
        if retain is not None:
            exprs = [NODES_QUERY]
            for r in self.ruleset.rules:
                exprs += [e for e in (r.expr, r.recover.expr if r.recover else None) if e]
            retain(exprs)

    async def _cluster(self, now: float) -> ClusterInfo | None:
        result = await self.source.query(NODES_QUERY, now)
        if not isinstance(result, Vector):
            return None
        nodes = frozenset(s.get("node") for s in result.samples if s.get("node"))
        # Nodes that registered recently (a scale-up's) are in their grace period.
        recent = {n: t for n, t in self.cluster_nodes.items() if now - t < 3600}
        return ClusterInfo(nodes=nodes, recently_added=recent)

    async def _read_nodes(self) -> None:
        """The remediation entries and registration times of the nodes, for
        ``/metrics`` and the breaker's scale-up grace."""
        if self.kube is None or self.executor is None:
            return
        from autoscaler.actions.ownership import entries, parse_iso

        try:
            nodes = await self.kube.list_nodes()
        except Exception as e:  # the API server may be down; the cycle goes on
            self.stats.cluster_state_errors += 1
            log.warning("cannot list nodes: %s", e)
            return
        controller = self.executor.ctx.controller
        remediations: list[tuple[str, str, str, str]] = []
        registered: dict[str, float] = {}
        for n in nodes:
            meta = n.get("metadata") or {}
            name = str(meta.get("name", ""))
            for rule, entry in entries(n).items():
                if entry.controller == controller:
                    remediations.append((name, rule, entry.action, entry.phase))
            try:
                registered[name] = parse_iso(str(meta.get("creationTimestamp", "")))
            except ValueError:
                continue
        self.remediations = remediations
        self.cluster_nodes = registered

    async def _read_cluster(self, now: float) -> None:
        """Cluster state into series, before the rules are queried. A failure keeps
        the last rows out of the evaluator (their series go stale, so rules on
        them read unknown) and is counted, never fatal."""
        if self.cluster_state is None:
            return
        try:
            self.cluster_rows = await self.cluster_state(now)
        except Exception as e:  # the API server may be down; the cycle goes on
            self.stats.cluster_state_errors += 1
            self.cluster_rows = []
            log.warning("cannot read the cluster state: %s", e)
            return
        store = getattr(self.source, "store", None)
        if store is not None:
            from autoscaler.clusterstate import ingest

            ingest(store, self.cluster_rows, now)

    async def cycle(self) -> list[Decision]:
        """One evaluation. The lock keeps an API call (breaker reset) and the loop
        from interleaving on the engine state."""
        async with self.lock:
            if not self.leading():
                if self.stats.standby == 0:
                    log.info("standing by: another replica holds the leader lease")
                self.stats.standby += 1
                return []
            start = time.perf_counter()
            if self.watcher.check() or self.stats.cycles == 0:
                self._retain()
            ruleset = self.ruleset
            now = self.clock()
            self.source_up = await self.source.refresh(now)
            await self._read_nodes()
            await self._read_cluster(now)
            results: dict[str, QueryResult] = {}
            recover: dict[str, QueryResult] = {}
            cluster = await self._cluster(now) if self.source_up else None
            for rule in ruleset.rules:
                if rule.alertname is not None:
                    results[rule.name] = self.alerts.vector(rule.alertname, now)
                elif not self.source_up:
                    results[rule.name] = Unknown(f"source {self.source.name} is down")
                else:
                    assert rule.expr is not None
                    results[rule.name] = await self.source.query(rule.expr, now)
                if rule.recover is not None:
                    recover[rule.name] = (
                        await self.source.query(rule.recover.expr, now)
                        if self.source_up
                        else Unknown(f"source {self.source.name} is down")
                    )
            if not self.source_up:
                self.stats.skipped_source_down += 1
            for name, result in results.items():
                if isinstance(result, Unknown):
                    self.stats.unknown[name] += 1
            decisions = evaluate(
                ruleset,
                results,
                self.state,
                now,
                recover_results=recover,
                cluster=cluster,
                dry_run=self.dry_run,
            )
            self.state.record(decisions)
            for d in decisions:
                self.stats.decisions[(d.rule, d.action, d.kind, d.dry_run)] += 1
                log.info(
                    "decision %s: rule=%s action=%s target=%s value=%g%s%s",
                    d.kind,
                    d.rule,
                    d.action,
                    dict(d.target),
                    d.sample_value,
                    " dry-run" if d.dry_run else "",
                    "" if self.executor else " (recorded only: no Kubernetes API configured)",
                )
                if self.executor is not None:
                    self.executor.submit(d)
            self.stats.cycles += 1
            self.stats.last_duration = time.perf_counter() - start
            self.stats.last_timestamp = now
            return decisions

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must outlive any one bad cycle
                log.exception("evaluation cycle failed")
            interval = self.ruleset.evaluation_interval
            await asyncio.sleep(max(0.0, interval - (loop.time() - started)))


def add_run_arguments(p: argparse.ArgumentParser) -> None:
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
        type=existing_file,
        metavar="FILE",
        help="bearer token that POST /api/v1/alerts and /api/v1/breaker/reset require",
    )
    p.add_argument(
        "--api.basic-auth-file",
        dest="basic_auth_file",
        type=existing_file,
        metavar="FILE",
        help="user:password that the same endpoints accept as basic auth",
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
        help="owner recorded in the accel-fleet.io/remediation node annotation; every "
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
        help="the Lease's namespace (default $POD_NAMESPACE, else default)",
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
        help="how long a standby waits after the last renewal before taking over (default 15s)",
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


def build_source(args: argparse.Namespace) -> Source:
    if args.source == "prometheus":
        from autoscaler.sources.prometheus import PrometheusConfig, PrometheusSource

        if not args.prometheus_url:
            raise ValueError("--source prometheus needs --prometheus.url")
        return PrometheusSource(
            PrometheusConfig(
                url=args.prometheus_url,
                timeout=args.prometheus_timeout,
                bearer_token_file=args.prometheus_token_file,
                basic_auth_file=args.prometheus_basic_auth_file,
                ca_file=args.prometheus_ca_file,
                health_query=args.health_query,
            )
        )
    from autoscaler.sources.scrape import ScrapeSource, parse_targets

    if not args.targets:
        raise ValueError("--source scrape needs --targets NODE=URL,...")
    return ScrapeSource(parse_targets(args.targets), timeout=args.scrape_timeout)


async def _serve(controller: Controller, args: argparse.Namespace, elector: Any = None) -> int:
    from autoscaler.server import make_app, split_listen_address

    host, port = split_listen_address(args.listen_address)
    app = make_app(controller, token_file=args.token_file, basic_auth_file=args.basic_auth_file)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        log.error("cannot listen on %s: %s", args.listen_address, e.strerror or e)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, controller.watcher.reload)
    log.info(
        "listening on http://%s:%d, source %s, %d rules, every %gs%s",
        host or "0.0.0.0",
        port,
        controller.source.name,
        len(controller.ruleset.rules),
        controller.ruleset.evaluation_interval,
        ", dry-run" if controller.dry_run else "",
    )
    tasks = [asyncio.create_task(controller.run_forever())]
    executor = controller.executor
    election: asyncio.Task[None] | None = None
    if elector is not None and executor is not None:

        async def lead() -> None:
            await executor.resume()
            await asyncio.Event().wait()  # leads until the elector cancels it

        label = LeaderLabel(executor.ctx.kube)
        # A container restarted after a crash may find its pod still labelled.
        await label.set(False)

        async def step_down() -> None:
            await executor.stop()
            await label.set(False)

        async def lead_and_label() -> None:
            await label.set(True)
            await lead()

        election = asyncio.create_task(elector.run(lead_and_label, step_down))
    elif executor is not None:
        await executor.resume()
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if election is not None:
        elector.stop()  # steps down and clears the Lease, so a standby takes over at once
        try:
            await asyncio.wait_for(election, timeout=5)
        except (TimeoutError, Exception) as e:
            log.warning("leader election did not stop cleanly: %s", e)
    if executor is not None:
        await executor.stop()
    await controller.source.close()
    await runner.cleanup()
    return 0


# On the leader's own pod: the webhook Service selects it, so Alertmanager's
# notifications reach the replica that acts (deploy/base/autoscaler.yaml).
LEADER_LABEL = "accel-fleet.io/leader"


class LeaderLabel:
    """Puts ``accel-fleet.io/leader: "true"`` on this replica's pod while it leads
    (``$POD_NAMESPACE``/``$POD_NAME`` from the downward API); without them, outside a
    pod, it does nothing. A failure is logged: the standby also answers the webhook
    with 503, so Alertmanager retries until it reaches the leader."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube
        self.namespace = os.environ.get("POD_NAMESPACE", "")
        self.name = os.environ.get("POD_NAME", "")

    async def set(self, leading: bool) -> None:
        if not (self.namespace and self.name):
            return
        value = "true" if leading else None
        try:
            await self.kube.patch_pod(
                self.namespace, self.name, {"metadata": {"labels": {LEADER_LABEL: value}}}
            )
        except Exception as e:  # the API server may be down; the 503 still routes alerts
            log.warning(
                "cannot %s the leader label on my pod: %s", "set" if leading else "remove", e
            )


def _leader_problem(args: argparse.Namespace) -> str | None:
    if not args.renew_deadline < args.lease_duration:
        return (
            "--leader-elect.renew-deadline must be shorter than --leader-elect.lease-duration "
            "(a leader must give up before a standby may take over)"
        )
    if not args.retry_period < args.renew_deadline:
        return "--leader-elect.retry-period must be shorter than --leader-elect.renew-deadline"
    return None


def build_kube(args: argparse.Namespace) -> Any:
    """The ``Kube`` the actions use: the client, or in ``--dry-run`` a DryRunKube in
    front of a client that sends its writes with dryRun=All. None when there is no
    configuration and ``--dry-run`` allows running without one."""
    from autoscaler.kube.client import ClientKube, DryRunKube, KubeConfigError

    try:
        client = ClientKube.from_config(args.kubeconfig, dry_run=args.dry_run)
    except KubeConfigError as e:
        if args.dry_run and not args.kubeconfig:
            log.warning("no Kubernetes API configured (%s): dry-run only records decisions", e)
            return None
        raise ValueError(str(e)) from e
    return DryRunKube(client) if args.dry_run else client


def run_main(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    if problem := _leader_problem(args):
        return _fail(problem)
    try:
        watcher = RuleWatcher(args.rules, source=args.source)
    except RuleSetError as e:
        print(str(e), file=sys.stderr)
        return _fail(f"the rules did not load ({len(e.problems)} problems above)")
    try:
        source = build_source(args)
        kube = build_kube(args)
    except (ValueError, OSError) as e:
        return _fail(str(e))
    return asyncio.run(_main(args, watcher, source, kube))


async def _main(args: argparse.Namespace, watcher: RuleWatcher, source: Source, kube: Any) -> int:
    from autoscaler.actions.context import ActionContext

    executor: Executor | None = None
    elector: Any = None
    leading: Callable[[], bool] = _always
    cluster_state: ClusterState | None = None
    if kube is not None:
        pools: Any = None
        if args.pool_provider == "clusterapi":
            from autoscaler.pools.clusterapi import ClusterAPIProvider

            pools = ClusterAPIProvider(kube, args.clusterapi_namespace)
        if args.leader_elect and not args.dry_run:
            from autoscaler.kube.leader import LeaderElector

            elector = LeaderElector(
                kube,
                namespace=args.lease_namespace,
                name=args.lease_name,
                identity=args.identity,
                lease_duration=args.lease_duration,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
            )
            leading = elector.is_leader
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
        executor = Executor(ctx)

        from autoscaler.clusterstate import collect
        from autoscaler.kube.cache import CachedKube

        # The cluster-state series come from watched nodes and pods; actions read
        # the API itself.
        cached = CachedKube(getattr(kube, "inner", kube), inner=kube)
        cached.start()
        await cached.wait_synced(10.0)

        async def read_cluster(now: float) -> ClusterRows:
            return list(await collect(cached, pools, now))

        cluster_state = read_cluster
    controller = Controller(
        watcher,
        source,
        AlertReceiver(),
        dry_run=args.dry_run,
        executor=executor,
        leading=leading,
        cluster_state=cluster_state,
    )
    if cluster_state is not None:
        controller.kube = cached
    try:
        return await _serve(controller, args, elector)
    finally:
        if cluster_state is not None:
            await asyncio.to_thread(cached.stop)
