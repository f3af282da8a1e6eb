"""The simulator's work limits: a scenario that asks for too much (a pool of a
hundred million nodes, a duration of centuries, more jobs or faults than a run can
hold) is refused before anything is built, at the value that asks for it, with the
limit and the flag that raises it; exit 2, within 10 s and 1 GiB. Not slow: no
simulation runs here."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoscaler.simulate.limits import WorkLimits
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from tests.support.paths import REPO

GIB = 1024**3

# A small, valid scenario; each test swaps one value for a hostile one.
BASE = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 24h
  evaluationInterval: 30s
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 4, min: 2, max: 6}
  workload:
    arrivalsPerHour: 14
    sizes: {1: 4, 8: 1}
    duration: {distribution: fixed, value: 2h}
  faults:
    ratesPerDeviceHour: {fatal: 0.001}
    events:
      - {at: 3h, kind: fatal, node: h100-0001, device: nvidia2}
"""


def scenario(tmp_path: Path, old: str = "", new: str = "") -> Path:
    assert old in BASE
    path = tmp_path / "scenario.yaml"
    path.write_text(BASE.replace(old, new, 1))
    return path


def problems(path: Path, limits: WorkLimits | None = None) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        if limits is None:
            load_scenario(path)
        else:
            load_scenario(path, limits=limits)
    return str(err.value).splitlines()


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB))


def simulate(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``accel-autoscaler simulate`` in a child capped at 1 GiB."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "simulate", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limited,
    )
    return proc, time.monotonic() - start


def test_the_base_scenario_loads(tmp_path: Path) -> None:
    assert load_scenario(scenario(tmp_path)).initial_nodes["h100"][-1] == "h100-0003"


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        (
            "initial: 4, min: 2, max: 6",
            "initial: 100000000, min: 2, max: 100000000",
            ":7:88: ",
            "pool 'h100' (100,000,000 nodes x 8 devices) is 800,000,000 devices, over the "
            "simulator's limit of 20,000 devices; lower its initial and max, or raise the "
            "limit with --max-devices",
        ),
        (
            "duration: 24h",
            "duration: 200y",
            ":4:13: ",
            "duration / evaluationInterval (1,752,000 h every 30s) is 210,240,000 evaluations,"
            " over the simulator's limit of 1,000,000 evaluations; shorten duration or "
            "lengthen evaluationInterval, or raise the limit with --max-evaluations",
        ),
        (
            "duration: 24h",
            "duration: 99999999999999999999999999999999y",
            ":4:13: ",
            "out of range",
        ),
    ],
    ids=["pool-of-100-million", "duration-200y", "duration-beyond-range"],
)
def test_the_command_refuses_with_the_position_and_the_limit(
    tmp_path: Path, old: str, new: str, where: str, message: str
) -> None:
    path = scenario(tmp_path, old, new)
    proc, took = simulate(str(path), "--out", str(tmp_path / "out"), "--no-plots")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{path}{where}" in proc.stderr and message in proc.stderr, proc.stderr
    assert took < 10.0
    assert not (tmp_path / "out").exists()


def test_every_limit_is_reported_at_once_and_events_are_not_blamed(tmp_path: Path) -> None:
    """Over the device limit, the initial nodes are never named: the event that
    names h100-0001 is not reported as naming an unknown node."""
    path = scenario(tmp_path, "duration: 24h", "duration: 200y")
    text = path.read_text().replace("initial: 4, min: 2, max: 6", "initial: 3000, max: 3000")
    text = text.replace("arrivalsPerHour: 14", "arrivalsPerHour: 1000")
    path.write_text(text)
    lines = problems(path)
    assert [line.split(": ", 1)[0] for line in lines] == [
        f"{path}:4:13",
        f"{path}:7:75",
        f"{path}:9:22",
    ]
    assert "--max-evaluations" in lines[0]
    assert "--max-devices" in lines[1]
    assert "1,752,000,000 jobs" in lines[2] and "--max-jobs" in lines[2]


def test_the_pools_in_all_and_the_faults(tmp_path: Path) -> None:
    path = scenario(
        tmp_path,
        "    - {name: h100",
        "    - {name: a, vendor: nvidia, devicesPerNode: 8, initial: 2000, max: 2000}\n"
        "    - {name: b, vendor: nvidia, devicesPerNode: 8, initial: 1000, max: 1000}\n"
        "    - {name: h100",
    )
    [line] = problems(path)
    assert line.startswith(f"{path}:7:5: the pools' devices in all is 24,048 devices")
    path.write_text(
        BASE.replace("{fatal: 0.001}", "{fatal: 1, hang: 1, stall: 1}").replace("24h", "30d")
    )
    [line] = problems(path)
    assert line.startswith(f"{path}:13:25: the fault rates x devices x duration (3 x 48 x 720 h)")
    assert line.endswith("raise the limit with --max-faults")


def test_a_flag_raises_a_limit(tmp_path: Path) -> None:
    path = scenario(tmp_path, "initial: 4, min: 2, max: 6", "initial: 4, min: 2, max: 3000")
    assert "--max-devices" in problems(path)[0]
    loaded = load_scenario(path, limits=WorkLimits(devices=24_000))
    assert loaded.pools[0].max == 3000
    proc, _ = simulate(str(path), "--max-devices", "0")
    assert proc.returncode == 2 and "--max-devices: must be 1 or more" in proc.stderr


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("devicesPerNode: 8", "devicesPerNode: 100000", "devicesPerNode must be at most 64"),
        ("evaluationInterval: 30s", "samples: 1000000000\n  evaluationInterval: 30s", "samples"),
        ("arrivalsPerHour: 14", "arrivalsPerHour: 14\n    namespaces: 99999", "namespaces"),
        ("arrivalsPerHour: 14", "arrivalsPerHour: 14\n    backoffLimit: 9999999999", "backoff"),
        ("{fatal: 0.001}", "{fatal: 0.001}\n    eccBurst: 99999999999", "eccBurst"),
    ],
    ids=["devicesPerNode", "samples", "namespaces", "backoffLimit", "eccBurst"],
)
def test_fields_with_a_natural_bound(tmp_path: Path, old: str, new: str, message: str) -> None:
    [line] = problems(scenario(tmp_path, old, new))
    assert message in line and "must be at most" in line
