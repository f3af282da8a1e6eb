"""Every catalogued fault code's action class, held to the source it cites (issue 34),
and the operator's fault tables (``--fault-table``) that can replace them.

The consistency tests read each entry's ``source``: an entry that cites a bucket of
NVIDIA's Xid catalog must have the class that bucket maps to, one that cites a
MindCluster level the class of that level; the acceptance table pins the codes the
issue names, so a class cannot drift from its vendor's word unnoticed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from accel_common.remedies import ACTION_CLASSES, LOST_CODE, UNKNOWN_CLASS
from exporter import faults
from exporter.faults import tables
from exporter.faults.ascend import LEVEL_CLASSES
from exporter.faults.nvidia import XID_CATALOG
from tests.support.paths import REPO

ALL = [(vendor, fc) for vendor, table in faults.CATALOGUES.items() for fc in table.values()]


@pytest.mark.parametrize(("vendor", "fc"), ALL, ids=[f"{v}:{fc.code}" for v, fc in ALL])
def test_every_code_has_a_class_and_a_source(vendor: str, fc: faults.FaultCode) -> None:
    assert fc.action in ACTION_CLASSES
    assert fc.source.strip(), f"{vendor} {fc.code} cites no source"
    assert fc.name.strip() and fc.reason.strip()


XID_BUCKET = re.compile(re.escape(XID_CATALOG) + r": ([A-Z0-9_/]+)(?:$|;| \()")
# Codes graded above their bucket, each for a reason its entry gives: Xid 92's
# IGNORE comes with CONTACT_SUPPORT to investigate (a degrading memory is watched);
# Xid 94's RESTART_APP leaves a row remap pending that only a reset applies.
RAISED = {"92": "watch", "94": "reset_when_idle"}
# The step a workflow entry names: "(default without payload: RESET_GPU)".
WORKFLOW_STEP = re.compile(r"\((?:default without payload: |with other Xids: )?([^)]+)\)")
WORKFLOW_CLASSES = {
    "RESET_GPU": "reset",
    "IGNORE": "ignore",
    "watch": "watch",
    "drain and reset": "reset",
}


@pytest.mark.parametrize(
    "fc",
    [fc for fc in faults.NVIDIA_XID.values() if fc.source.startswith(XID_CATALOG)],
    ids=lambda fc: fc.code,
)
def test_xid_class_is_its_catalog_bucket(fc: faults.FaultCode) -> None:
    m = XID_BUCKET.match(fc.source)
    assert m, fc.source
    bucket = m.group(1)
    if bucket.startswith(tables.WORKFLOW_PREFIXES):
        # A workflow: the source names the step the entry takes, in brackets.
        step = WORKFLOW_STEP.search(fc.source)
        assert step, fc.source
        assert fc.action == WORKFLOW_CLASSES[step.group(1)], (fc.code, step.group(1))
        return
    assert fc.action == RAISED.get(fc.code, tables.NVIDIA_BUCKETS[bucket]), (fc.code, bucket)


@pytest.mark.parametrize(
    "fc",
    [fc for fc in faults.ASCEND_ALARMS.values() if "MindCluster faultCode.json" in fc.source],
    ids=lambda fc: fc.code,
)
def test_ascend_class_is_its_mindcluster_level(fc: faults.FaultCode) -> None:
    level = fc.source.rsplit(": ", 1)[1]
    assert fc.action == LEVEL_CLASSES[level], (fc.code, level)


# The acceptance points of issue 34, and the vendor statements the brief names.
EXPECTED = [
    ("nvidia", "79", "reboot", "fatal"),
    *[("nvidia", x, "reset", "fatal") for x in ("109", "110", "136", "155", "156", "158")],
    ("nvidia", "43", "ignore", "info"),
    ("nvidia", "68", "app", "info"),
    ("nvidia", "69", "app", "info"),
    ("nvidia", "13", "app", "info"),
    ("nvidia", "31", "app", "info"),
    ("nvidia", "63", "reset_when_idle", "recoverable"),
    ("nvidia", "94", "reset_when_idle", "recoverable"),
    ("nvidia", "64", "isolate", "fatal"),
    ("nvidia", "remap_pending", "reset_when_idle", "recoverable"),
    ("nvidia", "remap_failure", "isolate", "fatal"),
    *[("nvidia", str(x), "watch", "recoverable") for x in range(144, 151)],
    ("nvidia", "154", "watch", "recoverable"),
    ("amd", "bad_page_threshold", "isolate", "fatal"),
    ("gaudi", "remap_pending", "reset_when_idle", "recoverable"),
    ("oneapi", "reset_repair", "reset_when_idle", "recoverable"),
    ("oneapi", "reset_wedged", "reset", "fatal"),
    ("ascend", "0x80E01801", "app", "recoverable"),  # RestartBusiness
    ("ascend", "0x80E18402", "isolate", "fatal"),  # SeparateNPU
    ("ascend", "0x80C98009", "reset", "recoverable"),  # RestartRequest
    ("ascend", "0x40F84E00", "reset", "fatal"),  # RestartNPU
    ("ascend", "0x80E21007", "ignore", "info"),  # NotHandleFault
    *[(v, LOST_CODE, "reboot", "fatal") for v in faults.CATALOGUES],
    ("cpu", LOST_CODE, "reboot", "fatal"),  # a vendor without a table of its own
]


@pytest.mark.parametrize(("vendor", "code", "action", "severity"), EXPECTED)
def test_acceptance_classes(vendor: str, code: str, action: str, severity: str) -> None:
    assert faults.action(vendor, code) == action
    assert faults.classify(vendor, code) == severity


def test_unknown_code_is_watched_not_reset() -> None:
    assert faults.action("nvidia", "999") == UNKNOWN_CLASS == "watch"
    assert faults.classify("nvidia", "999") == "recoverable"


def test_live_verdict_raises_never_lowers() -> None:
    assert faults.action("nvidia", "119", "reboot") == "reboot"  # reset-class Xid
    assert faults.action("nvidia", "79", "ignore") == "reboot"
    assert faults.action("nvidia", "145", "reset") == "reset"  # NVLink5 by the driver
    assert faults.action("nvidia", "999", "isolate") == "isolate"


def test_live_verdict_raises_the_severity_with_the_class() -> None:
    assert faults.BUILTIN.severity("nvidia", "154", "reboot") == "fatal"
    assert faults.BUILTIN.severity("nvidia", "154", "reset_when_idle") == "recoverable"
    assert faults.BUILTIN.severity("nvidia", "79", "ignore") == "fatal"
    assert faults.BUILTIN.severity("nvidia", "13", None) == "info"


def test_texts_the_issue_names_are_fixed() -> None:
    assert "driver recovers" not in faults.NVIDIA_XID["109"].reason
    assert "reset or a reboot" not in faults.NVIDIA_XID["79"].reason
    assert "RESTART_APP" not in faults.NVIDIA_XID["43"].reason
    assert faults.NVIDIA_XID["43"].source.endswith("IGNORE")


def test_pairs_start_every_severity_and_the_lost_class() -> None:
    for vendor in (*faults.CATALOGUES, "cpu"):
        pairs = faults.BUILTIN.pairs(vendor)
        assert {s for s, _ in pairs} == {"fatal", "recoverable", "info"}, vendor
        assert ("fatal", "reboot") in pairs and ("recoverable", "watch") in pairs


# -- operator tables ----------------------------------------------------------------

XID_CSV = """\
Type (XID),Code,Mnemonic,Description,Applies to A100,Applies to H100,\
Resolution Bucket (Immediate Action),Resolution Bucket (Investigatory Action)
XID,79,GPU_FALLEN_OFF,GPU has fallen off the bus,YES,YES,RESTART_BM,CONTACT_SUPPORT
XID,13,GR_EXCEPTION,Graphics Engine Exception,YES,YES,RESTART_APP,WORKFLOW_XID_13
XID,48,DBE,Double Bit ECC Error,YES,YES,WORKFLOW_XID_48,WORKFLOW_XID_48
XID,171,NEW_CODE,A code of a newer driver,NO,YES,RESET_GPU,CONTACT_SUPPORT
XID,172,NEW_WORKFLOW,A workflow code the built-in table lacks,NO,YES,WORKFLOW_NEW,
SXID,20001,SWITCH,An NVSwitch code,NO,NO,RESTART_BM,

"""


def test_xid_catalog_csv_adds_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "xid.csv"
    path.write_text(XID_CSV)
    cat = faults.BUILTIN.overlay("nvidia", tables.load("nvidia", path, faults.NVIDIA_XID))
    assert cat.action("nvidia", "171") == "reset" and cat.classify("nvidia", "171") == "fatal"
    assert cat.lookup("nvidia", "171").name == "A code of a newer driver"  # type: ignore[union-attr]
    assert cat.lookup("nvidia", "171").source == "xid.csv: RESET_GPU"  # type: ignore[union-attr]
    assert cat.action("nvidia", "79") == "reboot"
    assert cat.action("nvidia", "48") == "reset"  # a workflow keeps the built-in class
    assert cat.action("nvidia", "172") == UNKNOWN_CLASS  # ... or the unknown one
    assert cat.lookup("nvidia", "20001") is None  # SXid rows are not Xids
    assert cat.action("nvidia", "43") == "ignore"  # untouched codes stay built-in
    assert faults.BUILTIN.lookup("nvidia", "171") is None  # the built-in is unchanged


MINDCLUSTER = """{
  "NotHandleFaultCodes": ["80E21007"],
  "RestartBusinessCodes": ["80E01801", "A8028802"],
  "RestartRequestCodes": ["80C98008"],
  "SeparateNPUCodes": ["80E18402", "817F8002"],
  "PreSeparateNPUCodes": ["80E3A202"],
  "SubHealthFaultCodes": ["80CD8008"]
}
"""


def test_mindcluster_fault_code_json(tmp_path: Path) -> None:
    path = tmp_path / "faultCode.json"
    path.write_text(MINDCLUSTER)
    cat = faults.BUILTIN.overlay("ascend", tables.load("ascend", path, {}))
    assert cat.action("ascend", "0xA8028802") == "app"
    assert cat.action("ascend", "0x817F8002") == "isolate"
    assert cat.classify("ascend", "0x817F8002") == "fatal"
    assert cat.action("ascend", "0x80E3A202") == "reset_when_idle"
    assert cat.action("ascend", "0x80CD8008") == "watch"
    assert cat.action("ascend", "0x80C98008") == "reset"
    assert cat.action("ascend", "0x80E21007") == "ignore"


def test_mindcluster_flat_code_to_level(tmp_path: Path) -> None:
    path = tmp_path / "levels.json"
    path.write_text('{"0x80E18402": "SeparateNPU", "8C204E00": "RestartBusiness"}')
    entries = {e.code: e.action for e in tables.load("ascend", path, {})}
    assert entries == {"0x80E18402": "isolate", "0x8C204E00": "app"}


@pytest.mark.parametrize(
    ("vendor", "text", "where", "what"),
    [
        ("nvidia", "Code,Mnemonic\n79,X\n", ":1:", "no 'Code' column or no 'Immediate Action'"),
        (
            "nvidia",
            XID_CSV.replace("RESTART_APP,WORKFLOW", "REPLACE_GPU,WORKFLOW"),
            ":3:",
            "unknown immediate action 'REPLACE_GPU'",
        ),
        ("nvidia", XID_CSV.replace("XID,171", "XID,17x"), ":5:", "'17x' is not an Xid number"),
        ("nvidia", "", ":1:", "the file is empty"),
        ("ascend", '{\n  "SeparateNPUCodes": ["80E18402",\n', ":3:", "not JSON"),
        ("ascend", '{\n  "IsolateCodes": ["80E18402"]\n}\n', ":2:", "unknown MindCluster level"),
        ("ascend", '{\n  "SeparateNPUCodes": [\n    "zz"\n  ]\n}\n', ":3:", "not hexadecimal"),
        ("ascend", '{\n  "SeparateNPUCodes": 7\n}\n', ":2:", "must be a list of codes"),
        ("ascend", "[1, 2]", ":1:", "expected an object"),
    ],
)
def test_bad_tables_name_file_and_line(
    tmp_path: Path, vendor: str, text: str, where: str, what: str
) -> None:
    path = tmp_path / "table"
    path.write_text(text)
    with pytest.raises(tables.FaultTableError) as e:
        tables.load(vendor, path, {})
    assert f"{path}{where}" in str(e.value)
    assert what in str(e.value)


def test_unreadable_and_binary_tables_are_refused(tmp_path: Path) -> None:
    with pytest.raises(tables.FaultTableError, match="cannot read"):
        tables.load("nvidia", tmp_path / "missing.csv", {})
    with pytest.raises(tables.FaultTableError, match="cannot read"):
        tables.load("nvidia", tmp_path, {})  # a directory, not a file
    path = tmp_path / "bin.csv"
    path.write_bytes(b"Code,Immediate Action\n\xff\xfe\n")
    with pytest.raises(tables.FaultTableError, match=r"bin\.csv:2:1: byte 0xff"):
        tables.load("nvidia", path, {})


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_cli_refuses_a_bad_table_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "xid.csv"
    path.write_text(XID_CSV.replace("XID,171", "XID,17x"))
    proc = run("--fault-table", f"nvidia={path}", "--sim-devices", "nvidia:1", "--once")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"accel-exporter: error: --fault-table: {path}:5: ")
    proc = run("--fault-table", "cuda=/x.csv", "--once")
    assert proc.returncode == 2
    assert "no fault table format for 'cuda'" in proc.stderr


@pytest.mark.slow
def test_cli_loads_a_table_and_help_shows_an_example(tmp_path: Path) -> None:
    path = tmp_path / "xid.csv"
    path.write_text(XID_CSV)
    proc = run(
        "--fault-table",
        f"nvidia={path}",
        "--sim-devices",
        "nvidia:1",
        "--once",
        "--log.level",
        "info",
    )
    assert proc.returncode == 0, proc.stderr
    assert f"fault table {path}: 5 codes for nvidia" in proc.stderr
    # The new code's class is among the counters a device starts with at 0.
    assert 'severity="fatal",action="reset"' in proc.stdout
    help_text = run("--help").stdout
    assert "--fault-table VENDOR=FILE" in help_text
    assert "nvidia=/etc/accel/xid-catalog.csv" in help_text
