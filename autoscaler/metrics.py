"""The controller's metric catalogue: its own series (``accel_autoscaler_*``) and the
cluster-state series (``accel_job_*``, ``accel_gang_*``, ``accel_pool_*``), each
declared once with its type, HELP and labels, and the status snapshot that
``/metrics`` renders through ``prometheus-client`` (``accel_common/ownmetrics.py``).

Why a snapshot: ``/metrics`` used to read a dozen controller attributes while it
wrote, and expired alerts on the way (so a scrape changed what the next cycle
saw). Now ``server.py`` copies what the series need into one frozen
``ControllerStatus`` and this module turns it into families; nothing here can
change the controller, and every sample of one scrape comes from one instant.

This module sits low in the layers (below ``clusterstate``, which reads its
cluster-state entries, and above the sources and pools): it knows the shape of
the controller's numbers, never the controller. The rule checker
(``ruleset/loader.py``) knows the cluster-state names from ``CLUSTER``, through
``clusterstate.CATALOGUE``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from accel_common.names import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    GANG_LABEL,
    LAST_CHECKPOINT_ANNOTATION,
    PROVISIONING_CLASS,
    REMEDIATION_ANNOTATION,
    TIMEOUT_ANNOTATION,
)
from accel_common.ownmetrics import (
    Families,
    Metric,
    Sample,
    check_catalogue,
    render_snapshot,
)

# The cluster-state entries keep the name they had in clusterstate.py.
ClusterMetric = Metric


def _gauge(name: str, help_: str, *labels: str) -> Metric:
    return Metric(name, "gauge", help_, labels)


def _counter(name: str, help_: str, *labels: str) -> Metric:
    return Metric(name, "counter", help_, labels)


# -- the controller's own series, in the order /metrics lists them

DECISIONS = _counter(
    "accel_autoscaler_decisions_total",
    "Decisions made, by rule, action, kind (act, recover) and dry-run.",
    *("rule", "action", "kind", "dry_run"),
)
RULE_UNKNOWN = _counter(
    "accel_autoscaler_rule_unknown_total",
    "Evaluations whose result was unknown (failed, timed out or empty), by rule.",
    "rule",
)
EVALUATION_DURATION = _gauge(
    "accel_autoscaler_evaluation_duration_seconds", "How long the last evaluation cycle took."
)
LAST_EVALUATION = _gauge(
    "accel_autoscaler_last_evaluation_timestamp_seconds", "Unix time of the last evaluation cycle."
)
SOURCE_UP = _gauge(
    "accel_autoscaler_source_up",
    "Whether the source answered with data in the last cycle.",
    "source",
)
BREAKER_OPEN = _gauge(
    "accel_autoscaler_breaker_open", "Whether the circuit breaker stopped new remediation (1)."
)
RELOAD_SUCCESS = _gauge(
    "accel_autoscaler_rules_reload_success",
    "Whether the last rules (re)load succeeded; on 0 the last good rules still run.",
)
RULES = _gauge("accel_autoscaler_rules", "Rules loaded.")
PENDING_TARGETS = _gauge(
    "accel_autoscaler_pending_targets",
    "Targets whose rule condition holds but whose 'for' has not yet passed, by rule.",
    "rule",
)
ACTIVE_TARGETS = _gauge(
    "accel_autoscaler_active_targets", "Targets under remediation by a rule, by rule.", "rule"
)
ACTIONS = _counter(
    "accel_autoscaler_actions_total",
    "Actions carried out, by rule, action and outcome status (done, partial, skipped, "
    "failed, unknown).",
    *("rule", "action", "status"),
)
ACTIONS_IN_FLIGHT = _gauge(
    "accel_autoscaler_actions_in_flight",
    "Actions running now (a drain waiting on a PodDisruptionBudget counts).",
)
NODES_UNDER_REMEDIATION = _gauge(
    "accel_autoscaler_nodes_under_remediation",
    f"Nodes carrying an {REMEDIATION_ANNOTATION} entry of this controller, by rule, "
    "action and phase; always 1.",
    *("node", "rule", "action", "phase"),
)
LEADER = _gauge(
    "accel_autoscaler_leader",
    "Whether this replica holds the leader Lease and acts (1) or stands by (0).",
)
CLUSTER_STATE_ERRORS = _counter(
    "accel_autoscaler_cluster_state_errors_total",
    "Cycles in which the cluster state could not be read from the API server.",
)
UNRESTORED_CYCLES = _counter(
    "accel_autoscaler_unrestored_cycles_total",
    "Cycles skipped because the state could not yet be rebuilt from the cluster "
    "(node ownership entries and the state ConfigMap): nothing acts from memory alone.",
)
STATE_RECORD_ERRORS = _counter(
    "accel_autoscaler_state_record_errors_total",
    "Failed reads and writes of the controller's state ConfigMap.",
)
STATE_RECORD_REFUSED = _counter(
    "accel_autoscaler_state_record_refused_total",
    "State record entries refused when read (not bounded, not finite, out of range) "
    "and dropped: never written back.",
)
PROVISIONING = _counter(
    "accel_autoscaler_provisioning_total",
    f"ProvisioningRequests of {PROVISIONING_CLASS} (autoscaler/provisioning.py), "
    "by outcome: scale_up (a gang's nodes asked for at once), skipped (a request or "
    "booking record that is not what its API says), error (an API error or refusal "
    "stopped a step; the next cycle resumes it).",
    "outcome",
)
PROVISIONING_OUTCOMES = ("error", "scale_up", "skipped")
FAILED_CYCLES = _counter(
    "accel_autoscaler_failed_cycles_total",
    "Evaluation cycles that failed: an exception, or the state not rebuilt from the "
    "cluster. Three in a row turn /healthz red.",
)
HEALTHY = _gauge(
    "accel_autoscaler_healthy",
    "1 while /healthz answers ok; 0 while it answers 503 (failed cycles or state "
    "record writes in a row, a lost watch).",
)
WATCH_FAILURES = _counter(
    "accel_autoscaler_watch_failures_total",
    "Failed list or watch attempts of the cluster-state informers, by resource.",
    "resource",
)
KUBE_REQUESTS = _counter(
    "accel_autoscaler_kube_requests_total",
    "Kubernetes API requests by verb, resource and HTTP status (0: no answer).",
    *("verb", "resource", "code"),
)
ALERTS_FIRING = _gauge(
    "accel_autoscaler_alerts_firing",
    "Alertmanager alerts currently firing, as received on the webhook.",
)
ALERTS_DROPPED = _counter(
    "accel_autoscaler_alerts_dropped_total",
    "Alerts dropped by the webhook receiver, by reason: expired (not re-sent within "
    "--alerts.ttl), limit (--alerts.limit held already), oversize (more labels or "
    "label bytes than any real alert), standby (this replica stood down), stale (a "
    "replay of a resolved or earlier incident).",
    "reason",
)

CONTROLLER: tuple[Metric, ...] = check_catalogue(
    (
        DECISIONS,
        RULE_UNKNOWN,
        EVALUATION_DURATION,
        LAST_EVALUATION,
        SOURCE_UP,
        BREAKER_OPEN,
        RELOAD_SUCCESS,
        RULES,
        PENDING_TARGETS,
        ACTIVE_TARGETS,
        ACTIONS,
        ACTIONS_IN_FLIGHT,
        NODES_UNDER_REMEDIATION,
        LEADER,
        CLUSTER_STATE_ERRORS,
        UNRESTORED_CYCLES,
        STATE_RECORD_ERRORS,
        STATE_RECORD_REFUSED,
        FAILED_CYCLES,
        HEALTHY,
        WATCH_FAILURES,
        KUBE_REQUESTS,
        ALERTS_FIRING,
        ALERTS_DROPPED,
        PROVISIONING,
    )
)

# -- the cluster-state series (what they mean: clusterstate.py's docstring)

JOB_AGE = _gauge(
    "accel_job_age_seconds",
    "Seconds since a device-using pod started running.",
    *("namespace", "pod", "node", "job"),
)
JOB_TIMEOUT = _gauge(
    "accel_job_timeout_seconds",
    f"The pod's run-time limit from its {TIMEOUT_ANNOTATION} annotation, else its "
    "Job's activeDeadlineSeconds.",
    *("namespace", "pod", "node", "job"),
)
GANG_INFO = _gauge(
    "accel_gang_info",
    "A running device-using pod that belongs to a gang (JobSet, TrainJob, PyTorchJob, "
    f"MPIJob, Volcano Job, or the {GANG_LABEL} label); always 1.",
    *("namespace", "pod", "node", "gang", "kind"),
)
GANG_CHECKPOINT_PAUSE = _gauge(
    "accel_gang_checkpoint_pause_seconds",
    f"The longest checkpoint pause ({CHECKPOINT_PAUSE_ANNOTATION}) a running member "
    "of the gang declares.",
    *("namespace", "gang"),
)
JOB_CHECKPOINT_PAUSE = _gauge(
    "accel_job_checkpoint_pause_seconds",
    f"The checkpoint pause a running device-using pod declares ({CHECKPOINT_PAUSE_ANNOTATION}).",
    *("namespace", "pod"),
)
GANG_CHECKPOINT_INTERVAL = _gauge(
    "accel_gang_checkpoint_interval_seconds",
    f"The shortest checkpoint interval ({CHECKPOINT_INTERVAL_ANNOTATION}) a running "
    "member of the gang declares.",
    *("namespace", "gang"),
)
JOB_CHECKPOINT_INTERVAL = _gauge(
    "accel_job_checkpoint_interval_seconds",
    f"The checkpoint interval a running device-using pod declares "
    f"({CHECKPOINT_INTERVAL_ANNOTATION}).",
    *("namespace", "pod"),
)
GANG_LAST_CHECKPOINT = _gauge(
    "accel_gang_last_checkpoint_timestamp_seconds",
    f"The latest last checkpoint ({LAST_CHECKPOINT_ANNOTATION}) over the running "
    "members of the gang, in unix seconds.",
    *("namespace", "gang"),
)
JOB_LAST_CHECKPOINT = _gauge(
    "accel_job_last_checkpoint_timestamp_seconds",
    f"When a running device-using pod last checkpointed ({LAST_CHECKPOINT_ANNOTATION}), "
    "in unix seconds.",
    *("namespace", "pod"),
)
POOL_PENDING = _gauge(
    "accel_pool_pending_device_requests",
    "Devices of one resource requested by unscheduled pods that this node pool can "
    "satisfy; a pod that several pools could satisfy counts once, for the pool with "
    "the most room below its maximum.",
    *("pool", "resource"),
)
POOL_NODES = _gauge(
    "accel_pool_nodes",
    "Nodes in a node pool by state: ready, notready (registered, not Ready), "
    "provisioning (asked for, not registered yet); sum by (pool) for its size.",
    *("pool", "state"),
)
POOL_NODES_MIN = _gauge("accel_pool_nodes_min", "A node pool's minimum size.", "pool")
POOL_NODES_MAX = _gauge("accel_pool_nodes_max", "A node pool's maximum size.", "pool")
POOL_DEVICES_ALLOCATED = _gauge(
    "accel_pool_devices_allocated_ratio",
    "Share of a node pool's devices that pods hold (0-1).",
    "pool",
)
NODE_POOL = _gauge(
    "accel_node_pool_info", "The node pool a node belongs to; always 1.", *("node", "pool")
)
# A job's rhythm, learned from its utilization (autoscaler/rhythm.py): per gang
# (namespace, gang) and per device pod that is no gang member (namespace, pod).
_RHYTHM = (
    ("pauses", "Recovered idle dips (every device idle, then busy again) seen in the last 6h"),
    ("longest_pause_seconds", "The longest recovered idle dip of the last 6h"),
    ("spacing_seconds", "The median time between the starts of consecutive recovered dips"),
    ("last_pause_start_timestamp_seconds", "When the last recovered dip started"),
    ("last_pause_end_timestamp_seconds", "When the last recovered dip ended"),
    ("idle_start_timestamp_seconds", "When the dip in progress started (only during one)"),
    ("watched_seconds", "How long the job's current pods have been followed since first busy"),
    ("last_busy_timestamp_seconds", "When the job's current pods were last seen busy"),
    (
        "io_bytes_per_second",
        "The most that any node of the job moves, network and disk (node_exporter's bytes "
        "over 2m), while it is in a dip",
    ),
    (
        "pause_io_min_bytes_per_second",
        "The least that the job's nodes moved at any look during its recovered dips of "
        "the last 6h (only when every look had a figure)",
    ),
)
# Ordered as ``_RHYTHM``, which is the order ``rhythm.Rhythm.rows`` writes them in.
GANG_RHYTHM: tuple[ClusterMetric, ...] = tuple(
    _gauge(
        f"accel_gang_rhythm_{n}",
        f"{h}, of the gang, as the controller measured it.",
        *("namespace", "gang"),
    )
    for n, h in _RHYTHM
)
JOB_RHYTHM: tuple[ClusterMetric, ...] = tuple(
    _gauge(
        f"accel_job_rhythm_{n}",
        f"{h}, of a pod that is no gang member.",
        *("namespace", "pod"),
    )
    for n, h in _RHYTHM
)
# Kueue's queues (autoscaler/queues.py; only where Kueue is installed).
QUEUE_INFO = _gauge(
    "accel_queue_info",
    "A Kueue ClusterQueue and its cohort (empty when it has none); always 1.",
    *("cluster_queue", "cohort"),
)
QUEUE_NOMINAL_QUOTA = _gauge(
    "accel_queue_nominal_quota",
    "A ClusterQueue's nominal quota of one device resource in one ResourceFlavor.",
    *("cluster_queue", "flavor", "resource"),
)
QUEUE_BORROWING_LIMIT = _gauge(
    "accel_queue_borrowing_limit",
    "How much of one device resource in one flavor a ClusterQueue may borrow from its "
    "cohort beyond its nominal quota (only when the ClusterQueue sets one).",
    *("cluster_queue", "flavor", "resource"),
)
QUEUE_WORKLOADS = _gauge(
    "accel_queue_workloads",
    "Device-using Kueue Workloads by ClusterQueue, flavor and state: pending (no quota "
    "yet; the flavor is the one quota would give), reserved (quota reserved, waiting "
    "for admission checks), admitted.",
    *("cluster_queue", "flavor", "state"),
)
QUEUE_DEVICE_REQUESTS = _gauge(
    "accel_queue_device_requests",
    "Devices of one resource that Kueue Workloads ask for (pods per pod set times each "
    "pod's request), by ClusterQueue, flavor and state.",
    *("cluster_queue", "flavor", "resource", "state"),
)
QUEUE_OLDEST_PENDING = _gauge(
    "accel_queue_oldest_pending_timestamp_seconds",
    "When the longest-waiting pending Workload of a ClusterQueue and flavor began to "
    "wait (its creation, or its last requeue), in Unix seconds; absent with none pending.",
    *("cluster_queue", "flavor"),
)
FLAVOR_POOL = _gauge(
    "accel_flavor_pool_info",
    "A node pool whose nodes (or declared node shape) carry every node label of a "
    "Kueue ResourceFlavor; always 1.",
    *("flavor", "pool"),
)
POOL_QUEUED = _gauge(
    "accel_pool_queued_device_requests",
    "Devices of one resource that suspended Kueue Workloads wait for and that quota "
    "admits (reserved, or pending within the room quota leaves), by the pool of their "
    "flavor; they have no pods yet, so no pending pod counts them.",
    *("pool", "resource"),
)
KUEUE_SKIPPED = _gauge(
    "accel_kueue_objects_skipped",
    "Kueue objects left out of the last read, by kind: malformed, or beyond the read's bound.",
    "kind",
)
NODE_READY = _gauge(
    "accel_node_ready",
    "1 while the node's Ready condition is True, 0 while it is False or Unknown "
    "(the kubelet stopped reporting) or missing.",
    "node",
)

CLUSTER: tuple[Metric, ...] = check_catalogue(
    (
        JOB_AGE,
        JOB_TIMEOUT,
        GANG_INFO,
        GANG_CHECKPOINT_PAUSE,
        JOB_CHECKPOINT_PAUSE,
        GANG_CHECKPOINT_INTERVAL,
        JOB_CHECKPOINT_INTERVAL,
        GANG_LAST_CHECKPOINT,
        JOB_LAST_CHECKPOINT,
        POOL_PENDING,
        POOL_NODES,
        POOL_NODES_MIN,
        POOL_NODES_MAX,
        POOL_DEVICES_ALLOCATED,
        NODE_POOL,
        *GANG_RHYTHM,
        *JOB_RHYTHM,
        NODE_READY,
        QUEUE_INFO,
        QUEUE_NOMINAL_QUOTA,
        QUEUE_BORROWING_LIMIT,
        QUEUE_WORKLOADS,
        QUEUE_DEVICE_REQUESTS,
        QUEUE_OLDEST_PENDING,
        FLAVOR_POOL,
        POOL_QUEUED,
        KUEUE_SKIPPED,
    )
)

# Everything the controller's /metrics may list, in its order: its own series first.
CATALOGUE: tuple[Metric, ...] = check_catalogue(CONTROLLER + CLUSTER)

# A cluster-state series as clusterstate computes it: (metric, labels, value).
Row = tuple[Metric, dict[str, str], float]

Counts = tuple[tuple[tuple[str, ...], int], ...]


@dataclass(frozen=True)
class ControllerStatus:
    """What the controller's series say, copied at one instant (``server.snapshot``).

    Counters keyed by label values (``decisions``, ``outcomes``, ...) are tuples of
    (label values in the catalogue's order, count). ``rules`` are the loaded rules'
    names: the per-rule series have a sample for each, 0 included.
    ``watch_failures`` and ``kube_requests`` are None where the controller has no
    informers or no API client of its own (``--dry-run`` without a cluster)."""

    rules: tuple[str, ...] = ()
    decisions: Counts = ()
    unknown: Mapping[str, int] | None = None
    pending: Mapping[str, int] | None = None
    active: Mapping[str, int] | None = None
    last_duration: float = 0.0
    last_timestamp: float = 0.0
    source: str = ""
    source_up: bool = False
    breaker_open: bool = False
    reload_success: bool = True
    outcomes: Counts = ()
    in_flight: int = 0
    remediations: tuple[tuple[str, str, str, str], ...] = ()
    leader: bool = False
    cluster_state_errors: int = 0
    unrestored: int = 0
    state_record_errors: int = 0
    record_refused: int = 0
    failed_cycles: int = 0
    healthy: bool = True
    watch_failures: Counts | None = None
    kube_requests: Counts | None = None
    alerts_firing: int = 0
    alerts_dropped: Counts = ()
    cluster_rows: tuple[Row, ...] = ()
    provisioning: Counts = ()


def _per_rule(s: ControllerStatus, counts: Mapping[str, int] | None) -> list[Sample]:
    held = counts or {}
    return [((rule,), held.get(rule, 0)) for rule in s.rules]


def _counts(counts: Counts | None) -> list[Sample]:
    return [(labels, n) for labels, n in (counts or ())]


def _one(value: float) -> list[Sample]:
    return [((), value)]


def controller_samples(s: ControllerStatus) -> Families:
    """The controller's own samples, metric by metric."""
    return (
        (DECISIONS, _counts(s.decisions)),
        (RULE_UNKNOWN, _per_rule(s, s.unknown)),
        (EVALUATION_DURATION, _one(s.last_duration)),
        (LAST_EVALUATION, _one(s.last_timestamp)),
        (SOURCE_UP, [((s.source,), float(s.source_up))]),
        (BREAKER_OPEN, _one(float(s.breaker_open))),
        (RELOAD_SUCCESS, _one(float(s.reload_success))),
        (RULES, _one(len(s.rules))),
        (PENDING_TARGETS, _per_rule(s, s.pending)),
        (ACTIVE_TARGETS, _per_rule(s, s.active)),
        (ACTIONS, _counts(s.outcomes)),
        (ACTIONS_IN_FLIGHT, _one(s.in_flight)),
        (NODES_UNDER_REMEDIATION, [(r, 1.0) for r in s.remediations]),
        (LEADER, _one(float(s.leader))),
        (CLUSTER_STATE_ERRORS, _one(s.cluster_state_errors)),
        (UNRESTORED_CYCLES, _one(s.unrestored)),
        (STATE_RECORD_ERRORS, _one(s.state_record_errors)),
        (STATE_RECORD_REFUSED, _one(s.record_refused)),
        (FAILED_CYCLES, _one(s.failed_cycles)),
        (HEALTHY, _one(float(s.healthy))),
        (WATCH_FAILURES, _counts(s.watch_failures)),
        (KUBE_REQUESTS, _counts(s.kube_requests)),
        (ALERTS_FIRING, _one(s.alerts_firing)),
        (ALERTS_DROPPED, _counts(s.alerts_dropped)),
        # Zero while nothing is provisioned, so that a rate() over it has a start.
        (PROVISIONING, _counts(s.provisioning or tuple(((o,), 0) for o in PROVISIONING_OUTCOMES))),
    )


def cluster_samples(rows: Iterable[Row]) -> Families:
    """The cluster-state rows as samples, label values in each metric's label order
    (a label a row lacks is empty, as the writer always made it)."""
    return [
        (metric, [(tuple(labels.get(k, "") for k in metric.labels), value)])
        for metric, labels, value in rows
    ]


def samples(s: ControllerStatus) -> Families:
    """Every sample of the controller's ``/metrics``."""
    return [*controller_samples(s), *cluster_samples(s.cluster_rows)]


def render(status: ControllerStatus) -> str:
    """One snapshot as the controller's ``/metrics`` text."""
    return render_snapshot(CATALOGUE, status, samples)
