"""The hosts' own traffic, as node_exporter publishes it: what the stall learner's
"no member's node moves any data" reads (``autoscaler/rhythm.py``).

Why a module of its own: a training job idles every device while it writes a
checkpoint, and a stalled job idles them the same way; only the host tells the
two apart. A synchronous checkpoint *is* the write of every rank's shard of the
weights and optimizer state (tens of GB a node) to shared storage, so the nodes
of a job in a checkpoint pause transmit at storage speed; a restarted job's nodes
receive its checkpoint while it loads; a job that is stalled (a deadlock, a
dead data loader) moves nothing but the node's own small talk (the kubelet, log
shipping, scrapes). A hung collective spins on the devices and its RDMA traffic
never reaches the host's netdev counters, so it is quiet here too (the
``hung-collective`` rule reads the device links instead).

Per node, four counters, as node_exporter names them, with the node's name in
``node`` (the deploy relabels it so, as for the accelerator exporter's series):
``node_network_receive_bytes_total`` and ``node_network_transmit_bytes_total``
(``device="eth0"``), ``node_disk_read_bytes_total`` and
``node_disk_written_bytes_total`` (``device="nvme0n1"``). Rates per device held
by a run: a checkpoint pause writes ``CHECKPOINT_BYTES_PER_SECOND`` (transmit), a
restore reads as much (receive), a working device reads its input
(``INPUT_BYTES_PER_SECOND``: tokens are small); every node adds its own
background, drawn per node from the seed. Between two scrapes a counter grows at
the larger of the rates seen at the two (the simulator knows the state at
scrapes only): a stall that ends a pause never looks quiet sooner than it would.
A node that goes down publishes nothing (its series go stale), and one that comes
back starts its counters at zero, as a restarted node_exporter does.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autoscaler.promql.store import SeriesStore
from autoscaler.simulate.jobstate import PAUSE_UTILIZATION, RESTORE_UTILIZATION
from autoscaler.simulate.machines import MachineSet, Slot

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# (family, device label) of each node series, in a fixed order.
HOST_SERIES = (
    ("node_network_receive_bytes_total", "eth0"),
    ("node_network_transmit_bytes_total", "eth0"),
    ("node_disk_read_bytes_total", "nvme0n1"),
    ("node_disk_written_bytes_total", "nvme0n1"),
)
RX, TX, DISK_READ, DISK_WRITTEN = range(4)
# A checkpoint of tens of GB per node in a pause of minutes: 250 MB/s per device.
CHECKPOINT_BYTES_PER_SECOND = 250e6
# A working device's input: a few thousand tokens a second, a few bytes each.
INPUT_BYTES_PER_SECOND = 64e3
# The node's own traffic per direction (kubelet, logs, scrapes), drawn per node
# between these bounds.
BACKGROUND_BYTES_PER_SECOND = (50e3, 300e3)


class HostIO:
    """The node series of every node that is up, written at each scrape."""

    def __init__(self, machines: MachineSet, store: SeriesStore, seed: int) -> None:
        self.machines = machines
        self.store = store
        n = len(machines.slots)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 11]))
        low, high = BACKGROUND_BYTES_PER_SECOND
        self.background: F64 = rng.uniform(low, high, (len(HOST_SERIES), n))
        self.refs: I64 = np.full((len(HOST_SERIES), n), -1, dtype=np.int64)
        self.counters: F64 = np.zeros((len(HOST_SERIES), n))
        self.rates: F64 = np.zeros((len(HOST_SERIES), n))
        self.up = np.zeros(n, dtype=np.bool_)
        self.last: float | None = None
        self._stale: list[int] = []

    def node_up(self, slot: Slot) -> None:
        """A node joined or came back: new series (refs are taken again: a node
        down for longer than the store's retention lost its old ones), from zero."""
        assert slot.node is not None
        for k, (name, device) in enumerate(HOST_SERIES):
            labels = {"__name__": name, "device": device, "node": slot.node}
            self.refs[k, slot.index] = self.store.ref(labels)
        self.counters[:, slot.index] = 0.0
        self.rates[:, slot.index] = 0.0
        self.up[slot.index] = True

    def node_gone(self, slot: Slot, *, forget: bool) -> None:
        """A node went down or away: its series end at the next scrape."""
        if self.up[slot.index]:
            refs = self.refs[:, slot.index]
            self._stale.extend(int(r) for r in refs[refs >= 0])
        self.up[slot.index] = False
        if forget:
            self.refs[:, slot.index] = -1

    def _rates_now(self) -> F64:
        """Bytes per second per series and node, as the fleet is now."""
        m = self.machines
        n = len(m.slots)
        held = m.dev_job >= 0
        util = m.dev_util
        pausing = held & (util == PAUSE_UTILIZATION)
        restoring = held & (util == RESTORE_UTILIZATION)
        working = held & (util > RESTORE_UTILIZATION)
        per_slot = m.dev_slot
        rates = self.background.copy()
        for k, mask, each in (
            (TX, pausing, CHECKPOINT_BYTES_PER_SECOND),
            (RX, restoring, CHECKPOINT_BYTES_PER_SECOND),
            (RX, working, INPUT_BYTES_PER_SECOND),
        ):
            rates[k] += np.bincount(per_slot[mask], minlength=n)[:n] * each
        return rates

    def scrape(self, t: float) -> None:
        """The counters of every node that is up, stamped ``t``."""
        store = self.store
        if self._stale:
            store.append_stale(np.array(self._stale, dtype=np.int64), t)
            self._stale = []
        now = self._rates_now()
        if self.last is not None and t > self.last:
            self.counters += np.maximum(self.rates, now) * (t - self.last)
        self.rates, self.last = now, t
        live = np.flatnonzero(self.up)
        if live.size == 0:
            return
        for k in range(len(HOST_SERIES)):
            store.append(self.refs[k, live], t, self.counters[k, live])


__all__ = ["HOST_SERIES", "HostIO"]
