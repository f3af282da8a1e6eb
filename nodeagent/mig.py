"""Applying a MIG layout to NVIDIA GPUs through NVML.

Why it is built this way:

* Profiles are found by NVML's own names (``nvmlDeviceGetGpuInstanceProfileInfo``'s
  v2 ``name``, "MIG 1g.10gb"), walking every ``NVML_GPU_INSTANCE_PROFILE_*``: the
  profile *ids* differ between GPU generations, the names are what people write.
* The layout is read back before anything changes: a GPU whose MIG mode and GPU
  instances (one compute instance spanning each) already match is left alone, so
  applying the applied layout makes no create, destroy or mode call at all.
* A GPU that differs is rebuilt from scratch, as nvidia-smi and mig-parted do:
  compute instances destroyed, then GPU instances, then the MIG mode set, then the
  GPU instances made largest first (smaller profiles fit around larger ones, never
  the other way round), each with one compute instance of all its slices.
* A MIG mode that NVML accepts but leaves pending (an older GPU or a driver that
  needs a GPU reset to switch) is a failure that says so, never "applied".
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Any

from nodeagent.layouts import Layout

log = logging.getLogger("accel_node_agent.mig")


class ApplyError(Exception):
    """A layout could not be applied; the message says what and where."""


@dataclass(frozen=True)
class Profile:
    constant: int  # NVML_GPU_INSTANCE_PROFILE_*
    id: int
    name: str  # "1g.10gb"
    slices: int


def _profiles(nvml: Any, handle: Any) -> dict[str, Profile]:
    """The GPU instance profiles this GPU supports, by name."""
    out: dict[str, Profile] = {}
    for constant in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, constant)
        except nvml.NVMLError:
            continue  # not on this GPU
        raw = info.name
        name = (raw.decode() if isinstance(raw, bytes) else str(raw)).removeprefix("MIG ").strip()
        out[name] = Profile(constant, int(info.id), name, int(info.sliceCount))
    return out


def _gpu_instances(
    nvml: Any, handle: Any, profiles: dict[str, Profile]
) -> list[tuple[Profile, Any]]:
    """The GPU instances now on the GPU, with their profile."""
    found: list[tuple[Profile, Any]] = []
    for p in profiles.values():
        array = (nvml.c_nvmlGpuInstance_t * 8)()
        count = ctypes.c_uint(0)
        nvml.nvmlDeviceGetGpuInstances(handle, p.id, array, ctypes.byref(count))
        found += [(p, array[k]) for k in range(count.value)]
    return found


def _compute_instances(nvml: Any, gi: Any) -> list[tuple[int, Any]]:
    """The compute instances of a GPU instance, with their profile's slice count."""
    found: list[tuple[int, Any]] = []
    shared = nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    for constant in range(int(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
        try:
            info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, constant, shared)
        except nvml.NVMLError:
            continue
        array = (nvml.c_nvmlComputeInstance_t * 8)()
        count = ctypes.c_uint(0)
        nvml.nvmlGpuInstanceGetComputeInstances(gi, info.id, array, ctypes.byref(count))
        found += [(int(info.sliceCount), array[k]) for k in range(count.value)]
    return found


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def current(nvml: Any, handle: Any) -> tuple[str, ...] | None:
    """The GPU's layout as a sorted tuple of profile names (one per GPU instance that
    has exactly one compute instance spanning it), None when MIG is off; a GPU
    instance split otherwise reads as ``"<profile>/split"`` so it never matches."""
    if not _mig_enabled(nvml, handle):
        return None
    profiles = _profiles(nvml, handle)
    out: list[str] = []
    for p, gi in _gpu_instances(nvml, handle, profiles):
        cis = _compute_instances(nvml, gi)
        out.append(p.name if [s for s, _ in cis] == [p.slices] else f"{p.name}/split")
    return tuple(sorted(out))


def _clear(nvml: Any, handle: Any) -> None:
    for _p, gi in _gpu_instances(nvml, handle, _profiles(nvml, handle)):
        for _s, ci in _compute_instances(nvml, gi):
            nvml.nvmlComputeInstanceDestroy(ci)
        nvml.nvmlGpuInstanceDestroy(gi)


def _set_mode(nvml: Any, handle: Any, name: str, enable: bool) -> None:
    mode = nvml.NVML_DEVICE_MIG_ENABLE if enable else nvml.NVML_DEVICE_MIG_DISABLE
    nvml.nvmlDeviceSetMigMode(handle, mode)
    now, pending = nvml.nvmlDeviceGetMigMode(handle)
    if now != mode:
        raise ApplyError(
            f"{name}: MIG mode {'on' if enable else 'off'} is pending (now {now}, pending "
            f"{pending}): the GPU needs a reset or the node a reboot before it takes effect"
        )


def apply_gpu(nvml: Any, index: int, layout: Layout) -> tuple[bool, str]:
    """Brings GPU ``index`` to ``layout``; returns (changed, what the GPU now has)."""
    name = f"nvidia{index}"
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    if _have(nvml, handle, layout) == _want(layout):
        return False, layout.describe()
    if layout.mig is None:
        _clear(nvml, handle)
        _set_mode(nvml, handle, name, enable=False)
        return True, layout.describe()
    if _mig_enabled(nvml, handle):
        _clear(nvml, handle)
    else:
        _set_mode(nvml, handle, name, enable=True)
    profiles = _profiles(nvml, handle)
    missing = sorted({p for p in layout.mig if p not in profiles})
    if missing:
        raise ApplyError(
            f"{name}: no MIG profile {', '.join(missing)} on this GPU "
            f"(it has {', '.join(sorted(profiles)) or 'none'})"
        )
    shared = nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    for p in sorted((profiles[n] for n in layout.mig), key=lambda p: -p.slices):
        try:
            gi = nvml.nvmlDeviceCreateGpuInstance(handle, p.id)
        except nvml.NVMLError as e:
            raise ApplyError(f"{name}: cannot create a {p.name} GPU instance: {e}") from e
        ci_profile = _whole_ci_profile(nvml, gi, p, shared)
        nvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
    log.info("%s: MIG layout %s applied (%s)", name, layout.name, layout.describe())
    return True, layout.describe()


def _whole_ci_profile(nvml: Any, gi: Any, p: Profile, shared: int) -> int:
    """The compute instance profile id that spans all of the GPU instance's slices."""
    for constant in range(int(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
        try:
            info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, constant, shared)
        except nvml.NVMLError:
            continue
        if int(info.sliceCount) == p.slices:
            return int(info.id)
    raise ApplyError(f"no compute instance profile spans a {p.name} GPU instance")


def _gpus(nvml: Any, layout: Layout) -> list[int]:
    """The NVIDIA GPUs of the node, after checking they are all of the layout's model."""
    models: list[str] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        models.append(str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(index))))
    if not models:
        raise ApplyError(f"layout {layout.name} is for {layout.model} GPUs; this node has none")
    others = sorted({m for m in models if not layout.matches(m)})
    if others:
        raise ApplyError(
            f"layout {layout.name} is for {layout.model} GPUs; this node has {', '.join(others)}"
        )
    return list(range(len(models)))


def _want(layout: Layout) -> tuple[str, ...] | None:
    return None if layout.mig is None else tuple(sorted(layout.mig))


def _have(nvml: Any, handle: Any, layout: Layout) -> tuple[str, ...] | None:
    try:
        return current(nvml, handle)
    except nvml.NVMLError as e:
        if e.value != nvml.NVML_ERROR_NOT_SUPPORTED:
            raise
        if layout.mig is None:
            return None  # not MIG-capable: already whole
        name = str(nvml.nvmlDeviceGetName(handle))
        raise ApplyError(
            f"layout {layout.name} needs MIG, which this {name} does not support"
        ) from e


def differs(nvml: Any, layout: Layout) -> bool:
    """Whether any GPU of the node would change under ``layout`` (reads only)."""
    return any(
        _have(nvml, nvml.nvmlDeviceGetHandleByIndex(i), layout) != _want(layout)
        for i in _gpus(nvml, layout)
    )


def apply(nvml: Any, layout: Layout) -> tuple[bool, dict[str, str]]:
    """Applies ``layout`` to every NVIDIA GPU of the node; all must be of its model.
    Returns (whether anything changed, per-GPU description)."""
    changed, devices = False, {}
    for index in _gpus(nvml, layout):
        did, now = apply_gpu(nvml, index, layout)
        changed |= did
        devices[f"nvidia{index}"] = now
    return changed, devices
