"""The records of the simulated fleet's jobs: ``Job`` (one batch Job, one pod) and
``Gang`` (a job of whole nodes run by a gang owner: a JobSet or a PyTorchJob),
with its ``Member`` pods.

Why a module of its own: the Job controller (``jobs.py``), the gang operators
(``gangs.py``), the faults, telemetry and accounting all read these records, and
none of them should import another's controller to know what a job is. A gang is
a ``Job`` (the same progress, checkpoint and deadline fields, one entry of the
fleet's device-to-job index) whose devices are its members' nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Utilization while a job loads its checkpoint.
RESTORE_UTILIZATION = 0.05


@dataclass
class Job:
    name: str
    namespace: str
    pool: str  # drawn for: its reference device is this pool's model
    size: int
    total: float  # seconds of work at full speed on the reference device
    utilization: float
    timeout: float  # the accel-fleet.io/timeout annotation
    deadline: float  # activeDeadlineSeconds
    submitted: float
    stall_at: float | None  # work at which the job deadlocks by itself
    index: int
    pools: tuple[str, ...] = ()  # where it may run (its queue), sorted
    flops: float = 0.0  # total x reference peak x size
    bound: bool = True  # to ``pool`` by nodeSelector, or free to use ``pools``
    state: str = "pending"  # pending | running | done | lost
    work: float = 0.0  # progress at ``mark``
    mark: float = 0.0
    run_start_work: float = 0.0
    speed: float = 1.0  # work per second of the current run: 1 / factor
    factor: float = 1.0  # run time per unit of work: model ratio x links
    links: float = 1.0  # topology slowdown of the current run
    overhead_until: float = 0.0
    stalled: bool = False
    suspended: bool = False
    pod: str | None = None
    pod_created: float = 0.0
    attempts: int = 0
    failures: int = 0
    slot: int = -1
    devices: tuple[int, ...] = ()
    bound_at: float = 0.0
    started: float | None = None  # for activeDeadlineSeconds
    version: int = 0
    fault_at: float | None = None
    disrupted: bool = False  # evicted; counts against its namespace's PDB until it runs
    declares: bool = False  # its pods carry the checkpoint annotations (checkpoints.py)
    # Hung in a collective (a ``collective_hang`` fault): stalled, its devices busy.
    hung: bool = False


# Utilization while a gang writes a checkpoint: every member idle together, at most
# 0.05 with the scrape's jitter (the stall detector's confounder).
PAUSE_UTILIZATION = 0.01


@dataclass
class Member:
    """One member pod of a gang: a whole node's devices. ``name`` is what
    ``accel_job_age_seconds`` calls its job (the child Job of a JobSet; a
    PyTorchJob's pods have no batch Job), ``gang`` its gang's name; ``slot`` and
    ``devices`` (global device indices) while it is bound."""

    index: int
    namespace: str
    gang: str
    kind: str  # the accel_gang_info kind: "JobSet" | "PyTorchJob"
    name: str
    timeout: float
    pause: float  # the declared checkpoint pause (seconds), 0 for none
    pod: str | None = None
    attempt: int = 0  # the JobSet restart attempt it was created for
    slot: int = -1
    devices: tuple[int, ...] = ()


@dataclass
class Gang(Job):
    """A job of ``nodes`` whole nodes (``size`` = nodes x devices per node); its
    ``devices`` are all its members' while it runs. ``restarts``: whole-gang
    restarts (a JobSet's ``status.restarts``; a PyTorchJob's restarts after a
    member pod went); ``attempt``: the JobSet restart attempt of its pods."""

    kind: str = "jobset"  # the scenario's gangKind
    nodes: int = 1
    members: list[Member] = field(default_factory=list)
    restarts: int = 0
    attempt: int = 0
    restart_pending: bool = False  # a failed child Job the JobSet controller will see
    stalled_since: float = 0.0
    waiting_since: float | None = None  # a restart began; until every member is bound
    run_started: float = 0.0
    saved_at: float | None = None  # when it last saved a checkpoint
    # The pause before the checkpoint at a work boundary, once drawn: (boundary,
    # seconds); and every pause drawn, in order (checkpoints.py).
    pause_for: tuple[float, float] | None = None
    pauses: list[float] = field(default_factory=list)


__all__ = ["PAUSE_UTILIZATION", "RESTORE_UTILIZATION", "Gang", "Job", "Member"]
