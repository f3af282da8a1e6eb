"""The node agent's partition path reads the vendor table (``accel_common.agentsupport``):
every shipped layout's kinds belong to the vendor the table gives them, and a layout
for a vendor the table gives no partition kind is answered ``failed`` with the
table's reason, with nothing touched."""

from __future__ import annotations

import json
from pathlib import Path

from accel_common.agentsupport import SUPPORT, can_partition, partition_vendor
from accel_common.names import PARTITION_LAYOUT_LABEL, PARTITION_STATE_ANNOTATION
from nodeagent import layouts
from nodeagent.layouts import Layout
from nodeagent.partition import PartitionTask
from nodeagent.tasks import AgentContext
from tests.support.fakes.nvml import FakeNVML, h100


def test_every_shipped_layout_is_for_a_vendor_that_takes_its_kinds() -> None:
    shipped = layouts.load()
    assert shipped
    for layout in shipped.values():
        for kind in layout.kinds:
            assert partition_vendor(kind) == layout.vendor, layout.name
            assert can_partition(layout.vendor, kind), layout.name
    partitioned = {v for v, s in SUPPORT.items() if s.partitions}
    assert {layout.vendor for layout in shipped.values()} == partitioned


def test_a_layout_for_a_vendor_without_partitions_fails_with_the_tables_reason(
    tmp_path: Path,
) -> None:
    fake = FakeNVML([h100(0)])
    fake.nvmlInit()
    ctx = AgentContext(
        node_name="tpu-1",
        nvml=fake,
        amdsmi=None,
        sysfs_root=tmp_path,
        holders=lambda: [],
        clock=lambda: 1_800_000_000.0,
        boot_id=lambda: "boot-1",
        reboot=lambda: None,
        nvidia_reset=None,
    )
    task = PartitionTask({"v5e-split": Layout("v5e-split", "H100", "tpu", mig=("1g.10gb",))})
    node = {"metadata": {"name": "tpu-1", "labels": {PARTITION_LAYOUT_LABEL: "v5e-split"}}}
    patch = task.reconcile(node, ctx)
    raw = patch.annotations[PARTITION_STATE_ANNOTATION]
    assert raw is not None
    state = json.loads(raw)
    assert state["state"] == "failed"
    assert "no partition layout to Google TPU devices" in state["message"]
    assert fake.gpus[0].mig_enabled is False  # nothing was touched
