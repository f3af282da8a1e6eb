"""The NVIDIA backend's kernel log path, fuzzed with hypothesis: the kmsg record
parser (``exporter.backends.nvidia.kmsg``), the Xid line parser and the NVLink
payload decoder (``linkpayload``), and the reader over a file of such bytes.

Any process can write to the kernel log through ``/dev/kmsg`` (a root process, a
container with the device, a driver that prints garbage), and the line parser runs
in the poller's thread before every NVML drain: a line must give a well-formed Xid
or none, and a class from the vocabulary or none, without raising and within the
bounds. Cases start from the driver's own lines (Xid 74 with its seven registers,
the NVLink5 form, the MIG form, a plain Xid), mutated a little, beside raw bytes.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from accel_common.remedies import ACTION_CLASSES
from exporter.backends.nvidia.kmsg import MAX_RECORD, KmsgReader, parse_record
from exporter.backends.nvidia.linkpayload import decode, parse
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import raw_bytes

_SEEDS = [
    "NVRM: Xid (PCI:0000:3b:00): 74, pid=1912, name=python3, NVLink: fatal error detected "
    "on link 4(0x2, 0x0, 0x0, 0x10000, 0x100000, 0x0, 0x0)",
    "NVRM: Xid (PCI:0018:01:00): 149, pid='<unknown>', name=<unknown>, NETIR_LINK_EVT "
    "Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0000:3b:00 GPU-I:05): 145, RLW_REMAP Nonfatal XC1 i0 Link -1 (0x1 0x2)",
    "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off",
]
_BUS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}")


@st.composite
def driver_line(draw: st.DrawFn) -> str:
    """A seed with a few characters replaced, cut, doubled or inserted."""
    text = draw(st.sampled_from(_SEEDS))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.text(alphabet="0x1f(), :;NVRMXidLink\n\x00\u00e9", max_size=6))
        how = draw(st.sampled_from(["insert", "replace", "cut", "double"]))
        if how == "insert":
            text = text[:at] + piece + text[at:]
        elif how == "replace":
            text = text[:at] + piece + text[at + len(piece) :]
        elif how == "cut":
            text = text[:at]
        else:
            text = text + " " + text
    return text


_texts = st.one_of(driver_line(), driver_line(), raw_bytes.map(lambda b: b.decode("latin-1")))


@budget(400)
@given(text=_texts, hopper=st.booleans())
def test_line_parser_and_decoder(text: str, hopper: bool) -> None:
    def run() -> tuple[object, ...]:
        line = parse(text)
        if line is None:
            return (None,)
        assert _BUS.fullmatch(line.bus), line.bus
        assert line.code.isdigit() and len(line.code) <= 4, line.code
        found = decode(line, hopper)
        assert found is None or found.action in ACTION_CLASSES, found
        return (line, found)

    check("nvidia kmsg xid line", run, ())


@budget(400)
@given(data=st.one_of(raw_bytes, _texts.map(lambda t: f"3,1,2,-;{t}".encode())))
def test_record_parser(data: bytes) -> None:
    def run() -> object:
        rec = parse_record(data)
        assert rec is None or (rec.seq >= 0 and rec.usec >= 0), rec
        return rec

    check("nvidia kmsg record", run, ())


@budget(60)
@given(chunks=st.lists(st.one_of(raw_bytes, _texts.map(str.encode)), max_size=12))
def test_reader_over_hostile_bytes(chunks: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kmsg"
        path.write_bytes(b"")
        reader = KmsgReader(path, max_records=8, clock=lambda: 0)
        assert reader.open()
        with path.open("ab") as f:
            for i, chunk in enumerate(chunks):
                f.write(f"3,{i},{i},-;".encode() + chunk + b"\n")

        def run() -> int:
            total = 0
            for _ in range(len(chunks) + 2):
                got = reader.read()
                assert len(got) <= 8
                assert all(len(r.message.encode("utf-8", "replace")) <= 4 * MAX_RECORD for r in got)
                total += len(got)
            return total

        try:
            check("nvidia kmsg reader", run, ())
        finally:
            reader.close()
