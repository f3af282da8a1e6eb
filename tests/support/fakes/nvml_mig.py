"""MIG management for the fake NVML: MIG mode, GPU and compute instances made and destroyed.

Why it is built this way:

* It is a mixin of ``FakeNVML`` (its bases line), so the node agent's partition task
  and the exporter's NVIDIA backend run against one device table: a compute instance
  made here is a ``FakeMig`` in the GPU's ``migs`` list, which is exactly what the
  backend's ``nvmlDeviceGetMigDeviceHandleByIndex`` walk finds on its next poll.
* GPU instances without a compute instance have no MIG device, so they live in this
  mixin's own table (keyed by GPU index), built lazily from a GPU's existing ``migs``
  the first time a management call touches it.
* The arithmetic is NVML's on an H100 80GB: eight memory slices and seven compute
  slices, fixed placements per profile and the GPU instance ids the driver gives
  them (3g.40gb at placement 0 is GPU instance 1, 1g.10gb at placement 2 is GPU
  instance 9, as in ``h100(mig=True)``); a profile that does not fit answers
  ``InsufficientResources``; a GPU instance with compute instances in it, or MIG mode
  changed with instances present, answers ``InUse``; instance calls on a GPU outside
  MIG mode answer ``NotSupported``.
* Handles are real ``c_nvmlGpuInstance_t`` / ``c_nvmlComputeInstance_t`` pointers with
  synthetic addresses (GPU index, instance ids), and the ``*Ref`` arguments are filled
  the way the C library fills them.
* ``mig_calls`` counts the calls that change the hardware (mode, create, destroy), so
  a test can say "applying the applied layout changed nothing".
"""

from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pynvml

if TYPE_CHECKING:
    from tests.support.fakes.nvml import FakeGPU, FakeMig

_MIB = 1024**2
_GI_BASE = 0x7E00_0000_0000
_CI_BASE = 0x7D00_0000_0000
MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True)
class GpuInstanceProfile:
    """One GPU instance profile of an H100 80GB, with its placements and ids."""

    constant: int  # NVML_GPU_INSTANCE_PROFILE_*
    id: int  # what nvmlDeviceCreateGpuInstance takes
    name: str  # "1g.10gb"
    slices: int  # compute slices
    memory_slices: int
    memory_mb: int
    starts: tuple[int, ...]  # memory-slice placements, in the order NVML fills them
    gi_ids: tuple[int, ...]  # the GPU instance id at each placement


H100_PROFILES = (
    GpuInstanceProfile(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.10gb", 1, 1, 9_984,
                       (0, 1, 2, 3, 4, 5, 6), (7, 8, 9, 10, 11, 12, 13)),
    GpuInstanceProfile(pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.20gb", 2, 2, 20_096,
                       (0, 2, 4), (3, 4, 5)),
    GpuInstanceProfile(pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.40gb", 3, 4, 40_448,
                       (0, 4), (1, 2)),
    GpuInstanceProfile(pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.40gb", 4, 4, 40_448,
                       (0,), (1,)),
    GpuInstanceProfile(pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.80gb", 7, 8, 80_896,
                       (0,), (0,)),
)  # fmt: skip
_BY_CONSTANT = {p.constant: p for p in H100_PROFILES}
_BY_ID = {p.id: p for p in H100_PROFILES}
_BY_NAME = {p.name: p for p in H100_PROFILES}
# Compute instance profiles: NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE, id = constant here.
_CI_SLICES = {
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)


def _set_ref(ref: Any, value: int) -> None:
    """Writes through a ``byref(c_uint)`` or a ``pointer(c_uint)``, as C would."""
    target = getattr(ref, "_obj", None)
    if target is None:
        target = ref.contents
    target.value = value


@dataclass
class _GpuInstance:
    id: int
    profile: GpuInstanceProfile
    start: int


class MigManagementMixin:
    """The MIG management functions of ``pynvml``; see the module docstring."""

    if TYPE_CHECKING:
        gpus: list[FakeGPU]

        def _enter(
            self, fn: str, handle: Any = None, *, mig_ok: bool = False, symbol: str = ""
        ) -> tuple[FakeGPU, FakeMig | None, int]: ...

        def gpu_handle(self, index: int) -> Any: ...

    # -- the mixin's own state ------------------------------------------------------

    def _mig_table(self, index: int) -> dict[int, _GpuInstance]:
        tables: dict[int, dict[int, _GpuInstance]] = self.__dict__.setdefault("_mig_gis", {})
        if index not in tables:
            table: dict[int, _GpuInstance] = {}
            for m in self.gpus[index].migs:
                profile = _BY_NAME.get(m.profile)
                if profile is None or m.gpu_instance in table:
                    continue
                start = profile.starts[profile.gi_ids.index(m.gpu_instance)]
                table[m.gpu_instance] = _GpuInstance(m.gpu_instance, profile, start)
            tables[index] = table
        return tables[index]

    @property
    def mig_calls(self) -> Counter[str]:
        """Calls that changed (or tried to change) MIG state, by function name."""
        calls: Counter[str] = self.__dict__.setdefault("_mig_calls", Counter())
        return calls

    def _mig_gpu(self, fn: str, device: Any) -> tuple[FakeGPU, int]:
        g, _, index = self._enter(fn, device)
        if not g.mig_capable:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g, index

    def _gi_handle(self, index: int, gi: int) -> Any:
        return ctypes.cast(
            ctypes.c_void_p(_GI_BASE + (index << 16) + (gi << 8)), pynvml.c_nvmlGpuInstance_t
        )

    def _ci_handle(self, index: int, gi: int, ci: int) -> Any:
        addr = _CI_BASE + (index << 16) + (gi << 8) + ci
        return ctypes.cast(ctypes.c_void_p(addr), pynvml.c_nvmlComputeInstance_t)

    def _resolve_gi(self, fn: str, gpuInstance: Any) -> tuple[FakeGPU, int, _GpuInstance]:
        if not isinstance(gpuInstance, pynvml.c_nvmlGpuInstance_t):
            raise ctypes.ArgumentError(f"expected a c_nvmlGpuInstance_t, got {type(gpuInstance)!r}")
        addr = ctypes.cast(gpuInstance, ctypes.c_void_p).value or 0
        index, gi = (addr - _GI_BASE) >> 16, ((addr - _GI_BASE) >> 8) & 0xFF
        if not 0 <= index < len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        g, _, _ = self._enter(fn, self.gpu_handle(index))
        found = self._mig_table(index).get(gi)
        if found is None or not g.mig_enabled:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g, index, found

    def _cis_of(self, g: FakeGPU, gi: int) -> list[FakeMig]:
        return [m for m in g.migs if m.gpu_instance == gi]

    def _ci_profile(self, index: int, gi: _GpuInstance, ci: int) -> int:
        """The compute instance profile a CI was made with; a CI the GPU came with
        spans its whole GPU instance."""
        made: dict[tuple[int, int, int], int] = self.__dict__.setdefault("_ci_profiles", {})
        whole = next(c for c, s in _CI_SLICES.items() if s == gi.profile.slices)
        return int(made.get((index, gi.id, ci), whole))

    # -- MIG mode -------------------------------------------------------------------

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        g, index = self._mig_gpu("nvmlDeviceSetMigMode", device)
        self.mig_calls["nvmlDeviceSetMigMode"] += 1
        if mode not in (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_DISABLE):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        enable = mode == pynvml.NVML_DEVICE_MIG_ENABLE
        if enable != g.mig_enabled and self._mig_table(index):
            _raise(pynvml.NVML_ERROR_IN_USE)  # instances must be destroyed first
        g.mig_enabled = enable
        return int(pynvml.NVML_SUCCESS)  # the activation status

    # -- GPU instances --------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        self._mig_gpu("nvmlDeviceGetGpuInstanceProfileInfo", device)
        p = _BY_CONSTANT.get(profile)
        if p is None:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if version == 2:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {p.name}".encode()
        elif version == 1:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_t()
        else:
            _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id, info.sliceCount, info.instanceCount = p.id, p.slices, len(p.starts)
        info.memorySizeMB, info.multiprocessorCount = p.memory_mb, p.slices * 16
        return info

    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        g, index = self._mig_gpu("nvmlDeviceCreateGpuInstance", device)
        self.mig_calls["nvmlDeviceCreateGpuInstance"] += 1
        if not g.mig_enabled:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        p = _BY_ID.get(profileId)
        if p is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        table = self._mig_table(index)
        used_memory = {
            s for t in table.values() for s in range(t.start, t.start + t.profile.memory_slices)
        }
        used_compute = sum(t.profile.slices for t in table.values())
        if used_compute + p.slices > COMPUTE_SLICES:
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        for start, gi in zip(p.starts, p.gi_ids, strict=True):
            if gi in table or used_memory & set(range(start, start + p.memory_slices)):
                continue
            table[gi] = _GpuInstance(gi, p, start)
            return self._gi_handle(index, gi)
        _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        g, index, gi = self._resolve_gi("nvmlGpuInstanceDestroy", gpuInstance)
        self.mig_calls["nvmlGpuInstanceDestroy"] += 1
        if self._cis_of(g, gi.id):
            _raise(pynvml.NVML_ERROR_IN_USE)
        del self._mig_table(index)[gi.id]
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        g, index = self._mig_gpu("nvmlDeviceGetGpuInstances", device)
        if not g.mig_enabled:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        found = [t for t in self._mig_table(index).values() if t.profile.id == profileId]
        if len(found) > len(gpuInstancesRef):
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for k, t in enumerate(sorted(found, key=lambda t: t.id)):
            gpuInstancesRef[k] = self._gi_handle(index, t.id)
        _set_ref(countRef, len(found))
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        _, index, gi = self._resolve_gi("nvmlGpuInstanceGetInfo", gpuInstance)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = self.gpu_handle(index)
        info.id, info.profileId = gi.id, gi.profile.id
        info.placement.start, info.placement.size = gi.start, gi.profile.memory_slices
        return info

    # -- compute instances ----------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        # pynvml calls the GPU instance "device" here; it is a GPU instance handle.
        _, _, gi = self._resolve_gi("nvmlGpuInstanceGetComputeInstanceProfileInfo", device)
        slices = _CI_SLICES.get(profile)
        if (
            slices is None
            or slices > gi.profile.slices
            or engProfile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        ):
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if version == 2:
            info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
            info.name = f"MIG {slices}c.{gi.profile.name}".encode()
        elif version == 1:
            info = pynvml.c_nvmlComputeInstanceProfileInfo_t()
        else:
            _raise(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id, info.sliceCount = profile, slices
        info.instanceCount = gi.profile.slices // slices
        info.multiprocessorCount = slices * 16
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        from tests.support.fakes.nvml import FakeMig, fake_uuid  # the module that bases on us

        g, index, gi = self._resolve_gi("nvmlGpuInstanceCreateComputeInstance", gpuInstance)
        self.mig_calls["nvmlGpuInstanceCreateComputeInstance"] += 1
        slices = _CI_SLICES.get(profileId)
        if slices is None or slices > gi.profile.slices:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        present = self._cis_of(g, gi.id)
        used = sum(_CI_SLICES[self._ci_profile(index, gi, m.compute_instance)] for m in present)
        if used + slices > gi.profile.slices:
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci = next(c for c in range(8) if all(m.compute_instance != c for m in present))
        slot = next(s for s in range(7) if all(m.slot != s for m in g.migs))
        made: Counter[str] = self.__dict__.setdefault("_mig_made", Counter())
        made[g.uuid] += 1
        self.__dict__.setdefault("_ci_profiles", {})[(index, gi.id, ci)] = profileId
        g.migs.append(
            FakeMig(
                slot=slot,
                gpu_instance=gi.id,
                compute_instance=ci,
                profile=gi.profile.name,
                uuid=fake_uuid("MIG", f"{g.uuid}-gi{gi.id}-ci{ci}-{made[g.uuid]}"),
                memory_total=gi.profile.memory_mb * _MIB,
                memory_used=0,
            )
        )
        return self._ci_handle(index, gi.id, ci)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        g, index, gi = self._resolve_gi("nvmlGpuInstanceGetComputeInstances", gpuInstance)
        found = [
            m
            for m in self._cis_of(g, gi.id)
            if self._ci_profile(index, gi, m.compute_instance) == profileId
        ]
        if len(found) > len(computeInstancesRef):
            _raise(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for k, m in enumerate(found):
            computeInstancesRef[k] = self._ci_handle(index, gi.id, m.compute_instance)
        _set_ref(countRef, len(found))
        return int(pynvml.NVML_SUCCESS)

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        if not isinstance(computeInstance, pynvml.c_nvmlComputeInstance_t):
            raise ctypes.ArgumentError(
                f"expected a c_nvmlComputeInstance_t, got {type(computeInstance)!r}"
            )
        addr = (ctypes.cast(computeInstance, ctypes.c_void_p).value or 0) - _CI_BASE
        index, gi, ci = addr >> 16, (addr >> 8) & 0xFF, addr & 0xFF
        if not 0 <= index < len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        g, _, _ = self._enter("nvmlComputeInstanceDestroy", self.gpu_handle(index))
        self.mig_calls["nvmlComputeInstanceDestroy"] += 1
        self._mig_table(index)  # built before the instance leaves ``migs``
        for m in g.migs:
            if m.gpu_instance == gi and m.compute_instance == ci:
                g.migs.remove(m)
                return int(pynvml.NVML_SUCCESS)
        _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
