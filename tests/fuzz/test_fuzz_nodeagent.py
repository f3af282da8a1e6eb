"""The node agent's readers of the cluster, fuzzed with hypothesis: the request and
status annotations of the reset and reboot channel (``nodeagent.channel``), the
partition state and layout labels (``nodeagent.partition``), the reset and reboot
tasks as the loop calls them, a MIG item of the layouts file, and the NVML hold file
the agent and the exporter share for a reset (``accel_common.nvmlhold``).

Structure-aware cases start from the records the controller and the agent write, with
one to three fields replaced by a value of any type, or by JSON text no encoder
writes (nesting thousands deep, ``NaN``, ``1e999``, a 300 KB string). Every case must
give an answer: none of these readers may raise, and what the agent writes back must
read back through the same reader (an answer of its own that it could not read would
block the channel on the next round).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from accel_common import nvmlhold
from accel_common.names import (
    PARTITION_APPLIED_LABEL,
    PARTITION_LAYOUT_LABEL,
    PARTITION_STATE_ANNOTATION,
    REBOOT_REQUEST_ANNOTATION,
    REBOOT_STATUS_ANNOTATION,
    RESET_REQUEST_ANNOTATION,
    RESET_STATUS_ANNOTATION,
)
from nodeagent import channel, layouts, partition
from nodeagent.reboot import RebootTask
from nodeagent.reset import ResetTask
from nodeagent.tasks import AgentContext
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import wrong_values

DEEP = "[" * 5000 + "]" * 5000
SEEDS: list[dict[str, Any]] = [
    {"id": "fatal-device-fault-0123456789ab", "devices": ["GPU-1"], "requestedAt": "t", "by": "c"},
    {"id": "r1", "devices": [], "requestedAt": "2026-12-01T19:00:00Z", "by": "accel-autoscaler"},
    {"id": "b1", "requestedAt": "t", "by": "c", "bootID": "boot-1"},
    {"id": "r1", "state": "failed", "devices": ["GPU-1"], "message": "closed by c", "at": "t"},
    {"id": "b1", "state": "rebooting", "bootID": "boot-1", "message": "", "at": "t"},
    {"layout": "h100-half", "state": "applied", "message": "m", "devices": {"nvidia0": "2x"}},
]
# JSON text that json.dumps never writes, spliced in for one value.
HOSTILE_JSON = (
    DEEP,
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "9" * 5000,
    '"' + "x" * 300_000 + '"',
    "[" + ",".join(['"GPU-1"'] * 3000) + "]",
    '{"a": ' * 3000 + "1" + "}" * 3000,
)
_MARK = "zzhostilezz"


@st.composite
def records(draw: st.DrawFn) -> str:
    """A record as annotation text: a seed with fields replaced by wrong values, or by
    hostile JSON text in one place."""
    record = dict(draw(st.sampled_from(SEEDS)))
    keys = [*record, "id", "devices", "state", "bootID", "message"]
    for _ in range(draw(st.integers(0, 3))):
        record[draw(st.sampled_from(keys))] = draw(wrong_values)
    hostile = draw(st.none() | st.sampled_from(HOSTILE_JSON))
    if hostile is not None:
        record[draw(st.sampled_from(keys))] = _MARK
    try:
        text = json.dumps(record)
    except (ValueError, TypeError):  # a key of the wrong type: any text instead
        text = repr(record)
    if hostile is not None:
        text = text.replace(f'"{_MARK}"', hostile, 1)
    return text


values = st.one_of(
    records(),
    st.sampled_from(HOSTILE_JSON),
    st.text(max_size=200),
    wrong_values,  # not even a string: a broken object
)


def node_with(annotations: dict[str, Any], labels: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "n1", "annotations": annotations}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def context() -> AgentContext:
    return AgentContext(
        node_name="n1",
        nvml=None,
        amdsmi=None,
        sysfs_root=Path("/nonexistent"),
        holders=list,
        clock=lambda: 1_800_000_000.0,
        boot_id=lambda: "boot-1",
        reboot=lambda: None,
        nvidia_reset=None,
    )


@budget(300)
@given(raw=values)
def test_channel_requests(raw: Any) -> None:
    def read() -> None:
        for key in (RESET_REQUEST_ANNOTATION, REBOOT_REQUEST_ANNOTATION):
            found = channel.read_request(node_with({key: raw}), key)
            if isinstance(found, channel.Unreadable):
                assert found.why and len(found.id) <= channel.ID_MAX
            elif isinstance(found, channel.Request):
                assert found.id.strip() and len(found.id) <= channel.ID_MAX
                assert all(isinstance(d, str) for d in found.devices)
            else:
                assert raw is None or raw == ""

    check("nodeagent channel requests", read, ())


@budget(300)
@given(raw=values)
def test_channel_statuses(raw: Any) -> None:
    def read() -> None:
        for key in (RESET_STATUS_ANNOTATION, REBOOT_STATUS_ANNOTATION):
            found = channel.read_status(node_with({key: raw}), key)
            assert found is None or isinstance(found, (channel.Status, channel.Unreadable))

    check("nodeagent channel statuses", read, ())


@budget(300)
@given(raw=st.one_of(st.text(max_size=400), st.sampled_from(HOSTILE_JSON), records()))
def test_recover_id(raw: str) -> None:
    def read() -> None:
        rid = channel.recover_id(raw)
        assert len(rid) <= channel.ID_MAX and (not rid or raw.lstrip().startswith("{"))

    check("nodeagent recover_id", read, ())


@budget(300)
@given(raw=values, layout=wrong_values, applied=wrong_values)
def test_partition_state_and_labels(raw: Any, layout: Any, applied: Any) -> None:
    node = node_with(
        {PARTITION_STATE_ANNOTATION: raw},
        {PARTITION_LAYOUT_LABEL: layout, PARTITION_APPLIED_LABEL: applied},
    )

    def read() -> None:
        state = partition.read_state(node)
        assert isinstance(state, dict)
        for key in (PARTITION_LAYOUT_LABEL, PARTITION_APPLIED_LABEL):
            value = partition.label(node, key)
            assert value is None or (isinstance(value, str) and 0 < len(value) <= 63)
        task = partition.PartitionTask(layouts.load())
        task.reconcile(node, context())

    check("nodeagent partition readers", read, ())


@budget(300)
@given(request=values, status=values)
def test_the_tasks_answer_anything_with_what_reads_back(request: Any, status: Any) -> None:
    def run() -> None:
        for task, req_key, status_key in (
            (ResetTask(), RESET_REQUEST_ANNOTATION, RESET_STATUS_ANNOTATION),
            (RebootTask(), REBOOT_REQUEST_ANNOTATION, REBOOT_STATUS_ANNOTATION),
        ):
            node = node_with({req_key: request, status_key: status})
            patch = task.reconcile(node, context())
            written = patch.annotations.get(status_key)
            if written is None:
                continue
            back = channel.read_status(node_with({status_key: written}), status_key)
            assert isinstance(back, channel.Status), back

    check("nodeagent reset and reboot tasks", run, ())


@budget(300)
@given(
    item=st.one_of(
        st.text(max_size=200),
        st.builds(
            lambda p, sep, n, pad: f"{p}{pad}{sep}{pad}{n}",
            st.sampled_from(["1g.10gb", "3g.40gb", "7g.141gb", "1g.10gb+me", "x"]),
            st.sampled_from(["x", "×", "*", "", "y"]),
            st.one_of(st.integers(-5, 10**6).map(str), st.just("9" * 5000)),
            st.sampled_from(["", " ", " " * 100_000, "\t"]),
        ),
    )
)
def test_mig_items(item: str) -> None:
    def read() -> None:
        parsed = layouts.mig_item(item)
        if isinstance(parsed, str):
            assert parsed and len(parsed) < 600  # 40 characters shown, escaped at most 10x
        else:
            assert 1 <= parsed[1] <= layouts.MAX_INSTANCES

    check("nodeagent mig_item", read, ())


HOLD_SEEDS: list[dict[str, Any]] = [
    {"id": "fatal-device-fault-0123456789ab", "until": 1_800_000_300.0, "by": "agent"},
    {"id": "r1", "at": 1_800_000_000.0, "pid": 4242},
]


@st.composite
def hold_files(draw: st.DrawFn) -> bytes:
    """The hold or answer file: a seed with fields replaced by wrong values or hostile
    JSON, or any bytes."""
    record = dict(draw(st.sampled_from(HOLD_SEEDS)))
    for _ in range(draw(st.integers(0, 3))):
        record[draw(st.sampled_from(["id", "until", "at", "pid"]))] = draw(wrong_values)
    hostile = draw(st.none() | st.sampled_from(HOSTILE_JSON))
    if hostile is not None:
        record[draw(st.sampled_from(["id", "until"]))] = _MARK
    try:
        text = json.dumps(record)
    except (ValueError, TypeError):
        text = repr(record)
    if hostile is not None:
        text = text.replace(f'"{_MARK}"', hostile, 1)
    return text.encode()


@budget(300)
@given(raw=st.one_of(hold_files(), st.binary(max_size=300)))
def test_nvml_hold_files(raw: bytes, tmp_path_factory: Any) -> None:
    """Both programs read these files every poll or every wait: they may only answer
    a hold (within the cap), an id, None or HoldError."""
    directory = tmp_path_factory.mktemp("hold")
    (directory / nvmlhold.HOLD).write_bytes(raw)
    (directory / nvmlhold.RELEASED).write_bytes(raw)

    def read() -> None:
        try:
            hold = nvmlhold.read_hold(directory, 1_800_000_000.0)
        except nvmlhold.HoldError as e:
            assert str(e)
        else:
            assert hold is None or (
                hold.id and 1_800_000_000.0 < hold.until <= 1_800_000_000.0 + 900.0
            )
        try:
            rid = nvmlhold.read_released(directory)
        except nvmlhold.HoldError as e:
            assert str(e)
        else:
            assert rid is None or isinstance(rid, str)

    check("nvml hold files", read, ())
