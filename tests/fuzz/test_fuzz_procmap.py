"""The process-to-container map (``exporter.procmap``), fuzzed with hypothesis.

A container can write its own cgroup's name and the files of its own log
directory, so what ``/proc/PID/cgroup`` and the kubelet's log names hold is hostile
input to a reader that runs in the poller's thread for every device. Cases start
from what a kubelet writes (cgroup v1 and v2, systemd and cgroupfs paths, pod
directories and container log names), mutated a little, beside raw bytes; and a
whole ``/proc`` plus log tree built from them must map every PID to an owner (or
none) without raising.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from exporter.procmap import (
    Assigned,
    Owner,
    ProcMap,
    owner_on,
    parse_cgroup,
    parse_container_log,
    parse_pod_dir,
)
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import raw_bytes

_UID = "0f3e2a4c-1111-4c2b-9a55-aaaaaaaaaaaa"
_CID = "a" * 64

_SEEDS = [
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{_UID.replace('-', '_')}"
    f".slice/cri-containerd-{_CID}.scope",
    f"11:memory:/kubepods/besteffort/pod{_UID}/{_CID}",
    f"0::/kubepods.slice/kubepods-pod{_UID.replace('-', '_')}.slice/crio-{_CID}.scope",
    "0::/system.slice/containerd.service",
    f"ml_train-a_{_UID}",
    f"train-a_ml_trainer-{_CID}.log",
]


@st.composite
def kubelet_text(draw: st.DrawFn) -> str:
    """A seed with a few characters replaced, cut, doubled or inserted."""
    text = draw(st.sampled_from(_SEEDS))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.text(alphabet="_-:/.pod0af\n\x00\u00e9", max_size=4))
        how = draw(st.sampled_from(["insert", "replace", "cut", "double"]))
        if how == "insert":
            text = text[:at] + piece + text[at:]
        elif how == "replace":
            text = text[:at] + piece + text[at + len(piece) :]
        elif how == "cut":
            text = text[:at]
        else:
            text = text + "\n" + text
    return text


_texts = st.one_of(kubelet_text(), kubelet_text(), raw_bytes.map(lambda b: b.decode("latin-1")))


@budget(400)
@given(text=_texts)
def test_parsers(text: str) -> None:
    def parse() -> tuple[object, ...]:
        uid, container_id = parse_cgroup(text)
        assert not uid or len(uid) == 36, uid
        assert not container_id or len(container_id) == 64, container_id
        return (uid, container_id, parse_pod_dir(text), parse_container_log(text))

    check("procmap parsers", parse, ())


def _safe_name(text: str) -> str:
    """A file name from hostile text: only what a file system takes."""
    name = text.replace("/", "_").replace("\x00", "_")[:200]
    return name if name not in ("", ".", "..") else "x"


@budget(60)
@given(
    cgroups=st.lists(st.one_of(_texts, raw_bytes.map(lambda b: b.decode("latin-1"))), max_size=6),
    pod_dirs=st.lists(kubelet_text(), max_size=4),
    logs=st.lists(kubelet_text(), max_size=4),
    assigned=st.lists(
        st.tuples(st.sampled_from(["ml", ""]), st.sampled_from(["train-a", "b"]), st.just("c")),
        max_size=3,
    ),
)
def test_whole_trees(
    cgroups: list[str],
    pod_dirs: list[str],
    logs: list[str],
    assigned: list[tuple[str, str, str]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for pid, text in enumerate(cgroups, start=100):
            (root / "proc" / str(pid)).mkdir(parents=True)
            (root / "proc" / str(pid) / "cgroup").write_bytes(text.encode("utf-8", "replace"))
        for name in pod_dirs:
            (root / "log" / "pods" / _safe_name(name) / "c").mkdir(parents=True, exist_ok=True)
        (root / "log" / "containers").mkdir(parents=True, exist_ok=True)
        for name in logs:
            (root / "log" / "containers" / _safe_name(name)).write_text("")
        pm = ProcMap(procfs=root / "proc", pod_logs=root / "log")
        pids = [*range(100, 100 + len(cgroups)), 7, -1]
        on = [Assigned(*a) for a in assigned]

        def resolve() -> dict[int, tuple[str, str, str]]:
            owners = pm.owners(pids)
            assert set(owners) == set(pids)
            assert all(isinstance(o, Owner) for o in owners.values())
            return {pid: owner_on(o, on) for pid, o in owners.items()}

        check("procmap trees", resolve, ())
