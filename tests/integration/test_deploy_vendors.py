"""The gaudi, ascend and tpu overlays give their backend what it reads: the vendor
library from the host where the backend looks for it, the device nodes (or, for the
TPU, the node's loopback where libtpu serves its metrics), and the device plugin
resource's taint. Rendering and schema validation are in test_deploy.py."""

from __future__ import annotations

import pytest

from accel_common import names
from exporter.backends.ascend.dcmi import LIBRARY_CANDIDATES
from exporter.backends.ascend.npusmi import CANDIDATES as NPU_SMI_CANDIDATES
from exporter.backends.base import BackendOptions
from exporter.backends.gaudi.hlml import LIBRARY_PATHS
from tests.integration.test_deploy import container, one, rendered

pytestmark = pytest.mark.slow


def _exporter(overlay: str) -> tuple[dict[str, object], dict[str, object]]:
    daemonset = one(rendered(overlay), "DaemonSet", "accel-exporter")
    return daemonset["spec"]["template"]["spec"], container(daemonset, "exporter")


def _mounts(c: dict[str, object], spec: dict[str, object]) -> dict[str, dict[str, object]]:
    """mountPath -> the hostPath volume behind it."""
    volumes = {v["name"]: v for v in spec["volumes"]}  # type: ignore[attr-defined]
    return {
        m["mountPath"]: volumes[m["name"]].get("hostPath", {})
        for m in c["volumeMounts"]  # type: ignore[attr-defined]
    }


@pytest.mark.parametrize(
    ("overlay", "vendor"), [("gaudi", "gaudi"), ("ascend", "ascend"), ("tpu", "tpu")]
)
def test_each_overlay_tolerates_its_device_plugins_taint(overlay: str, vendor: str) -> None:
    spec, _ = _exporter(overlay)
    keys = {t["key"] for t in spec["tolerations"]}  # type: ignore[attr-defined]
    assert names.VENDOR_RESOURCE[vendor] in keys


def test_gaudi_overlay_mounts_hlml_where_the_backend_looks() -> None:
    spec, c = _exporter("gaudi")
    mounts = _mounts(c, spec)
    (library,) = [p for p in LIBRARY_PATHS if p.startswith("/")]
    directory = library.rsplit("/", 1)[0]
    assert mounts[directory]["path"] == directory
    env = {e["name"]: e["value"] for e in c["env"]}  # type: ignore[attr-defined]
    assert env["HABANA_VISIBLE_DEVICES"] == "all"
    assert "privileged" not in c["securityContext"]  # type: ignore[operator]


def test_ascend_overlay_mounts_dcmi_and_npu_smi_where_the_backend_looks() -> None:
    spec, c = _exporter("ascend")
    mounts = _mounts(c, spec)
    driver = [p for p in LIBRARY_CANDIDATES if p.startswith("/usr/local/Ascend/driver/")]
    assert driver and all(p.startswith("/usr/local/Ascend/driver/") for p in driver)
    assert mounts["/usr/local/Ascend/driver"]["path"] == "/usr/local/Ascend/driver"
    assert NPU_SMI_CANDIDATES[0] in mounts
    assert mounts[NPU_SMI_CANDIDATES[0]]["type"] == "File"
    assert c["securityContext"]["privileged"] is True  # type: ignore[index]


def test_tpu_overlay_shares_the_nodes_loopback_with_libtpu() -> None:
    spec, c = _exporter("tpu")
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    # The backend's default address is the node's loopback, which hostNetwork reaches.
    assert BackendOptions.tpu_runtime_address.startswith("localhost:")
    assert not any("--tpu.runtime-address" in a for a in c["args"])  # type: ignore[attr-defined]
    assert "privileged" not in c["securityContext"]  # type: ignore[operator]


def test_nvidia_overlay_gives_the_exporter_the_kernel_log_read_only() -> None:
    """NVLink Xid payloads come from the kernel log (exporter/backends/nvidia/kmsg.py):
    the NVIDIA overlay mounts the host's /dev/kmsg where --path.kmsg looks by
    default, read-only, and adds CAP_SYSLOG alone to the dropped set."""
    spec, c = _exporter("nvidia")
    mounts = _mounts(c, spec)
    assert mounts["/dev/kmsg"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    kmsg = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/kmsg"]  # type: ignore[attr-defined]
    assert kmsg[0]["readOnly"] is True
    caps = c["securityContext"]["capabilities"]  # type: ignore[index]
    assert caps == {"add": ["SYSLOG"], "drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False  # type: ignore[index]
