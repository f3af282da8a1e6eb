"""What the ProvisioningRequest answerer (``autoscaler/provisioning.py``) reads, as
pure functions: a ProvisioningRequest of its class, the booking record it keeps
on a MachineDeployment, and the gang a request stands for (read from the Kueue
Workload that owns it), with the nodes that gang needs.

Why apart: everything here is someone else's input (whoever may create a
ProvisioningRequest, patch a MachineDeployment or write a Workload), so it is read
without the API, bounded, and refused as ``Malformed`` (skipped and counted) or
``Unanswerable`` (the request is Failed with that reason), never raised as
anything else; ``tests/fuzz/test_fuzz_provisioning.py`` holds it to that.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from accel_common.names import PROVISIONING_ANNOTATION, PROVISIONING_CLASS, is_device_resource
from autoscaler.clusterstate import device_requests
from autoscaler.kube.kueue import is_true
from autoscaler.kube.protocol import Obj
from autoscaler.pools.base import Pool

CLASS: Final = PROVISIONING_CLASS
GROUP: Final = "autoscaling.x-k8s.io"
VERSION: Final = "v1"
PLURAL: Final = "provisioningrequests"
RECORD: Final = PROVISIONING_ANNOTATION
# The API's condition types, and the reasons written (cluster-autoscaler's own where
# it has one: provisioningrequest/conditions).
ACCEPTED, PROVISIONED, FAILED = "Accepted", "Provisioned", "Failed"
BOOKING_EXPIRED: Final = "BookingExpired"  # CapacityRevoked is never set (docs/kueue.md)
BOOKING: Final = 600.0
TIMEOUT: Final = 900.0
MAX_REQUESTS: Final = 1_000
MAX_POD_SETS: Final = 32
MAX_COUNT: Final = 100_000
MAX_RECORDS: Final = 256


class Malformed(Exception):
    """A request or record whose fields are not what the API says: skipped."""


class Unanswerable(Exception):
    """A request of our class that cannot be answered: Failed with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Request:
    namespace: str
    name: str
    uid: str
    generation: int
    pod_sets: list[tuple[str, int]]  # (podTemplateRef.name, count)
    owner: str  # the Workload that owns it, or ""
    conditions: list[Obj]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def true(self, kind: str) -> bool:
        return is_true({"status": {"conditions": self.conditions}}, kind)

    def since(self, kind: str) -> float | None:
        for c in self.conditions:
            if c.get("type") == kind and c.get("status") == "True":
                return _parse_time(c.get("lastTransitionTime"))
        return None


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise Malformed(f"{what}: expected a name")
    return value


def read_request(obj: Obj) -> Request | None:
    """The request, None when it is not of our class; ``Malformed`` otherwise."""
    meta, spec, status = (obj.get(k) for k in ("metadata", "spec", "status"))
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        raise Malformed("metadata and spec: expected objects")
    if spec.get("provisioningClassName") != CLASS:
        return None
    sets = spec.get("podSets")
    if not isinstance(sets, list) or not 0 < len(sets) <= MAX_POD_SETS:
        raise Malformed(f"spec.podSets: expected a list of 1 to {MAX_POD_SETS}")
    pod_sets: list[tuple[str, int]] = []
    for ps in sets:
        ref = ps.get("podTemplateRef") if isinstance(ps, dict) else None
        count = ps.get("count") if isinstance(ps, dict) else None
        if not isinstance(ref, dict) or not isinstance(count, int) or isinstance(count, bool):
            raise Malformed("spec.podSets[]: expected podTemplateRef and a whole count")
        if not 0 < count <= MAX_COUNT:
            raise Malformed(f"spec.podSets[].count: expected 1 to {MAX_COUNT}")
        pod_sets.append((_name(ref.get("name"), "podTemplateRef.name"), count))
    owner = ""
    refs = meta.get("ownerReferences") or []
    if not isinstance(refs, list) or len(refs) > 64:
        raise Malformed("metadata.ownerReferences: expected a list of at most 64")
    for ref in refs:
        if isinstance(ref, dict) and ref.get("kind") == "Workload" and ref.get("controller"):
            owner = _name(ref.get("name"), "ownerReferences[].name")
    conds = (status or {}).get("conditions") if isinstance(status, dict) else None
    conditions = [c for c in conds[:16] if isinstance(c, dict)] if isinstance(conds, list) else []
    generation = meta.get("generation")
    return Request(
        _name(meta.get("namespace"), "metadata.namespace"),
        _name(meta.get("name"), "metadata.name"),
        _name(meta.get("uid"), "metadata.uid"),
        generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
        pod_sets,
        owner,
        conditions,
    )


@dataclass
class Booking:
    """One scale-up, as recorded on its MachineDeployment."""

    request: str  # namespace/name
    nodes: int
    replicas: int  # what the scale-up set
    at: float
    release: list[str] = field(default_factory=list)  # nodes being released
    release_to: int = -1  # the replicas the release sets
    # Released what was unused at the booking's end; the rest waits for the
    # request to go (its pods use it).
    held: bool = False
    unborn: int = 0  # replicas released whose node never registered

    def as_json(self) -> Obj:
        out: Obj = {"request": self.request, "nodes": self.nodes, "replicas": self.replicas}
        out["at"] = self.at
        if self.release_to >= 0:
            out["release"], out["releaseTo"] = self.release, self.release_to
            out["unborn"] = self.unborn
        if self.held:
            out["held"] = True
        return out


def read_records(md: Obj) -> dict[str, Booking]:
    """The MachineDeployment's bookings by request uid; ``Malformed`` if the
    annotation is not what this controller writes."""
    raw = ((md.get("metadata") or {}).get("annotations") or {}).get(RECORD)
    if raw is None:
        return {}
    try:
        data = json.loads(raw) if isinstance(raw, str) and len(raw) < 65_536 else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or len(data) > MAX_RECORDS:
        raise Malformed(f"annotation {RECORD}: expected a JSON object of bookings")
    out: dict[str, Booking] = {}
    for uid, b in data.items():
        raw_ints = [b.get(k) if isinstance(b, dict) else None for k in ("nodes", "replicas")]
        at = b.get("at") if isinstance(b, dict) else None
        ints = [v for v in raw_ints if isinstance(v, int) and 0 <= v <= MAX_COUNT]
        if len(ints) != 2:
            raise Malformed(f"annotation {RECORD}: booking {uid!r:.40} is not whole numbers")
        if not isinstance(at, int | float) or not math.isfinite(at):
            raise Malformed(f"annotation {RECORD}: booking {uid!r:.40} has no time")
        assert isinstance(b, dict)
        release = b.get("release") or []
        to = b.get("releaseTo", -1)
        if not isinstance(release, list) or not all(isinstance(n, str) for n in release):
            raise Malformed(f"annotation {RECORD}: booking {uid!r:.40} release is not names")
        out[str(uid)] = Booking(
            str(b.get("request", ""))[:507],
            ints[0],
            ints[1],
            float(at),
            release[:MAX_COUNT],
            to if isinstance(to, int) and not isinstance(to, bool) else -1,
            b.get("held") is True,
            _count(b.get("unborn", 0)),
        )
    return out


def _count(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    raise Malformed(f"annotation {RECORD}: expected a whole number, got {value!r:.40}")


def nodes_needed(
    per_pod: Sequence[Mapping[str, int]], counts: Sequence[int], node: Mapping[str, int]
) -> int:
    """Nodes for every pod set: ``ceil(count / pods per node)`` each, pods per node
    the fewest any device resource allows; ``Unanswerable`` when a pod fits no node."""
    total = 0
    for wants, count in zip(per_pod, counts, strict=True):
        fit = min((node.get(r, 0) // n for r, n in wants.items() if n > 0), default=0)
        if fit <= 0:
            raise Unanswerable(
                "NoFittingPool",
                f"a pod asks for {dict(wants)}, which a node of the pool ({dict(node)}) "
                "cannot hold",
            )
        total += math.ceil(count / fit)
    return total


def _obj(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def gang_of(wl: Obj, r: Request) -> tuple[list[dict[str, int]], str]:
    """Per pod set of the request, each pod's device requests, read from the
    Workload's pod set it was made from (``ppt-<request>-<pod set>``), and the one
    flavor ``status.admission`` assigned to them; ``Unanswerable`` otherwise."""
    listed = _obj(wl.get("spec")).get("podSets")
    listed = listed[:MAX_POD_SETS] if isinstance(listed, list) else []
    sets = {str(ps.get("name")): ps for ps in listed if isinstance(ps, dict)}
    admission = _obj(_obj(wl.get("status")).get("admission"))
    assigned: dict[str, str] = {}
    psas = admission.get("podSetAssignments")
    for psa in psas[:MAX_POD_SETS] if isinstance(psas, list) else []:
        if isinstance(psa, dict) and isinstance(psa.get("flavors"), dict):
            assigned.update({str(k): str(v) for k, v in list(psa["flavors"].items())[:64]})
    per_pod: list[dict[str, int]] = []
    ordered = list(sets.values())
    for i, (ref, _) in enumerate(r.pod_sets):
        # Kueue shortens a name past 253 characters with a hash: then by position.
        ps = next((p for n, p in sets.items() if ref.endswith(f"-{n}")), None)
        if ps is None and len(ordered) == len(r.pod_sets):
            ps = ordered[i]
        pod_spec = _obj(_obj((ps or {}).get("template")).get("spec"))
        if not pod_spec:
            raise Unanswerable("NoPodSet", f"Workload {r.owner} has no pod set for {ref}")
        try:
            per_pod.append(device_requests({"spec": pod_spec}))
        except (TypeError, AttributeError, ValueError) as e:
            raise Unanswerable(
                "NoPodSet", f"Workload {r.owner}'s pod set for {ref} is not a pod template: {e}"
            ) from None
    resources = {res for wants in per_pod for res in wants}
    flavors = {assigned[res] for res in resources if res in assigned}
    if not resources or len(flavors) != 1:
        raise Unanswerable(
            "NoFittingPool",
            f"Workload {r.owner}'s pods ask for {sorted(resources) or 'no devices'} in "
            f"flavors {sorted(flavors) or 'none assigned'}: one device flavor is needed",
        )
    return per_pod, flavors.pop()


def node_devices(pool: Pool, nodes: Sequence[Obj]) -> dict[str, int]:
    """What a node of the pool offers: its declared shape, else a registered node's
    allocatable devices."""
    if pool.shape is not None and pool.shape.devices:
        return dict(pool.shape.devices)
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    for name in pool.nodes:
        alloc = ((by_name.get(name) or {}).get("status") or {}).get("allocatable") or {}
        found = {
            str(r): int(v)
            for r, v in alloc.items()
            if is_device_resource(str(r)) and str(v).isdigit()
        }
        if found:
            return found
    return {}


__all__ = [
    "ACCEPTED",
    "BOOKING",
    "BOOKING_EXPIRED",
    "CLASS",
    "FAILED",
    "GROUP",
    "MAX_COUNT",
    "MAX_POD_SETS",
    "MAX_RECORDS",
    "MAX_REQUESTS",
    "PLURAL",
    "PROVISIONED",
    "RECORD",
    "TIMEOUT",
    "VERSION",
    "Booking",
    "Malformed",
    "Request",
    "Unanswerable",
    "gang_of",
    "node_devices",
    "nodes_needed",
    "read_records",
    "read_request",
    "rfc3339",
]
