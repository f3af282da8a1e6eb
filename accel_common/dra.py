"""Parsing helpers for Dynamic Resource Allocation (``resource.k8s.io/v1``): which
ResourceClaims a pod uses, which devices a claim was allocated, how many devices of
which vendor a pod asks for through its claims, and how many a node offers through
its ResourceSlices.

Why a module of its own, in ``accel_common``: the controller (device pods, migrate,
rebalance, requeue, pool pressure), the fleet simulator and the exporter all read the
same objects, and each reading them its own way would drift. Everything here is pure
(plain JSON-shaped dicts in, small values out, no client), total (any input, however
malformed, gives an answer and never raises) and bounded (every list walked is cut at
the API server's own limit, so a hostile object costs at most a few thousand steps).

The shapes, from ``k8s.io/api`` ``resource/v1/types.go`` and ``core/v1/types.go``:

- Pod: ``spec.resourceClaims[]`` = ``{name, resourceClaimName | resourceClaimTemplateName}``;
  ``status.resourceClaimStatuses[]`` = ``{name, resourceClaimName}``, the name of the
  claim generated from a template (absent when none was needed).
- ResourceClaim: ``spec.devices.requests[]`` = ``{name, exactly: {deviceClassName,
  allocationMode: ExactCount|All, count}, firstAvailable: [{name, deviceClassName,
  allocationMode, count}]}``; ``status.allocation.devices.results[]`` = ``{request,
  driver, pool, device}``; ``status.reservedFor[]`` = ``{resource, name, uid}``.
  ``AllocationResultsMaxSize`` = 32 devices per claim (and per request).
- ResourceClaimTemplate: ``spec.spec`` is a ResourceClaimSpec.
- ResourceSlice (cluster-scoped): ``spec.driver``, ``spec.pool`` = ``{name, generation,
  resourceSliceCount}``, ``spec.nodeName`` (or ``perDeviceNodeSelection`` and a
  per-device ``nodeName``), ``spec.devices[]`` (at most 128) = ``{name, attributes,
  capacity, consumesCounters: [{counterSet, counters}]}``, ``spec.sharedCounters[]``.
- DeviceClass (cluster-scoped): ``spec.selectors[].cel.expression``.

Vendors: a driver or DeviceClass name maps to the exporter's ``vendor`` label through
``accel_common.names.DRA_VENDORS``; a DeviceClass of another name maps through its CEL
selector when that says ``device.driver == "<known driver>"`` (``class_vendors``).
Devices of drivers we do not know (network cards, CPUs) are not accelerators and are
never counted.

What is here (vendor = the exporter's ``vendor`` label):

- ``pod_claims(pod)`` (``ClaimRef``: entry, claim, template), ``pod_claim_names(pod)``,
  ``has_claims(pod)``;
- ``claim_devices(claim)`` (``AllocatedDevice``: request, driver, pool, device,
  ``.vendor``), ``is_allocated(claim)``;
- ``driver_vendor(name)`` for a driver or DeviceClass name, ``class_vendors(classes)``;
- ``pod_requests(pod, claims, templates, classes)`` -> {vendor: devices} a pod holds
  or asks for (pool pressure), ``claim_requests``, ``spec_requests``;
- ``node_offers(slices)`` -> {node: {vendor: devices}} (capacity);
- ``DraState.build(claims, templates, classes, slices)``: all of it at once, for many
  pods and nodes; ``driver_counts`` keys vendor counts by driver name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from accel_common.names import (
    DRA_AMD_GPU,
    DRA_GOOGLE_TPU,
    DRA_INTEL_GAUDI,
    DRA_INTEL_GPU,
    DRA_NVIDIA_GPU,
    DRA_VENDORS,
)

# The API server's limits (resource/v1/types.go): devices per allocation result and
# per request count (AllocationResultsMaxSize), requests per claim
# (DeviceRequestsMaxSize), devices per slice (ResourceSliceMaxDevices), subrequests
# (FirstAvailableDeviceRequestMaxSize). Anything longer is not a real object: cut.
MAX_RESULTS = 32
MAX_REQUESTS = 32
MAX_SLICE_DEVICES = 128
MAX_SUBREQUESTS = 8
# Claims a pod may name, selectors per class, and objects walked per call: generous
# bounds that no valid object reaches.
MAX_POD_CLAIMS = 128
MAX_SELECTORS = 32
MAX_OBJECTS = 100_000
# A DNS subdomain (driver, pool segment, class, object name) is at most 253 bytes; a
# pool name may hold several, separated by slashes.
MAX_NAME = 253
MAX_POOL = 1024
MAX_EXPRESSION = 10_000

# vendor -> its accelerator DRA driver: the key under which the controller counts a
# vendor's DRA devices where it counts devices by resource (rebalance's free devices),
# so that a claim's device fits only where a DRA driver offers one, never a device
# plugin's ``nvidia.com/gpu`` (a driver name has no "/": it cannot be a resource's).
VENDOR_DRIVER: dict[str, str] = {
    "nvidia": DRA_NVIDIA_GPU,
    "amd": DRA_AMD_GPU,
    "oneapi": DRA_INTEL_GPU,
    "gaudi": DRA_INTEL_GAUDI,
    "tpu": DRA_GOOGLE_TPU,
}

ALLOCATION_EXACT = "ExactCount"
ALLOCATION_ALL = "All"

# ``device.driver == "gpu.nvidia.com"`` (either quote, either side) in a CEL selector.
_DRIVER_EQ = re.compile(
    r"""device\.driver\s*==\s*["']([a-z0-9.-]{1,253})["']|["']([a-z0-9.-]{1,253})["']\s*==\s*device\.driver"""
)


@dataclass(frozen=True)
class AllocatedDevice:
    """One device of a claim's allocation: ``<driver>/<pool>/<device>`` names it."""

    request: str
    driver: str
    pool: str
    device: str

    @property
    def vendor(self) -> str | None:
        """The exporter's vendor label for this device's driver; None: not ours."""
        return driver_vendor(self.driver)


@dataclass(frozen=True)
class ClaimRef:
    """A pod's use of a claim: the pod-level entry name, and the ResourceClaim's name
    (empty while a template's claim is not generated yet) or its template's name."""

    entry: str
    claim: str
    template: str


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any, limit: int) -> Iterator[Mapping[str, Any]]:
    """The mappings of ``value`` when it is a list, at most ``limit`` of them."""
    if not isinstance(value, list):
        return
    for item in value[:limit]:
        if isinstance(item, Mapping):
            yield item


def _name(value: Any, limit: int = MAX_NAME) -> str:
    """A non-empty string of at most ``limit`` characters, else ""."""
    return value if isinstance(value, str) and 0 < len(value) <= limit else ""


def _count(value: Any) -> int:
    """A request's ``count``: default 1, at least 1, at most ``MAX_RESULTS``."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 1
    if isinstance(value, float) and not math.isfinite(value):
        return MAX_RESULTS if value > 0 else 1
    return max(1, min(MAX_RESULTS, int(value)))


def driver_vendor(name: str) -> str | None:
    """The exporter's vendor label for a DRA driver or DeviceClass name
    (``gpu.nvidia.com`` -> ``nvidia``); None for a name that is not an accelerator's."""
    if not isinstance(name, str):
        return None
    return DRA_VENDORS.get(name)


def pod_claims(pod: Mapping[str, Any]) -> list[ClaimRef]:
    """The claims a pod uses, in ``spec.resourceClaims`` order: a named claim as is, a
    template's claim by the name the pod's status gives it (empty until generated)."""
    spec = _dict(_dict(pod).get("spec"))
    status = _dict(_dict(pod).get("status"))
    generated: dict[str, str] = {}
    for st in _list(status.get("resourceClaimStatuses"), MAX_POD_CLAIMS):
        entry, claim = _name(st.get("name")), _name(st.get("resourceClaimName"))
        if entry and claim:
            generated[entry] = claim
    out: list[ClaimRef] = []
    for rc in _list(spec.get("resourceClaims"), MAX_POD_CLAIMS):
        entry = _name(rc.get("name"))
        claim = _name(rc.get("resourceClaimName"))
        template = _name(rc.get("resourceClaimTemplateName"))
        if claim:
            out.append(ClaimRef(entry, claim, ""))
        elif template:
            out.append(ClaimRef(entry, generated.get(entry, ""), template))
    return out


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaim names a pod uses (its namespace is the pod's), without
    duplicates: ``spec.resourceClaims[].resourceClaimName`` and
    ``status.resourceClaimStatuses[].resourceClaimName``."""
    names = [ref.claim for ref in pod_claims(pod) if ref.claim]
    status = _dict(_dict(pod).get("status"))
    names += [
        n
        for st in _list(status.get("resourceClaimStatuses"), MAX_POD_CLAIMS)
        if (n := _name(st.get("resourceClaimName")))
    ]
    return list(dict.fromkeys(names))


def has_claims(pod: Mapping[str, Any]) -> bool:
    """Whether the pod names any ResourceClaim or template at all."""
    return bool(pod_claims(pod))


def claim_devices(claim: Mapping[str, Any]) -> list[AllocatedDevice]:
    """A claim's allocated devices (``status.allocation.devices.results``), complete
    entries only; [] while the claim is not allocated."""
    status = _dict(_dict(claim).get("status"))
    devices = _dict(_dict(status.get("allocation")).get("devices"))
    out: list[AllocatedDevice] = []
    for r in _list(devices.get("results"), MAX_RESULTS):
        driver, pool, device = (
            _name(r.get("driver")),
            _name(r.get("pool"), MAX_POOL),
            _name(r.get("device")),
        )
        if driver and pool and device:
            out.append(AllocatedDevice(_name(r.get("request")), driver, pool, device))
    return out


def is_allocated(claim: Mapping[str, Any]) -> bool:
    """Whether the claim carries an allocation (possibly of no device we know)."""
    return isinstance(_dict(_dict(claim).get("status")).get("allocation"), Mapping)


def class_vendors(device_classes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """DeviceClass name -> vendor for the given classes: by the class's own name when
    it is a known one, else by the driver its CEL selectors require. Classes whose
    selectors name no known driver (or several) are left out."""
    out: dict[str, str] = {}
    for i, dc in enumerate(device_classes):
        if i >= MAX_OBJECTS:
            break
        name = _name(_dict(_dict(dc).get("metadata")).get("name"))
        if not name:
            continue
        vendor = driver_vendor(name)
        if vendor is None:
            found: set[str] = set()
            for sel in _list(_dict(_dict(dc).get("spec")).get("selectors"), MAX_SELECTORS):
                expr = _name(_dict(sel.get("cel")).get("expression"), MAX_EXPRESSION)
                for m in _DRIVER_EQ.finditer(expr):
                    v = driver_vendor(m.group(1) or m.group(2))
                    if v is not None:
                        found.add(v)
            vendor = found.pop() if len(found) == 1 else None
        if vendor is not None:
            out[name] = vendor
    return out


def _class_vendor(name: str, classes: Mapping[str, str]) -> str | None:
    return classes.get(name) or driver_vendor(name)


def spec_requests(
    spec: Mapping[str, Any], classes: Mapping[str, str] | None = None
) -> dict[str, int]:
    """vendor -> devices a ResourceClaimSpec asks for. ``exactly`` counts ``count``
    (default 1) under ``ExactCount``, and 1 under ``All`` (every matching device of a
    pool: at least one, how many is known only once allocated); ``firstAvailable``
    counts its first subrequest, the one the scheduler tries first. A class is mapped
    through ``classes`` (``class_vendors``), else by its name."""
    cls = classes or {}
    out: dict[str, int] = {}
    devices = _dict(_dict(spec).get("devices"))
    for req in _list(devices.get("requests"), MAX_REQUESTS):
        exact = req.get("exactly")
        if not isinstance(exact, Mapping):
            exact = next(_list(req.get("firstAvailable"), MAX_SUBREQUESTS), None)
        if exact is None:
            continue
        vendor = _class_vendor(_name(exact.get("deviceClassName")), cls)
        if vendor is None:
            continue
        mode = exact.get("allocationMode") or ALLOCATION_EXACT
        n = 1 if mode == ALLOCATION_ALL else _count(exact.get("count"))
        out[vendor] = out.get(vendor, 0) + n
    return out


def allocated_requests(claim: Mapping[str, Any]) -> dict[str, int]:
    """vendor -> devices an allocated claim holds (unknown drivers left out)."""
    out: dict[str, int] = {}
    for dev in claim_devices(claim):
        if (vendor := dev.vendor) is not None:
            out[vendor] = out.get(vendor, 0) + 1
    return out


def claim_requests(
    claim: Mapping[str, Any], classes: Mapping[str, str] | None = None
) -> dict[str, int]:
    """vendor -> devices of one claim: what its allocation holds, else what its spec
    asks for."""
    if is_allocated(claim):
        return allocated_requests(claim)
    return spec_requests(_dict(_dict(claim).get("spec")), classes)


def pod_requests(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, Mapping[str, Any]] | None = None,
    classes: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """vendor -> devices a pod asks for (or holds) through its claims. ``claims`` and
    ``templates`` are the pod's namespace's objects by name. A claim is counted once
    even when two entries name it; a template whose claim is not generated (or not
    read) counts its template's spec; a claim that cannot be found counts nothing."""
    out: dict[str, int] = {}
    seen: set[str] = set()
    for ref in pod_claims(pod):
        if ref.claim:
            if ref.claim in seen:
                continue
            seen.add(ref.claim)
            claim = claims.get(ref.claim)
            if claim is not None:
                counted = claim_requests(claim, classes)
            elif ref.template and templates is not None and ref.template in templates:
                counted = _template_requests(templates[ref.template], classes)
            else:
                continue
        elif templates is not None and ref.template in templates:
            counted = _template_requests(templates[ref.template], classes)
        else:
            continue
        for vendor, n in counted.items():
            out[vendor] = out.get(vendor, 0) + n
    return out


def _template_requests(
    template: Mapping[str, Any], classes: Mapping[str, str] | None
) -> dict[str, int]:
    return spec_requests(_dict(_dict(_dict(template).get("spec")).get("spec")), classes)


def pod_devices(
    pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]
) -> list[AllocatedDevice]:
    """Every device allocated to the pod's claims (accelerators and others alike),
    each once."""
    out: dict[tuple[str, str, str], AllocatedDevice] = {}
    for name in pod_claim_names(pod):
        claim = claims.get(name)
        if claim is None:
            continue
        for dev in claim_devices(claim):
            out.setdefault((dev.driver, dev.pool, dev.device), dev)
    return list(out.values())


def _newest_generations(slices: list[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = _dict(s.get("spec"))
        pool = _dict(spec.get("pool"))
        gen = pool.get("generation")
        gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
        key = (_name(spec.get("driver")), _name(pool.get("name"), MAX_POOL))
        newest[key] = max(newest.get(key, gen), gen)
    return newest


def node_offers(slices: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """node -> vendor -> accelerator devices its ResourceSlices offer. Only the newest
    generation of each pool counts (older slices are being replaced). Devices that
    draw on a shared counter set (partitionable devices: a whole GPU and its MIG
    shapes all consume the same physical GPU's counters) count once per counter
    set, so a GPU listed with its possible partitions is one device; other devices
    count one each. A slice for several nodes (``nodeSelector``, ``allNodes``) is no
    node's: such devices are network-attached, not a node's capacity."""
    listed = [s for i, s in enumerate(slices) if i < MAX_OBJECTS and isinstance(s, Mapping)]
    newest = _newest_generations(listed)
    units: dict[str, dict[str, set[str]]] = {}
    for s in listed:
        spec = _dict(s.get("spec"))
        driver = _name(spec.get("driver"))
        vendor = driver_vendor(driver)
        if vendor is None:
            continue
        pool = _dict(spec.get("pool"))
        pool_name = _name(pool.get("name"), MAX_POOL)
        gen = pool.get("generation")
        gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else 0
        if gen != newest.get((driver, pool_name), gen):
            continue
        slice_node = _name(spec.get("nodeName"))
        per_device = spec.get("perDeviceNodeSelection") is True
        for dev in _list(spec.get("devices"), MAX_SLICE_DEVICES):
            node = _name(dev.get("nodeName")) if per_device else slice_node
            name = _name(dev.get("name"))
            if not node or not name:
                continue
            sets = sorted(
                cs
                for c in _list(dev.get("consumesCounters"), MAX_SLICE_DEVICES)
                if (cs := _name(c.get("counterSet")))
            )
            unit = f"{pool_name}/counters/{sets[0]}" if sets else f"{pool_name}/device/{name}"
            units.setdefault(node, {}).setdefault(vendor, set()).add(unit)
    return {node: {v: len(u) for v, u in by.items()} for node, by in units.items()}


def driver_counts(by_vendor: Mapping[str, int]) -> dict[str, int]:
    """vendor -> n as DRA driver name (``VENDOR_DRIVER``) -> n; vendors without an
    accelerator driver, and counts of 0, are left out."""
    out: dict[str, int] = {}
    for vendor, n in by_vendor.items():
        driver = VENDOR_DRIVER.get(vendor)
        if driver is not None and n > 0:
            out[driver] = out.get(driver, 0) + n
    return out


def _keyed(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    out: dict[tuple[str, str], Mapping[str, Any]] = {}
    for i, obj in enumerate(objects):
        if i >= MAX_OBJECTS:
            break
        meta = _dict(_dict(obj).get("metadata"))
        name = _name(meta.get("name"))
        if name:
            out[(_name(meta.get("namespace")) or "default", name)] = obj
    return out


def _namespace(pod: Mapping[str, Any]) -> str:
    return _name(_dict(_dict(pod).get("metadata")).get("namespace")) or "default"


@dataclass(frozen=True)
class DraState:
    """What the cluster's DRA objects say, read once, for questions about many pods
    and nodes: the claims and templates by (namespace, name), DeviceClass -> vendor,
    and node -> vendor -> devices its slices offer (``node_offers``). Built with
    ``build`` from the lists the API returns. Counts are by vendor; the controller
    counts them under the vendor's whole-device resource
    (``accel_common.names.VENDOR_RESOURCE``)."""

    claims: Mapping[tuple[str, str], Mapping[str, Any]]
    templates: Mapping[tuple[str, str], Mapping[str, Any]]
    classes: Mapping[str, str]
    offers: Mapping[str, Mapping[str, int]]

    @classmethod
    def build(
        cls,
        claims: Iterable[Mapping[str, Any]] = (),
        templates: Iterable[Mapping[str, Any]] = (),
        device_classes: Iterable[Mapping[str, Any]] = (),
        slices: Iterable[Mapping[str, Any]] = (),
    ) -> DraState:
        offers = node_offers(slices)
        return cls(_keyed(claims), _keyed(templates), class_vendors(device_classes), offers)

    def _namespace_objects(
        self, pod: Mapping[str, Any]
    ) -> tuple[dict[str, Mapping[str, Any]], dict[str, Mapping[str, Any]]]:
        ns = _namespace(pod)
        names = pod_claims(pod)
        claims = {r.claim: c for r in names if r.claim and (c := self.claims.get((ns, r.claim)))}
        templates = {
            r.template: t
            for r in names
            if r.template and (t := self.templates.get((ns, r.template)))
        }
        return claims, templates

    def requests(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """vendor -> accelerator devices the pod holds or asks for through its claims
        (``pod_requests``); {} for a pod with no claim."""
        if not has_claims(pod):
            return {}
        claims, templates = self._namespace_objects(pod)
        return pod_requests(pod, claims, templates, self.classes)

    def unknown_claims(self, pod: Mapping[str, Any]) -> list[str]:
        """The pod's claims this view has not seen (not generated yet, deleted, or
        not read): what they hold is unknown."""
        ns = _namespace(pod)
        out = []
        for ref in pod_claims(pod):
            if ref.claim and (ns, ref.claim) not in self.claims:
                out.append(ref.claim)
            elif not ref.claim and (ns, ref.template) not in self.templates:
                out.append(f"<claim of template {ref.template}>")
        return out

    def devices(self, pod: Mapping[str, Any]) -> list[AllocatedDevice]:
        """Every device allocated to the pod's claims."""
        claims, _ = self._namespace_objects(pod)
        return pod_devices(pod, claims)


EMPTY_STATE = DraState({}, {}, {}, {})
