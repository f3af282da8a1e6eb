"""The simulated hosts' own traffic (autoscaler/simulate/hostio.py): what
node_exporter's byte counters read for a node whose job works, writes a
checkpoint, restores one, or is stalled, and a node that goes down or comes back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pytest

from autoscaler.promql.store import SeriesStore
from autoscaler.simulate.hostio import (
    BACKGROUND_BYTES_PER_SECOND,
    CHECKPOINT_BYTES_PER_SECOND,
    HOST_SERIES,
    HostIO,
)
from autoscaler.simulate.jobstate import PAUSE_UTILIZATION, RESTORE_UTILIZATION
from autoscaler.sources.store import StoreSource
from autoscaler.types import Vector


@dataclass
class _Slot:
    index: int
    node: str | None


@dataclass
class _Machines:
    """The MachineSet fields HostIO reads: two nodes of 4 devices."""

    slots: list[_Slot] = field(default_factory=lambda: [_Slot(0, "n0"), _Slot(1, "n1")])
    dev_job: npt.NDArray[np.int64] = field(default_factory=lambda: np.full(8, -1))
    dev_util: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(8))
    dev_slot: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.repeat(np.arange(2), 4).astype(np.int64)
    )


def _query(store: SeriesStore, t: float, expr: str) -> dict[str, float]:
    async def ask() -> dict[str, float]:
        result = await StoreSource(store).query(expr, t)
        assert isinstance(result, Vector)
        return {s.get("node") or "": s.value for s in result.samples}

    return asyncio.run(ask())


def _rates(store: SeriesStore, t: float, family: str) -> dict[str, float]:
    return _query(store, t, f"rate({family}[2m])")


def _hosts() -> tuple[_Machines, SeriesStore, HostIO]:
    m, store = _Machines(), SeriesStore(retention=3600.0)
    io = HostIO(m, store, seed=1)  # type: ignore[arg-type]
    for slot in m.slots:
        io.node_up(slot)  # type: ignore[arg-type]
    return m, store, io


def test_a_checkpoint_writes_a_restore_reads_and_a_stall_moves_only_the_background() -> None:
    m, store, io = _hosts()
    m.dev_job[:] = 0
    low, high = BACKGROUND_BYTES_PER_SECOND
    t = 0.0
    for state in ("work", "work", "pause", "pause", "pause", "stall", "stall", "stall"):
        m.dev_util[:4] = {"work": 0.9, "pause": PAUSE_UTILIZATION, "stall": 0.0}[state]
        m.dev_util[4:] = RESTORE_UTILIZATION  # n1: a restarted job loading
        io.scrape(t)
        if t == 240.0:  # two minutes of the pause
            tx = _rates(store, t, "node_network_transmit_bytes_total")
            assert tx["n0"] == pytest.approx(4 * CHECKPOINT_BYTES_PER_SECOND, rel=0.01)
            assert low <= tx["n1"] <= high  # n1 writes nothing
            rx = _rates(store, t, "node_network_receive_bytes_total")
            assert rx["n1"] == pytest.approx(4 * CHECKPOINT_BYTES_PER_SECOND, rel=0.01)
        t += 60.0
    # Stalled from 300 s: the last two minutes hold the background only (the
    # interval that ended the write counted at the write's rate).
    tx = _rates(store, t - 60.0, "node_network_transmit_bytes_total")
    assert low <= tx["n0"] <= high


def test_a_node_that_goes_down_ends_its_series_and_one_that_comes_back_starts_at_zero() -> None:
    m, store, io = _hosts()
    for t in (0.0, 60.0, 120.0):
        io.scrape(t)
    io.node_gone(m.slots[1], forget=False)  # type: ignore[arg-type]
    io.scrape(180.0)
    names = {name for name, _ in HOST_SERIES}
    for name in names:  # stale from 180 s: n1's series have no sample now
        assert set(_query(store, 180.0, name)) == {"n0"}
    io.node_up(m.slots[1])  # type: ignore[arg-type]
    io.scrape(240.0)
    io.scrape(300.0)
    # Back from 0: a counter reset, which rate() reads as such.
    rx = _rates(store, 300.0, "node_network_receive_bytes_total")
    assert set(rx) == {"n0", "n1"}
    low, high = BACKGROUND_BYTES_PER_SECOND
    assert low <= rx["n1"] <= high
