"""The sim's ResourceClaims and shared devices (issue 29): DRA and per-pod use seen
without a cluster. Claimed devices carry the NVIDIA and AMD DRA drivers' own names
and reach the right device through the renderer's DRA matching; shared devices list
per-process use that the renderer attributes to each pod."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from accel_common import names
from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, parse_sim_devices
from exporter.backends.sim_pods import IDLE_UTILIZATION, SHARED_ACCOUNTED
from exporter.cli import make_backends, parse_args
from exporter.poller import Poller
from tests.support.clock import FakeClock
from tests.support.exposition import Sample, parse

FIXED = 1_700_000_000.0
NVIDIA_NAME = re.compile(r"^gpu-\d+$")
MIG_NAME = re.compile(r"^gpu-\d+-mig-[a-z0-9]+-\d+-\d+$")
PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PARTITION_REF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]/\d$")


def sim(devices: str, *, pods: int, seed: int = 0, claims: bool, sharing: bool) -> SimBackend:
    opts = BackendOptions(
        sim_devices=parse_sim_devices(devices),
        sim_seed=seed,
        sim_partitions=True,
        sim_pods=pods,
        sim_claims=claims,
        sim_sharing=sharing,
    )
    return SimBackend(opts, clock=FakeClock(30.0))


async def exposition(backend: SimBackend) -> list[Sample]:
    poller = Poller([backend], 1, 5, clock=lambda: FIXED)
    try:
        return parse((await poller.poll_once()).text.decode())
    finally:
        await poller.stop()


def rows(samples: list[Sample], name: str) -> list[dict[str, str]]:
    return [labels for n, labels, _ in samples if n == name]


async def test_claimed_devices_carry_the_drivers_names_and_reach_their_device() -> None:
    """Across seeds, claims land on whole NVIDIA GPUs, MIG instances, whole AMD GPUs
    and AMD partitions; each row names the device as its DRA driver does (AMD's
    turned into a PCI reference through the sim's amdkfd topology, as the kubelet
    backend does), and each is matched to the device its claim holds."""
    kinds: set[str] = set()
    for seed in range(12):
        backend = sim("nvidia:4,amd:2", pods=8, seed=seed, claims=True, sharing=False)
        claimed = [p for p in backend.pods() if p.claim]
        assert claimed, seed
        samples = await exposition(backend)
        with_claim = {
            (lb["pod"], lb["device"], lb["claim"])
            for lb in rows(samples, "accel_device_pod_info")
            if "claim" in lb
        }
        vendor_of = {d.device: d.vendor for d in backend.discover()}
        for p in claimed:
            if p.resource == names.DRA_NVIDIA_GPU:
                kind = "mig" if MIG_NAME.match(p.device_id) else "nvidia"
                assert kind == "mig" or NVIDIA_NAME.match(p.device_id), p
            else:
                assert p.resource == names.DRA_AMD_GPU, p
                kind = "amd-partition" if PARTITION_REF.match(p.device_id) else "amd"
                assert kind == "amd-partition" or PCI.match(p.device_id), p
            kinds.add(kind)
            # The device the claim reached: the one whose row carries the claim.
            reached = {dev for pod, dev, claim in with_claim if (pod, claim) == (p.pod, p.claim)}
            assert reached, (seed, p)
            assert {vendor_of[d] for d in reached} == {p.resource.split(".")[1]}, (p, reached)
            if kind == "mig":
                assert all("_mig" in d for d in reached), (p, reached)
            if kind == "amd-partition":
                assert any("_p" in d for d in reached), (p, reached)
    assert kinds == {"nvidia", "mig", "amd", "amd-partition"}


async def test_without_claims_every_row_is_a_device_plugin_row() -> None:
    backend = sim("nvidia:4,amd:2", pods=6, claims=False, sharing=True)
    assert all(not p.claim for p in backend.pods())
    assert all(not p.resource.startswith(names.DRA_NVIDIA_GPU) for p in backend.pods())


async def test_sharing_attributes_each_pods_use() -> None:
    """MPS pods, a time-sliced pair, an idle pod and sole holders each get their
    per-pod use; the MPS server is a host process (pod ""); the pods' use never
    exceeds the device's, and a shared device keeps some for the host."""
    backend = sim("nvidia:8,amd:4,oneapi:2", pods=6, seed=1, claims=True, sharing=True)
    samples = await exposition(backend)
    util = {
        (lb["device"], lb["pod"]): v for n, lb, v in samples if n == "accel_pod_utilization_ratio"
    }
    device_util = {lb["device"]: v for n, lb, v in samples if n == "accel_utilization_ratio"}
    pods_on: dict[str, set[str]] = {}
    for device, pod in util:
        pods_on.setdefault(device, set()).add(pod)
    mps = [d for d, pods in pods_on.items() if {"infer-0", "infer-1", "infer-2"} <= pods]
    assert len(mps) == 1 and "" in pods_on[mps[0]], pods_on
    # One claim for the three MPS pods, as a shared ResourceClaim gives.
    claims = {
        lb["claim"]
        for lb in rows(samples, "accel_device_pod_info")
        if lb["pod"].startswith("infer-")
    }
    assert claims == {"infer-mps"}
    (idle,) = [d for d, pods in pods_on.items() if pods == {"notebook-0"}]
    assert util[(idle, "notebook-0")] == pytest.approx(IDLE_UTILIZATION)
    sliced = [d for d, pods in pods_on.items() if {"train-0", "train-5"} <= pods]
    assert len(sliced) == 1
    for device, pods in pods_on.items():
        used = sum(util[(device, p)] for p in pods if p)
        assert used <= device_util[device] + 1e-6, device
        if len(pods - {""}) > 1:
            assert used == pytest.approx(SHARED_ACCOUNTED * device_util[device], abs=1e-3)
    # A MIG instance gives no per-process figure: its one pod gets the instance's own.
    mig = [d for d in pods_on if "_mig" in d]
    assert mig and all(util[(d, next(iter(pods_on[d])))] == device_util[d] for d in mig)
    # Vendors whose backends list no processes get no per-pod use.
    assert not any(d.startswith("oneapi") for d in pods_on)


async def test_without_sharing_no_processes_are_listed() -> None:
    samples = await exposition(sim("nvidia:4", pods=3, claims=True, sharing=False))
    assert rows(samples, "accel_device_pod_info")
    assert not rows(samples, "accel_pod_utilization_ratio")


def test_the_cli_passes_claims_and_sharing(promtool_check: Callable[[str], None]) -> None:
    args, _ = parse_args(
        ["--sim-devices", "nvidia:2", "--sim-pods", "2", "--sim-claims", "--sim-sharing"]
    )
    (backend,) = make_backends(args)
    assert backend.options.sim_claims and backend.options.sim_sharing
