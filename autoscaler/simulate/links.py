"""The device-link traffic of the simulated fleet's jobs: what the simulated
``accel_link_throughput_bytes_per_second`` reads.

Why a module of its own: a hung collective (``collective_hang``, a hung NCCL
ring) looks like a running job in every series but this one (its kernels spin,
so the devices stay busy), so the links must follow the jobs faithfully: a job
across several devices sends and receives over their device links in proportion
to its load; a one-device job, an idle device, a stalled job and a hung one send
nothing. The jobs and gangs say when a run starts (``busy``) and when it stops
or hangs (``quiet``); the telemetry multiplies each device's figure here by its
reported utilization.

Which vendors publish the family at all is what their real backends read
(``exporter/schema.py``'s sources): NVIDIA (NVLink throughput fields) and AMD
(xGMI accumulators). Gaudi's, Ascend's, TPU's and Intel's backends publish none,
so their devices have no such series here either.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autoscaler.simulate.machines import MachineSet

# Bytes per second on each device link at full load: half a link's rate, as the
# exporter's sim backend has it (exporter/backends/sim.py with sim_models.py:
# 25 GB/s per NVLink 4 link, 64 GB/s per xGMI link). Both directions alike: a
# ring all-reduce sends what it receives.
LINK_BYTES_PER_SECOND = {"nvidia": 25e9 * 0.5, "amd": 64e9 * 0.5}


class DeviceLinks:
    """Per device: ``peak``, its link bytes/s per unit of load (0 where its vendor
    publishes no link throughput), and ``now``, that of the run on it (0: idle, a
    one-device job, stalled or hung)."""

    def __init__(self, machines: MachineSet) -> None:
        slots = machines.slots
        self.peak: npt.NDArray[np.float64] = np.repeat(
            [LINK_BYTES_PER_SECOND.get(s.pool.vendor, 0.0) for s in slots],
            [s.pool.devices_per_node for s in slots],
        ).astype(np.float64)
        self.now: npt.NDArray[np.float64] = np.zeros(machines.device_count, dtype=np.float64)

    def busy(self, devices: npt.NDArray[np.int64]) -> None:
        """A run on ``devices`` starts: it talks over their links if it has more than one."""
        self.now[devices] = self.peak[devices] if devices.size > 1 else 0.0

    def quiet(self, devices: npt.NDArray[np.int64]) -> None:
        """The run on ``devices`` stopped, hung or left."""
        self.now[devices] = 0.0


__all__ = ["LINK_BYTES_PER_SECOND", "DeviceLinks"]
