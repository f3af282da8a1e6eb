"""Which Kubernetes container a process on a device belongs to.

The vendor libraries name the processes that hold a device by host PID only. The
kubelet's PodResources API names the containers a device was *assigned* to, but under
time-slicing and MPS several pods share one device, so only the processes themselves
say who used how much. This module turns a PID into (namespace, pod, container).

Why it is built this way:

* **The cgroup is the identity.** ``/proc/PID/cgroup`` (under ``--path.procfs``)
  names the pod's UID and the container's ID in every layout the kubelet writes:
  cgroup v1 (one line per hierarchy) and v2 (``0::/...``), the systemd driver
  (``kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope``, also
  ``docker-`` and ``crio-``) and the cgroupfs driver (``/kubepods/burstable/pod<uid>/<id>``).
  The pod and container are searched for anywhere in the path, so a path seen from
  inside another cgroup namespace (``0::/../../kubepods-...``, what the exporter's own
  container reads by default on cgroup v2) names them as well. A process in no pod's
  cgroup (the host, a system daemon, the MPS control daemon started outside
  Kubernetes) has no owner and its use goes under ``pod=""``.
* **Names come from the kubelet's log directories**, which the kubelet keeps for every
  running container whatever the runtime: ``/var/log/pods/<namespace>_<pod>_<uid>/
  <container>/`` (pod UID -> namespace and pod, container names) and
  ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log`` (container ID ->
  container name). Neither namespaces, pod names nor container names may contain
  ``_``, so the names split without ambiguity. The root is ``--path.pod-logs``.
  The listings are cached and read again only when a UID or ID is not in them, at
  most once per ``relist_seconds``, so a steady node costs one ``cgroup`` read per
  process per poll.
* **PodResources resolves what the logs cannot.** When the pod is known only by UID
  (its log directory is gone or not mounted), ``owner_on`` takes the one pod that
  PodResources assigned the device to, if exactly one; and a known pod with an
  unknown container takes the one container of that pod assigned the device. It never
  overrides what the cgroup and the logs say: a process that runs in a pod is that
  pod's use, whatever the kubelet assigned.
* **Bounded and hostile-proof.** Every file is read through
  ``accel_common.readfile`` with a cap, directory listings stop at ``MAX_ENTRIES``,
  the caches are bounded, and contents that parse as nothing give "no owner", never
  an exception: a container can write its own cgroup name, and this runs in the
  poller's thread for every device.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from accel_common.readfile import FieldError, read_text

log = logging.getLogger("accel_exporter.procmap")

# /proc/PID/cgroup is a few hundred bytes; one line per v1 hierarchy at most.
CGROUP_LIMIT = 16 * 1024
# Entries read from one log directory listing; a node runs a few hundred containers.
MAX_ENTRIES = 20_000
# PIDs resolved per call; a device lists tens of processes.
MAX_PIDS = 4096
# How soon a miss may list the log directories again.
RELIST_SECONDS = 10.0

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD_UID = re.compile(rf"pod({_UID})(?:\.slice)?(?:/|$)")
_CONTAINER_ID = re.compile(
    r"(?:^|/)(?:(?:cri-containerd|docker|crio|containerd|cri-o)-)?([0-9a-f]{64})(?:\.scope)?$"
)
_POD_DIR = re.compile(rf"^([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9.-]*)_({_UID})$")
_CONTAINER_LOG = re.compile(
    r"^([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9.-]*)_([a-z0-9][a-z0-9-]*)-([0-9a-f]{64})\.log$"
)


@dataclass(frozen=True)
class Owner:
    """Who a process belongs to. ``uid`` and ``container_id`` are what its cgroup
    says; the names are empty where they could not be found."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    uid: str = ""
    container_id: str = ""


NO_OWNER = Owner()


def parse_cgroup(text: str) -> tuple[str, str]:
    """(pod UID with dashes, container ID) from a ``/proc/PID/cgroup``; empty strings
    for what it does not name. Any hierarchy that names a pod will do (v1 lists the
    same path under each controller; v2 has one line)."""
    for line in text.splitlines()[:64]:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].strip().rstrip("/")
        m = _POD_UID.search(path)
        if m is None:
            continue
        uid = m.group(1).replace("_", "-")
        rest = path[m.end() :]
        c = _CONTAINER_ID.search(rest)
        return uid, (c.group(1) if c else "")
    return "", ""


def parse_pod_dir(name: str) -> tuple[str, str, str] | None:
    """``<namespace>_<pod>_<uid>`` -> (namespace, pod, uid)."""
    m = _POD_DIR.match(name)
    return (m.group(1), m.group(2), m.group(3).replace("_", "-")) if m else None


def parse_container_log(name: str) -> tuple[str, str, str, str] | None:
    """``<pod>_<namespace>_<container>-<id>.log`` -> (namespace, pod, container, id)."""
    m = _CONTAINER_LOG.match(name)
    return (m.group(2), m.group(1), m.group(3), m.group(4)) if m else None


def _listdir(path: Path) -> list[str]:
    """At most MAX_ENTRIES names of a directory; none when it cannot be listed."""
    out: list[str] = []
    try:
        with os.scandir(path) as it:
            for entry in it:
                out.append(entry.name)
                if len(out) >= MAX_ENTRIES:
                    log.warning("%s: more than %d entries; the rest are ignored", path, MAX_ENTRIES)
                    break
    except OSError:
        return []
    return out


class ProcMap:
    """PIDs to containers; see the module docstring. Thread-safe: every backend's
    poll thread may ask."""

    def __init__(
        self,
        procfs: Path = Path("/proc"),
        pod_logs: Path = Path("/var/log"),
        clock: Callable[[], float] = time.monotonic,
        relist_seconds: float = RELIST_SECONDS,
    ) -> None:
        self.procfs = procfs
        self.pod_logs = pod_logs
        self.clock = clock
        self.relist_seconds = relist_seconds
        self._lock = threading.Lock()
        # pod uid -> (namespace, pod); container id -> (namespace, pod, container)
        self._pods: dict[str, tuple[str, str]] = {}
        self._containers: dict[str, tuple[str, str, str]] = {}
        # pod uid -> its container names (from /var/log/pods/<...>/<container>/)
        self._pod_containers: dict[str, tuple[str, ...]] = {}
        self._listed_at: float | None = None

    # -- the kubelet's log directories --------------------------------------------

    def _relist(self) -> None:
        pods: dict[str, tuple[str, str]] = {}
        pod_containers: dict[str, tuple[str, ...]] = {}
        pods_dir = self.pod_logs / "pods"
        for name in _listdir(pods_dir):
            parsed = parse_pod_dir(name)
            if parsed is None:
                continue
            ns, pod, uid = parsed
            pods[uid] = (ns, pod)
            names = [c for c in _listdir(pods_dir / name) if re.fullmatch(r"[a-z0-9-]{1,63}", c)]
            pod_containers[uid] = tuple(sorted(names)[:64])
        containers: dict[str, tuple[str, str, str]] = {}
        for name in _listdir(self.pod_logs / "containers"):
            c = parse_container_log(name)
            if c is not None:
                containers[c[3]] = (c[0], c[1], c[2])
        self._pods, self._containers, self._pod_containers = pods, containers, pod_containers
        self._listed_at = self.clock()

    def _lookup(self, uid: str, container_id: str) -> Owner:
        ns_pod = self._pods.get(uid)
        named = self._containers.get(container_id) if container_id else None
        if named is not None:
            return Owner(named[0], named[1], named[2], uid, container_id)
        if ns_pod is not None:
            container = ""
            names = self._pod_containers.get(uid, ())
            if len(names) == 1:
                container = names[0]
            return Owner(ns_pod[0], ns_pod[1], container, uid, container_id)
        return Owner(uid=uid, container_id=container_id)

    # -- PIDs -------------------------------------------------------------------------

    def cgroup_of(self, pid: int) -> tuple[str, str]:
        """(pod UID, container ID) of a PID; empty when it is in no pod or gone."""
        if pid <= 0:
            return "", ""
        try:
            text = read_text(self.procfs / str(pid) / "cgroup", CGROUP_LIMIT)
        except FieldError:
            return "", ""  # the process ended, or hides its cgroup: no owner
        return parse_cgroup(text)

    def owners(self, pids: Iterable[int]) -> dict[int, Owner]:
        """The owner of each PID (at most MAX_PIDS of them); NO_OWNER for a process in
        no pod."""
        wanted = sorted({p for p in pids if isinstance(p, int)})[:MAX_PIDS]
        cgroups = {pid: self.cgroup_of(pid) for pid in wanted}
        out: dict[int, Owner] = {}
        with self._lock:
            unknown = any(
                uid and (uid not in self._pods or (cid and cid not in self._containers))
                for uid, cid in cgroups.values()
            )
            now = self.clock()
            if unknown and (
                self._listed_at is None or now - self._listed_at >= self.relist_seconds
            ):
                self._relist()
            for pid, (uid, cid) in cgroups.items():
                out[pid] = self._lookup(uid, cid) if uid else NO_OWNER
        return out


@dataclass(frozen=True)
class Assigned:
    """A container that PodResources assigned a device to."""

    namespace: str
    pod: str
    container: str


def owner_on(owner: Owner, assigned: Sequence[Assigned]) -> tuple[str, str, str]:
    """(namespace, pod, container) of a process on a device that PodResources
    assigned to ``assigned``: the cgroup's and the logs' names, completed from the
    assignments where those left a part unknown (see the module docstring)."""
    if not owner.uid:
        return "", "", ""
    ns, pod, container = owner.namespace, owner.pod, owner.container
    if not pod:
        pods = {(a.namespace, a.pod) for a in assigned}
        if len(pods) != 1:
            # A pod without a name cannot be told from the others: it is still a
            # pod, so its use is not the host's; it goes under its UID.
            return "", owner.uid, ""
        ns, pod = next(iter(pods))
    if not container:
        names = {a.container for a in assigned if (a.namespace, a.pod) == (ns, pod)}
        if len(names) == 1:
            container = next(iter(names))
    return ns, pod, container
