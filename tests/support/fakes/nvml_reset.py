"""What a GPU reset does to the fake NVML: ``gpu_reset(bus_ids)``, the test-side
stand-in for ``nvidia-smi --gpu-reset [-i <bus ids>]`` (NVML has no public reset
call), with the rules that nvidia-smi documents.

Why it is built this way:

* The node agent's reset task calls ``ctx.nvidia_reset(bus_ids)``; in production
  that runs nvidia-smi (``nodeagent/reset.py``), in tests it is this method, so the
  task's real code meets the same refusals a real reset would.
* The rules, from the nvidia-smi manual (``-r/--gpu-reset``): without ``-i`` every
  GPU is reset; no application may be using a GPU being reset (``processes`` of
  ``nvml_procs.py``; every NVML client that has not shut down, since ``nvmlInit``
  attaches every GPU: the exporter, the agent itself; and this mixin's own ``busy``
  table for other holders, such as DCGM); GPUs joined by NVLink to a GPU being
  reset must be reset in the same command where individual reset is not possible
  (before Ampere, or on NVSwitch systems without Fabric Manager), and the command
  then names the GPUs it lacks. The fake takes that conservative rule for every
  NVLink topology: on an NVSwitch board only all GPUs together, on a direct NVLink
  board the whole set of peers. (Hopper NVSwitch boards can reset one GPU alone; the
  agent never relies on it, so the fake need not model it.)
* A reset brings a GPU back: a lost GPU answers again (``recover``), a loss that was
  scheduled (``lose(after_calls=...)``) is cancelled, its per-function error answers
  are cleared, its volatile ECC counts start again from 0, and Xid events still queued
  for it are dropped, as a driver that re-initialises the GPU would. A reset applies
  a pending row remap (``nvmlDeviceGetRemappedRows``' pending flag clears; the
  counts, and a failure, stay: a failed remap is for good) and the driver's
  recovery action goes back to ``NONE``. A GPU listed in ``unresettable`` stays
  lost: the reset "succeeds" and the GPU does not come back, which is the case a
  reboot is for. A GPU listed in ``unfixed`` comes back but keeps its fault: its
  pending remap stays pending and the driver's recovery action stands (a fault the
  reset did not cure, which the node agent's look after the reset must catch).
* Refusals raise ``GpuResetError`` with nvidia-smi's documented return codes (3: not
  available on the target, 6: no such device); ``resets`` records every reset that
  happened, as the tuple of bus ids it covered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pynvml

from exporter.backends.nvidia.device import normalize_bus_id as _norm

if TYPE_CHECKING:
    from tests.support.fakes.nvml import FakeGPU

    class _EventSetLike:
        queue: Any


# nvidia-smi's documented return codes.
NOT_AVAILABLE = 3
NOT_FOUND = 6


class GpuResetError(RuntimeError):
    """A reset nvidia-smi would refuse or fail; ``returncode`` is its exit status."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


class ResetMixin:
    """``gpu_reset`` on ``FakeNVML``; see the module docstring."""

    if TYPE_CHECKING:
        gpus: list[FakeGPU]
        _event_sets: dict[int, Any]

        def recover(self, index: int) -> None: ...

    # -- what tests set and read ------------------------------------------------------

    @property
    def busy(self) -> dict[int, list[str]]:
        """GPU index -> what holds it open besides CUDA processes (e.g. "dcgm")."""
        table: dict[int, list[str]] = self.__dict__.setdefault("_reset_busy", {})
        return table

    @property
    def unresettable(self) -> set[int]:
        """GPU indexes a reset does not bring back (they need a reboot)."""
        found: set[int] = self.__dict__.setdefault("_unresettable", set())
        return found

    @property
    def unfixed(self) -> set[int]:
        """GPU indexes a reset brings back with their fault still standing."""
        found: set[int] = self.__dict__.setdefault("_unfixed", set())
        return found

    @property
    def resets(self) -> list[tuple[str, ...]]:
        """Every reset carried out, as the NVML bus ids it covered, in order."""
        done: list[tuple[str, ...]] = self.__dict__.setdefault("_resets", [])
        return done

    # -- the reset --------------------------------------------------------------------

    def gpu_reset(self, bus_ids: Sequence[str]) -> None:
        """Reset the GPUs with these PCI bus ids (any spelling), or every GPU when
        ``bus_ids`` is empty, following nvidia-smi's rules (module docstring)."""
        by_bus = {_norm(g.bus_id): i for i, g in enumerate(self.gpus)}
        if bus_ids:
            wanted: set[int] = set()
            for b in bus_ids:
                index = by_bus.get(_norm(b))
                if index is None:
                    raise GpuResetError(f"No devices were found matching {b}", NOT_FOUND)
                wanted.add(index)
        else:
            wanted = set(range(len(self.gpus)))
        missing = sorted(self._reset_group(wanted) - wanted)
        if missing:
            names = ", ".join(self.gpus[i].bus_id for i in missing)
            raise GpuResetError(
                "Unable to reset: GPUs joined by NVLink to a GPU being reset must be reset "
                f"in the same command; also include {names}",
                NOT_AVAILABLE,
            )
        for index in sorted(wanted):
            users = self._reset_users(index)
            if users:
                raise GpuResetError(
                    f"GPU {self.gpus[index].bus_id} is currently in use by another process "
                    f"({', '.join(users)}); the reset was not carried out",
                    NOT_AVAILABLE,
                )
        for index in sorted(wanted):
            self._reset_clear(index)
        self.resets.append(tuple(self.gpus[i].bus_id for i in sorted(wanted)))

    # -- internals --------------------------------------------------------------------

    def _reset_group(self, wanted: set[int]) -> set[int]:
        """``wanted`` and every GPU that must be reset with it: all of them on an
        NVSwitch board, the NVLink peers (transitively) on a direct-NVLink board."""
        switch = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        switched = {
            i for i, g in enumerate(self.gpus) if any(kind == switch for _, kind in g.nvlink_remote)
        }
        group = set(wanted)
        if group & switched:
            group |= switched
        by_bus = {_norm(g.bus_id): i for i, g in enumerate(self.gpus)}
        todo = list(group)
        while todo:
            g = self.gpus[todo.pop()]
            for remote, kind in g.nvlink_remote:
                peer = by_bus.get(_norm(remote))
                if kind != switch and peer is not None and peer not in group:
                    group.add(peer)
                    todo.append(peer)
        return group

    def _reset_users(self, index: int) -> list[str]:
        users = [f"pid {p.pid}" for p in self._reset_processes().get(index, [])]
        # nvmlInit attaches every GPU: an NVML client that has not shut down holds
        # them all (every client of the fake shares its count, as every process on a
        # host shares the GPUs).
        clients = int(getattr(self, "init_count", 0))
        if clients > 0:
            users.append(f"{clients} NVML client(s)")
        return users + list(self.busy.get(index, []))

    def _reset_processes(self) -> dict[int, list[Any]]:
        # nvml_procs.py's table when that mixin is on the bases line.
        table = self.__dict__.get("_processes")
        return table if isinstance(table, dict) else {}

    def _reset_clear(self, index: int) -> None:
        g = self.gpus[index]
        if index in self.unresettable:
            g.lost, g.lose_after = True, None
            return
        self.recover(index)
        g.lose_xid = None
        g.errors.clear()
        for kind in list(g.ecc_volatile):
            g.ecc_volatile[kind] = 0
        if index not in self.unfixed:
            corrected, uncorrected, _, failed = g.remapped_rows
            g.remapped_rows = (corrected, uncorrected, 0, failed)
            g.recovery_action = 0  # NVML_GPU_RECOVERY_ACTION_NONE
        for es in self._event_sets.values():
            kept = [e for e in es.queue if e[0] != index]
            es.queue.clear()
            es.queue.extend(kept)


__all__ = ["NOT_AVAILABLE", "NOT_FOUND", "GpuResetError", "ResetMixin"]
