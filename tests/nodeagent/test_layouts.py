"""The layouts file reader: the shipped file loads, any text at all is either layouts
or a LayoutsError with positions, never another exception (hypothesis); bombs (a huge
count, a megabyte of whitespace in an item) are positioned problems in under a second;
a layout must fit its GPU (MIG placements, amdgpu's mode pairs), table-driven; and
``--check-layouts`` into a closed pipe exits without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent import layouts


def test_the_shipped_layouts() -> None:
    found = layouts.load()
    assert found["h100-all-1g"].mig == ("1g.10gb",) * 7
    assert found["h100-whole"].mig is None
    assert (found["mi300x-cpx"].compute, found["mi300x-cpx"].memory) == ("CPX", "NPS4")
    assert found["h100-half"].matches("NVIDIA H100 80GB HBM3")
    assert not found["h100-half"].matches("NVIDIA H1000")  # a word, not a substring


WORDS = st.sampled_from(
    ["layouts", "model", "mig", "compute", "memory", "H100", "off", "CPX", "NPS4",
     "1g.10gb x7", "3g.40gb", ":", " ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "&a", "*a",
     "!!python/object", "x99", "'", '"', "0", "~"]
)  # fmt: skip


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(WORDS, max_size=40).map("".join))
def test_any_text_is_layouts_or_positioned_problems(tmp_path: Path, text: str) -> None:
    path = tmp_path / "layouts.yaml"
    path.write_text(text)
    try:
        found = layouts.load(path)
    except layouts.LayoutsError as e:
        assert e.problems and all(str(p).startswith(str(path)) for p in e.problems)
    else:
        assert all(isinstance(v, layouts.Layout) for v in found.values())


# -- bounded work: a layouts file costs one linear pass ----------------------------------


def load_timed(path: Path) -> tuple[layouts.LayoutsError, float]:
    """The error and the CPU seconds it took: a quadratic reader burns CPU, and CPU
    time does not grow when two cores are shared with other work."""
    started = time.process_time()
    with pytest.raises(layouts.LayoutsError) as e:
        layouts.load(path)
    return e.value, time.process_time() - started


@pytest.mark.parametrize(
    ("item", "says"),
    [
        # int() refuses strings of more than 4,300 digits: this was a ValueError.
        ("1g.10gb x" + "9" * 5000, "a count of 5000 digits for 1g.10gb; 1 to 8"),
        # A backtracking pattern took minutes over the inner whitespace.
        ('"1g.10gb' + " " * (1 << 20) + 'y"', "is not a MIG profile"),
        ('"1g.10gb' + " " * (1 << 20) + "x" + " " * (1 << 20) + '7y"', "must be a whole number"),
        ('"' + "1" * (3 << 20) + '"', "is not a MIG profile"),
    ],
    ids=["5000-digit-count", "1MB-inner-whitespace", "2MB-around-the-x", "3MB-item"],
)
def test_layout_bombs_are_positioned_problems_in_under_a_second(
    tmp_path: Path, item: str, says: str
) -> None:
    path = tmp_path / "layouts.yaml"
    path.write_text(f"layouts:\n  big: {{model: H100, mig: [{item}]}}\n")
    error, seconds = load_timed(path)
    (problem,) = error.problems
    assert str(problem).startswith(f"{path}:2:28: layout 'big': ") and says in str(problem)
    # The message names the item, it does not carry it (the path's length varies).
    assert len(str(problem)) - len(str(path)) < 160
    assert seconds < 1.0, f"{seconds:.2f}s"


@pytest.mark.parametrize(
    ("item", "profile", "count"),
    [
        ("1g.10gb", "1g.10gb", 1),
        ("3g.40gb x2", "3g.40gb", 2),
        ("1g.10gbx7", "1g.10gb", 7),
        ("2g.20gb * 3", "2g.20gb", 3),
        ("1g.10gb+me ×1", "1g.10gb+me", 1),
        ("  7g.80gb  ", "7g.80gb", 1),
    ],
)
def test_mig_items(item: str, profile: str, count: int) -> None:
    assert layouts.mig_item(item) == (profile, count)


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("1g.10gb x", "must be a whole number"),
        ("1g.10gb x٣", "must be a whole number"),  # an Arabic-Indic digit is no count
        ("1g.10gb x0", "0 instances of 1g.10gb; 1 to 8"),
        ("1g.10gb x9", "9 instances of 1g.10gb; 1 to 8"),
        ("1g.10gb y2", "is not a MIG profile"),
        ("9g.10gb", "is not a MIG profile"),
        ("", "is not a MIG profile"),
    ],
)
def test_bad_mig_items_say_why(item: str, says: str) -> None:
    problem = layouts.mig_item(item)
    assert isinstance(problem, str) and says in problem


# -- what fits a GPU ----------------------------------------------------------------------
#
# NVIDIA: the MIG user guide's "Supported MIG Profiles" (profile names and instance
# counts per product) and the placements nvidia-smi mig -lgipp lists for the 8-slice
# GPUs (1g {0..6}:1, 1g wide {0,2,4,6}:2, 2g {0,2,4}:2, 3g {0,4}:4, 4g {0}:4, 7g {0}:8).
# AMD: amdgpu's __aqua_vanjaram_is_valid_mode (drivers/gpu/drm/amd/amdgpu/
# aqua_vanjaram.c) for an 8-XCD MI300X, and AMD's MI300X partitioning overview.

NVIDIA_LAYOUTS = [
    ("H100", "[1g.10gb x7]", ""),
    ("H100", "[3g.40gb x2]", ""),
    ("H100", "[4g.40gb, 3g.40gb]", ""),
    ("H100", "[4g.40gb, 2g.20gb, 1g.10gb]", ""),
    ("H100", "[2g.20gb x3, 1g.10gb]", ""),
    ("H100", "[1g.20gb x4]", ""),
    ("H100", "[3g.40gb, 1g.20gb x2]", ""),
    ("H100", "[1g.10gb+me, 1g.10gb x6]", ""),
    ("H100", "[7g.80gb]", ""),
    ("H100", "[7g.80gb, 1g.10gb]", "8 compute and 9 memory slices asked"),
    ("H100", "[3g.40gb x2, 1g.10gb]", "7 compute and 9 memory slices"),
    ("H100", "[4g.40gb, 4g.40gb]", "8 compute and 8 memory slices"),
    ("H100", "[1g.20gb x4, 1g.10gb]", "5 compute and 9 memory slices asked; a GPU has 7 and 8"),
    ("H100", "[3g.40gb, 2g.20gb x2]", ""),  # 3g at slice 4, the 2g at 0 and 2
    ("H100", "[1g.10gb+me x2]", "2 instances with media extensions"),
    ("H100", "[1g.18gb]", "no H100 GPU has MIG profile 1g.18gb"),
    ("H100", "[1g.12gb x7]", ""),  # the H100 94GB's names
    ("H100", "[1g.12gb, 1g.10gb]", "no single H100 product has all of 1g.10gb, 1g.12gb"),
    ("H200", "[1g.18gb x7]", ""),
    ("H200", "[3g.71gb, 4g.71gb]", ""),
    ("H200", "[7g.141gb, 1g.18gb]", "does not fit one H200 141GB"),
    ("B200", "[2g.45gb x3, 1g.23gb]", ""),
    ("B200", "[7g.180gb x2]", "does not fit one B200 180GB"),
    ("A100", "[1g.5gb x7]", ""),  # A100 40GB
    ("A100", "[1g.10gb x7]", ""),  # fits the A100 80GB (on a 40GB, 1g.10gb is 2 slices)
    ("A100", "[1g.10gb x5, 2g.10gb]", "does not fit one A100 40GB"),
    ("A30", "[1g.6gb x4]", ""),  # not known here: the GPU itself decides when applied
]

AMD_LAYOUTS = [
    ("MI300X", "SPX", "NPS1", ""),
    ("MI300X", "DPX", "NPS1", ""),
    ("MI300X", "DPX", "NPS2", ""),
    ("MI300X", "QPX", "NPS1", ""),
    ("MI300X", "QPX", "NPS4", ""),
    ("MI300X", "CPX", "NPS1", ""),
    ("MI300X", "CPX", "NPS4", ""),
    ("MI300X", "CPX", "", ""),  # memory left as it is
    ("MI300X", "SPX", "NPS4", "amdgpu refuses SPX with NPS4 on an MI300X; SPX takes NPS1"),
    ("MI300X", "CPX", "NPS2", "CPX takes NPS1 or NPS4"),
    ("MI300X", "QPX", "NPS2", "QPX takes NPS1 or NPS4"),
    ("MI300X", "TPX", "NPS1", "an MI300X (8 XCDs) has no TPX mode"),
    ("MI300X", "CPX", "NPS8", "memory modes NPS1, NPS2, NPS4, not NPS8"),
    ("MI250X", "TPX", "NPS8", ""),  # not known here
]


def check(tmp_path: Path, line: str) -> str:
    """The problems of a file with one layout on line 2, "" when it loads."""
    path = tmp_path / "layouts.yaml"
    path.write_text(f"layouts:\n  l: {line}\n")
    try:
        layouts.load(path)
    except layouts.LayoutsError as e:
        (problem,) = e.problems
        return str(problem).removeprefix(f"{path}:")
    return ""


@pytest.mark.parametrize(("model", "mig", "says"), NVIDIA_LAYOUTS)
def test_mig_layouts_must_fit_their_gpu(tmp_path: Path, model: str, mig: str, says: str) -> None:
    problem = check(tmp_path, f"{{model: {model}, mig: {mig}}}")
    if not says:
        assert problem == ""
    else:
        assert problem.startswith("2:25: layout 'l': ") and says in problem, problem


@pytest.mark.parametrize(("model", "compute", "memory", "says"), AMD_LAYOUTS)
def test_amd_modes_must_be_a_pair_the_driver_takes(
    tmp_path: Path, model: str, compute: str, memory: str, says: str
) -> None:
    line = f"{{model: {model}, compute: {compute}" + (f", memory: {memory}}}" if memory else "}")
    problem = check(tmp_path, line)
    if not says:
        assert problem == ""
    else:
        column = line.index(memory if memory else compute) + 6
        assert problem.startswith(f"2:{column}: layout 'l': ") and says in problem, problem


def test_check_layouts_into_a_closed_pipe_exits_quietly() -> None:
    """``accel-node-agent --check-layouts | head`` where head has already gone: no
    traceback, the file's status (0: valid)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent.cli", "--check-layouts"],
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()
