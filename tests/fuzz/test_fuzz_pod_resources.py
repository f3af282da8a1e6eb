"""What the kubelet backend keeps of a PodResources answer, fuzzed with hypothesis:
the DRA part of a container (``exporter.backends.kubelet._claimed``), built as
protobuf messages with claim and device counts around the caps and names around
their limits, and the same messages sent through the wire format, cut short or
flipped, as a kubelet or a broken socket might deliver them.

The property: rows come out within the caps (``MAX_CLAIMS`` claims of
``MAX_CLAIM_DEVICES`` devices per container, names within their limits), whatever
the message holds; a message that does not decode is protobuf's DecodeError, which
gRPC turns into a failed call, never a crash of the poll.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from exporter.backends.kubelet import MAX_CLAIM_DEVICES, MAX_CLAIMS, MAX_NAME, MAX_POOL, _claimed
from exporter.kubelet import podresources_pb2 as pb
from tests.fuzz.harness import budget, check

_names = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "gpu.nvidia.com", "gpu-0", "x" * MAX_NAME, "x" * (MAX_NAME + 1)]),
    st.sampled_from(["p" * MAX_POOL, "p" * (MAX_POOL + 1)]),
)


@st.composite
def containers(draw: st.DrawFn) -> pb.PodResources:
    # Counts around the caps, drawn as counts, and the names drawn once per
    # container: building 131 claims of 37 devices draw by draw would spend the
    # budget on hypothesis, not on the reader.
    driver, pool, device, first_claim = draw(_names), draw(_names), draw(_names), draw(_names)
    devices = draw(st.sampled_from([0, 1, MAX_CLAIM_DEVICES, MAX_CLAIM_DEVICES + 5]))
    claims = [
        pb.DynamicResource(
            claim_name=first_claim if c == 0 else f"claim-{c}",
            claim_resources=[
                pb.ClaimResource(driver_name=driver, pool_name=pool, device_name=device)
                for _ in range(devices)
            ],
        )
        for c in range(draw(st.sampled_from([0, 1, MAX_CLAIMS, MAX_CLAIMS + 3])))
    ]
    container = pb.ContainerResources(name="main", dynamic_resources=claims)
    return pb.PodResources(name="p", namespace="ns", containers=[container])


def _keep(pod: pb.PodResources) -> int:
    rows = 0
    for container in pod.containers:
        for row, ref in _claimed(pod, container):
            rows += 1
            assert 0 < len(row.claim) <= MAX_NAME
            assert 0 < len(ref.driver) <= MAX_NAME and 0 < len(ref.device) <= MAX_NAME
            assert len(ref.pool) <= MAX_POOL
        assert rows <= MAX_CLAIMS * MAX_CLAIM_DEVICES * len(pod.containers)
    return rows


@budget(60)
@given(pod=containers())
def test_claimed_rows_within_the_caps(pod: pb.PodResources) -> None:
    check("kubelet claimed rows", lambda: _keep(pod), ())


@budget(60)
@given(
    pod=containers(),
    cut=st.integers(0, 64),
    flip=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=4),
)
def test_claimed_rows_from_damaged_bytes(
    pod: pb.PodResources, cut: int, flip: list[tuple[int, int]]
) -> None:
    wire = bytearray(pod.SerializeToString())
    for at, mask in flip:
        if wire:
            wire[at % len(wire)] ^= mask
    data = bytes(wire[: max(0, len(wire) - cut)])

    def read() -> int:
        return _keep(pb.PodResources.FromString(data))

    check("kubelet claimed rows (wire)", read, (DecodeError,))
