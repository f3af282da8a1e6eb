"""A fake DCMI (Huawei's ``libdcmi.so``) and a fake ``npu-smi``, on one chip table held
in memory.

Why it is built this way:

* ``FakeDcmi`` stands where the ``ctypes.CDLL`` stands: it has the C functions' names
  and takes their arguments the way ``exporter.backends.ascend.dcmi`` passes them
  (ints in; ``ctypes.pointer`` to a ctypes value or structure, or a ctypes array, out),
  answers DCMI return codes as ints, and writes its answers through the pointers. It
  checks each out-parameter's ctypes type, so a ctypes layer that passed the wrong
  structure would fail here as it would corrupt memory in C. A DCMI function the fake
  does not implement is absent, as in an older library.
* It fails the ways DCMI fails: ``fail_init`` (the driver is absent or broken:
  ``dcmi_init`` answers an error), calls before ``dcmi_init`` (DCMI names no code for
  that; the fake answers DCMI_ERR_CODE_INNER_ERR so a backend that forgets to
  initialise fails), ``lose`` (a chip answers DCMI_ERR_CODE_NOT_REDAY, MindCluster's
  card-drop signature, or DEVICE_NOT_EXIST), ``timeouts`` (DCMI_ERR_CODE_TIME_OUT for
  named functions), ``unsupported`` per chip (DCMI_ERR_CODE_NOT_SUPPORT), ``missing``
  functions (an older library), and ``hang`` (a call blocks until ``release()``,
  bounded so that a forgotten release cannot hang the test run).
* ``FakeNpuSmi`` writes an executable ``npu-smi`` into a directory for a test to put on
  PATH. ``sync()`` renders the same chip table in the formats of ``npu-smi info``,
  ``-t usages``, ``-t health`` and ``-t topo`` into a JSON file; the script (standard
  library only, so it starts fast) prints the answer for its argv, records each argv
  and its pid, and can hang, print garbage, or exit non-zero.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter.backends.ascend import dcmi as api

HANG_LIMIT_SECONDS = 20.0
HEALTH_WORDS = {0: "OK", 1: "Warning", 2: "Alarm", 3: "Critical"}
_SUPPORTED_UTILIZATION = {2, 3, 4, 6, 10, 12, 13}
REPO = Path(__file__).resolve().parents[3]


@dataclass
class FakeChip:
    """One NPU chip; figures in DCMI's units (MB, %, 0.1 W, MHz, Celsius)."""

    card: int
    chip: int = 0
    chip_name: str = "910B3"
    pci: tuple[int, int, int, int] = (0, 0xC1, 0, 0)  # domain, bus, device, function
    vdie: tuple[int, int, int, int, int] = (0x1, 0x2, 0x3, 0x4, 0x5)
    aicore: int = 40
    hbm_total_mb: int = 65536
    hbm_used_mb: int = 3402
    hbm_freq_mhz: int = 1600
    hbm_temp: int = 41
    hbm_bandwidth: int = 25
    temperature: int = 37
    power_dw: int = 957  # 95.7 W
    aicore_mhz: int = 1800
    health: int = 0
    error_codes: list[int] = field(default_factory=list)
    ecc_enabled: bool = True
    ecc_single_total: int = 7
    ecc_double_total: int = 0
    ecc_double_pages: int = 0
    # A chip without HBM (Ascend 310P): DDR (size, available) in MB instead.
    ddr: tuple[int, int] | None = None
    unsupported: set[str] = field(default_factory=set)
    lost_code: int = 0

    @property
    def bus_id(self) -> str:
        d, b, dev, fn = self.pci
        return f"{d:04X}:{b:02X}:{dev:02X}.{fn:X}"


def _out(pointer: Any, kind: Any) -> Any:
    """The object an out-parameter points at, after checking its ctypes type."""
    assert isinstance(pointer, ctypes._Pointer), f"expected a pointer, got {pointer!r}"
    assert pointer._type_ is kind, f"expected a pointer to {kind}, got {pointer._type_}"
    return pointer.contents


def _put(array: Any, kind: Any, values: list[int]) -> None:
    assert isinstance(array, ctypes.Array) and array._type_ is kind, f"bad array {array!r}"
    for i, v in enumerate(values[: len(array)]):
        array[i] = v


def _bytes(raw: Any, text: str) -> None:
    data = text.encode()[: len(raw) - 1]
    ctypes.memmove(ctypes.addressof(raw), data, len(data))


class FakeDcmi:
    """The DCMI functions the ascend backend calls, over ``chips``."""

    def __init__(
        self,
        chips: list[FakeChip],
        driver_version: str = "24.1.rc2",
        topology: dict[tuple[int, int], int] | None = None,
    ) -> None:
        self.chips = chips
        self.driver_version = driver_version
        # (index, index) -> DCMI topo type; pairs not given are joined by HCCS.
        self.topology = topology or {}
        self.initialised = False
        self.init_code = api.OK
        self.timeouts: set[str] = set()
        self.missing: set[str] = set()
        self.calls: list[str] = []
        self._hang: set[str] = set()
        self._released = threading.Event()

    # -- failures ----------------------------------------------------------------------

    def fail_init(self, code: int = api.ERR_INNER_ERR) -> None:
        self.init_code = code

    def lose(self, index: int, code: int = api.ERR_NOT_READY) -> None:
        self.chips[index].lost_code = code

    def hang(self, function: str) -> None:
        self._released.clear()
        self._hang.add(function)

    def release(self) -> None:
        self._hang.clear()
        self._released.set()

    @classmethod
    def implemented(cls) -> list[str]:
        return sorted(n for n in vars(cls) if n.startswith("dcmi_"))

    def __getattribute__(self, name: str) -> Any:
        # A function named in ``missing`` is absent, as from an older libdcmi.
        if name.startswith("dcmi_") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def _enter(self, function: str) -> int:
        """The code every call starts with: OK to go on, or the failure to answer."""
        self.calls.append(function)
        if function in self._hang:
            self._released.wait(HANG_LIMIT_SECONDS)
        if not self.initialised:
            return api.ERR_INNER_ERR
        if function in self.timeouts:
            return api.ERR_TIME_OUT
        return api.OK

    def _chip(self, function: str, card: int, device: int) -> FakeChip | int:
        code = self._enter(function)
        if code != api.OK:
            return code
        for c in self.chips:
            if (c.card, c.chip) == (card, device):
                if c.lost_code:
                    return c.lost_code
                if function in c.unsupported:
                    return api.ERR_NOT_SUPPORT
                return c
        return api.ERR_INVALID_DEVICE_ID

    # -- the DCMI functions ------------------------------------------------------------

    def dcmi_init(self) -> int:
        self.calls.append("dcmi_init")
        if self.init_code != api.OK:
            return self.init_code
        self.initialised = True
        return api.OK

    def dcmi_get_card_list(self, card_num: Any, card_list: Any, list_len: int) -> int:
        return self._cards("dcmi_get_card_list", card_num, card_list, list_len)

    def dcmi_get_card_num_list(self, card_num: Any, card_list: Any, list_len: int) -> int:
        return self._cards("dcmi_get_card_num_list", card_num, card_list, list_len)

    def _cards(self, function: str, card_num: Any, card_list: Any, list_len: int) -> int:
        code = self._enter(function)
        if code != api.OK:
            return code
        cards = sorted({c.card for c in self.chips})[:list_len]
        _out(card_num, ctypes.c_int).value = len(cards)
        _put(card_list, ctypes.c_int, cards)
        return api.OK

    def dcmi_get_device_num_in_card(self, card_id: int, device_num: Any) -> int:
        code = self._enter("dcmi_get_device_num_in_card")
        if code != api.OK:
            return code
        chips = [c for c in self.chips if c.card == card_id]
        if not chips:
            return api.ERR_INVALID_DEVICE_ID
        if all(c.lost_code for c in chips):  # a card whose every chip dropped
            return chips[0].lost_code
        _out(device_num, ctypes.c_int).value = len(chips)
        return api.OK

    def dcmi_get_device_chip_info(self, card_id: int, device_id: int, chip_info: Any) -> int:
        c = self._chip("dcmi_get_device_chip_info", card_id, device_id)
        if isinstance(c, int):
            return c
        info = _out(chip_info, api.ChipInfo)
        _bytes(info.chip_type, "Ascend")
        _bytes(info.chip_name, c.chip_name)
        _bytes(info.chip_ver, "V1")
        info.aicore_cnt = 24
        return api.OK

    def dcmi_get_device_pcie_info_v2(self, card_id: int, device_id: int, pcie_info: Any) -> int:
        c = self._chip("dcmi_get_device_pcie_info_v2", card_id, device_id)
        if isinstance(c, int):
            return c
        info = _out(pcie_info, api.PcieInfoAll)
        info.venderid, info.deviceid = 0x19E5, 0xD802
        info.domain, info.bdf_busid, info.bdf_deviceid, info.bdf_funcid = c.pci
        return api.OK

    def dcmi_get_device_die_v2(
        self, card_id: int, device_id: int, input_type: int, die_id: Any
    ) -> int:
        c = self._chip("dcmi_get_device_die_v2", card_id, device_id)
        if isinstance(c, int):
            return c
        if input_type not in (api.VDIE, 0):
            return api.ERR_INVALID_PARAMETER
        _put(_out(die_id, api.DieId).soc_die, ctypes.c_uint, list(c.vdie))
        return api.OK

    def dcmi_get_driver_version(self, driver_ver: Any, len: int) -> int:
        code = self._enter("dcmi_get_driver_version")
        if code != api.OK:
            return code
        assert isinstance(driver_ver, ctypes.Array) and len <= ctypes.sizeof(driver_ver)
        _bytes(driver_ver, self.driver_version)
        return api.OK

    def dcmi_get_device_utilization_rate(
        self, card_id: int, device_id: int, input_type: int, utilization_rate: Any
    ) -> int:
        c = self._chip("dcmi_get_device_utilization_rate", card_id, device_id)
        if isinstance(c, int):
            return c
        if input_type not in _SUPPORTED_UTILIZATION:
            return api.ERR_INVALID_PARAMETER
        values = {api.UTIL_AICORE: c.aicore, api.UTIL_HBM_BANDWIDTH: c.hbm_bandwidth}
        _out(utilization_rate, ctypes.c_uint).value = values.get(input_type, 0)
        return api.OK

    def dcmi_get_device_hbm_info(self, card_id: int, device_id: int, hbm_info: Any) -> int:
        c = self._chip("dcmi_get_device_hbm_info", card_id, device_id)
        if isinstance(c, int):
            return c
        if c.ddr is not None:
            return api.ERR_NOT_SUPPORT
        info = _out(hbm_info, api.HbmInfo)
        info.memory_size, info.memory_usage = c.hbm_total_mb, c.hbm_used_mb
        info.freq, info.temp, info.bandwith_util_rate = c.hbm_freq_mhz, c.hbm_temp, c.hbm_bandwidth
        return api.OK

    def dcmi_get_device_memory_info_v3(self, card_id: int, device_id: int, memory_info: Any) -> int:
        c = self._chip("dcmi_get_device_memory_info_v3", card_id, device_id)
        if isinstance(c, int):
            return c
        if c.ddr is None:
            return api.ERR_NOT_SUPPORT
        info = _out(memory_info, api.MemoryInfo)
        info.memory_size, info.memory_available = c.ddr
        return api.OK

    def dcmi_get_device_temperature(self, card_id: int, device_id: int, temperature: Any) -> int:
        c = self._chip("dcmi_get_device_temperature", card_id, device_id)
        if isinstance(c, int):
            return c
        _out(temperature, ctypes.c_int).value = c.temperature
        return api.OK

    def dcmi_get_device_power_info(self, card_id: int, device_id: int, power: Any) -> int:
        c = self._chip("dcmi_get_device_power_info", card_id, device_id)
        if isinstance(c, int):
            return c
        _out(power, ctypes.c_int).value = c.power_dw
        return api.OK

    def dcmi_get_device_frequency(
        self, card_id: int, device_id: int, input_type: int, frequency: Any
    ) -> int:
        c = self._chip("dcmi_get_device_frequency", card_id, device_id)
        if isinstance(c, int):
            return c
        values = {api.FREQ_AICORE_CURRENT: c.aicore_mhz, api.FREQ_HBM: c.hbm_freq_mhz}
        if input_type not in values:
            return api.ERR_INVALID_PARAMETER
        _out(frequency, ctypes.c_uint).value = values[input_type]
        return api.OK

    def dcmi_get_device_health(self, card_id: int, device_id: int, health: Any) -> int:
        c = self._chip("dcmi_get_device_health", card_id, device_id)
        if isinstance(c, int):
            return c
        _out(health, ctypes.c_uint).value = c.health
        return api.OK

    def dcmi_get_device_errorcode_v2(
        self,
        card_id: int,
        device_id: int,
        error_count: Any,
        error_code_list: Any,
        list_len: int,
    ) -> int:
        c = self._chip("dcmi_get_device_errorcode_v2", card_id, device_id)
        if isinstance(c, int):
            return c
        codes = c.error_codes[:list_len]
        _out(error_count, ctypes.c_int).value = len(codes)
        _put(error_code_list, ctypes.c_uint, codes)
        return api.OK

    def dcmi_get_device_ecc_info(
        self, card_id: int, device_id: int, input_type: int, device_ecc_info: Any
    ) -> int:
        c = self._chip("dcmi_get_device_ecc_info", card_id, device_id)
        if isinstance(c, int):
            return c
        if input_type != api.DEVICE_TYPE_HBM:  # the reference: only HBM is supported
            return api.ERR_NOT_SUPPORT
        info = _out(device_ecc_info, api.EccInfo)
        info.enable_flag = int(c.ecc_enabled)
        info.total_single_bit_error_cnt = c.ecc_single_total
        info.total_double_bit_error_cnt = c.ecc_double_total
        info.double_bit_isolated_pages_cnt = c.ecc_double_pages
        return api.OK

    def dcmi_get_topo_info_by_device_id(
        self, card_id1: int, device_id1: int, card_id2: int, device_id2: int, topo_type: Any
    ) -> int:
        a = self._chip("dcmi_get_topo_info_by_device_id", card_id1, device_id1)
        b = self._chip("dcmi_get_topo_info_by_device_id", card_id2, device_id2)
        for x in (a, b):
            if isinstance(x, int):
                return x
        assert isinstance(a, FakeChip) and isinstance(b, FakeChip)
        i, j = self.chips.index(a), self.chips.index(b)
        kind = api.TOPO_SELF if i == j else self.topology.get((min(i, j), max(i, j)), api.TOPO_HCCS)
        _out(topo_type, ctypes.c_int).value = kind
        return api.OK


# -- the fake npu-smi ----------------------------------------------------------------


# The fake tool itself: standard library only, so it starts fast; it prints what
# ``FakeNpuSmi.sync`` rendered for its argv.
_SCRIPT = """\
import json, os, sys, time
state = json.load(open({state!r}))
with open(state["pid_file"], "w") as f:
    f.write(str(os.getpid()))
with open(state["argv_log"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
mode = state["mode"]
if mode == "hang":
    time.sleep({hang!r})
elif mode == "fail":
    sys.stderr.write("npu-smi: dcmi module initialize failed\\n")
    sys.exit(1)
elif mode == "garbage":
    sys.stdout.write("| \\x00 not | a | table |\\n+====+\\n| 0 910B | ?? | 1 2 |\\n")
else:
    text = state["outputs"].get(" ".join(sys.argv[1:]))
    if text is None:
        sys.stderr.write("The device does not exist.\\n")
        sys.exit(1)
    sys.stdout.write(text)
"""


class FakeNpuSmi:
    """An ``npu-smi`` executable in ``directory`` that prints ``dcmi``'s chip table.

    ``mode``: "ok", "hang" (sleeps, after writing its pid), "garbage" (prints text
    that is no table), or "fail" (exits 1). ``sync()`` must follow any change: it
    renders every answer the tool can give into the state file the script reads."""

    def __init__(self, directory: Path, dcmi: FakeDcmi) -> None:
        self.directory = directory
        self.dcmi = dcmi
        self.mode = "ok"
        self.path = directory / "npu-smi"
        self.state = directory / "npu-smi.json"
        self.argv_log = directory / "npu-smi.argv"
        self.pid_file = directory / "npu-smi.pid"
        directory.mkdir(parents=True, exist_ok=True)
        script = _SCRIPT.format(state=str(self.state), hang=HANG_LIMIT_SECONDS)
        self.path.write_text(f"#!{sys.executable} -S\n{script}")
        self.path.chmod(0o755)
        self.sync()

    def sync(self) -> None:
        chips = [asdict(c) | {"unsupported": []} for c in self.dcmi.chips]
        state: dict[str, Any] = {
            "version": self.dcmi.driver_version,
            "chips": chips,
            "topology": [[i, j, t] for (i, j), t in self.dcmi.topology.items()],
        }
        outputs = {"info": render_info(state), "info -t topo": render_topo(state)}
        for c in chips:
            usages = render_usages(state, c["card"])
            if usages is not None:
                outputs[f"info -t usages -i {c['card']}"] = usages
            health = render_health(state, c["card"], c["chip"])
            if health is not None:
                outputs[f"info -t health -i {c['card']} -c {c['chip']}"] = health
        self.state.write_text(
            json.dumps(
                {
                    "mode": self.mode,
                    "outputs": outputs,
                    "argv_log": str(self.argv_log),
                    "pid_file": str(self.pid_file),
                }
            )
        )

    def argvs(self) -> list[list[str]]:
        if not self.argv_log.exists():
            return []
        return [json.loads(line) for line in self.argv_log.read_text().splitlines()]


_RULE = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+"
_DOUBLE = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 52 + "+"


def _row(a: str, b: str, c: str) -> str:
    return f"| {a:<26}| {b:<14}| {c:<51}|"


def render_info(state: dict[str, Any]) -> str:
    version = state["version"]
    lines = [
        "+" + "-" * 96 + "+",
        f"| {'npu-smi ' + version:<32} {'Version: ' + version:<62}|",
        _RULE,
        _row("NPU   Name", "Health", "Power(W)    Temp(C)           Hugepages-Usage(page)"),
        _row("Chip", "Bus-Id", "AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"),
        _DOUBLE,
    ]
    for c in state["chips"]:
        if c["lost_code"]:
            continue
        d, b, dev, fn = c["pci"]
        bus = f"{d:04X}:{b:02X}:{dev:02X}.{fn:X}"
        power = f"{c['power_dw'] / 10:.1f}"
        hbm = "0    / 0" if c["ddr"] else f"{c['hbm_used_mb']:<4} / {c['hbm_total_mb']}"
        ddr = f"{c['ddr'][0] - c['ddr'][1]} / {c['ddr'][0]}" if c["ddr"] else "0    / 0"
        lines.append(
            _row(
                f"{c['card']:<6}{c['chip_name']}",
                HEALTH_WORDS.get(c["health"], "UNKNOWN"),
                f"{power:<12}{c['temperature']:<18}0    / 0",
            )
        )
        lines.append(_row(f"{c['chip']}", bus, f"{c['aicore']:<12}{ddr:<18}{hbm}"))
        lines.append(_DOUBLE)
    lines += [
        _RULE,
        _row("NPU     Chip", "Process id", "Process name             | Process memory(MB)"),
        _DOUBLE,
        f"| {'No running processes found in NPU 0':<95}|",
        _DOUBLE,
    ]
    return "\n".join(lines) + "\n"


def render_usages(state: dict[str, Any], card: int) -> str | None:
    chips = [c for c in state["chips"] if c["card"] == card and not c["lost_code"]]
    if not chips:
        return None
    out = [f"\t{'NPU ID':<31}: {card}", f"\t{'Chip Count':<31}: {len(chips)}", ""]
    for c in chips:
        rate = round(100 * c["hbm_used_mb"] / c["hbm_total_mb"]) if c["hbm_total_mb"] else 0
        hbm = (
            []
            if c["ddr"]
            else [
                ("HBM Capacity(MB)", c["hbm_total_mb"]),
                ("HBM Usage Rate(%)", rate),
            ]
        )
        bandwidth = [] if c["ddr"] else [("HBM Bandwidth Usage Rate(%)", c["hbm_bandwidth"])]
        for key, value in (
            ("DDR Capacity(MB)", c["ddr"][0] if c["ddr"] else 0),
            *hbm,
            ("Aicore Usage Rate(%)", c["aicore"]),
            ("Aivector Usage Rate(%)", 0),
            ("Aicpu Usage Rate(%)", 0),
            ("Ctrlcpu Usage Rate(%)", 2),
            ("DDR Bandwidth Usage Rate(%)", 0),
            *bandwidth,
            ("Chip ID", c["chip"]),
        ):
            out.append(f"\t{key:<31}: {value}")
        out.append("")
    return "\n".join(out) + "\n"


def render_health(state: dict[str, Any], card: int, chip: int) -> str | None:
    for c in state["chips"]:
        if (c["card"], c["chip"]) == (card, chip) and not c["lost_code"]:
            codes = " ".join(f"{code:08X}" for code in c["error_codes"]) or "NA"
            return (
                f"\t{'Health Status':<31}: {HEALTH_WORDS.get(c['health'], 'UNKNOWN')}\n"
                f"\t{'Error Code':<31}: {codes}\n"
                f"\t{'Error Information':<31}: {'NA' if codes == 'NA' else 'see the code'}\n"
            )
    return None


def render_topo(state: dict[str, Any]) -> str:
    n = len(state["chips"])
    kinds = {(i, j): t for i, j, t in state["topology"]}
    words = {1: "SYS", 2: "PHB", 3: "HCCS", 4: "PXB", 5: "PIX", 6: "SIO", 7: "HCCS_SW"}
    out = ["\t   " + "".join(f"{'NPU' + str(i):<11}" for i in range(n)) + "CPU Affinity"]
    for i in range(n):
        cells = [
            "X" if i == j else words.get(kinds.get((min(i, j), max(i, j)), 3), "NA")
            for j in range(n)
        ]
        out.append(f"{'NPU' + str(i):<11}" + "".join(f"{w:<11}" for w in cells) + "0-23")
    out += ["", "Legend:", "", "  X    = Self", "  HCCS = Connection traversing HCCS."]
    return "\n".join(out) + "\n"
