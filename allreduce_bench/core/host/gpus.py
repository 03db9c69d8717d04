"""This host's NVIDIA GPUs from NVML, else nvidia-smi, with no torch or CUDA context; named by index or UUID."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}  # one direction
# NVML's clock event (throttle) reason bits, named as nvidia-smi's query fields (idle is none)
CLOCK_EVENTS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal_slowdown": 0x20,
                "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80}


def smi(*args: str, timeout_s: float = 20.0) -> str | None:
    """nvidia-smi's output, a line saying why it failed, or None without nvidia-smi."""
    command = shutil.which("nvidia-smi")
    if command is None:
        return None
    what = " ".join(("nvidia-smi", *args))
    try:
        done = subprocess.run([command, *args], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as error:
        return f"{what} failed: {error}"
    return done.stdout if done.returncode == 0 else f"{what} failed: {done.stderr.strip()}"


def _output(text: str | None) -> str | None:
    return None if text is None or text.startswith("nvidia-smi") else text


def _nvml() -> Any:
    """pynvml, initialised; raises where the package or NVML's library is missing or refuses."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _handle(nvml: Any, gpu: str) -> Any:
    return nvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit() else nvml.nvmlDeviceGetHandleByUUID(gpu)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def driver_version() -> str | None:
    try:
        return _text(_nvml().nvmlSystemGetDriverVersion())
    except Exception:
        text = _output(smi("--query-gpu=driver_version", "--format=csv,noheader"))
        return text.splitlines()[0].strip() if text and text.strip() else None


def topo_numa_node(topology: str, gpu_index: int) -> int | None:
    """The 'NUMA Affinity' cell of GPU<index>'s line in `nvidia-smi topo -m` output."""
    lines = topology.splitlines()
    at = next((i for i, line in enumerate(lines) if "NUMA Affinity" in line), None)
    if at is None:
        return None
    # the header has no cell for the row names: its column k is a row's cell k + 1
    column = re.split(r"\t+|\s{2,}", lines[at].strip()).index("NUMA Affinity") + 1
    for line in lines[at + 1:]:
        cells = re.split(r"\t+|\s{2,}", line.strip())
        if cells[0] == f"GPU{gpu_index}":
            value = cells[column] if column < len(cells) else ""
            return int(value) if value.isdigit() else None
    return None


def numa_node(gpu: str) -> int | None:
    """The NUMA node of `gpu`: NVML's, else `nvidia-smi topo -m`'s (by index); None where neither tells."""
    try:
        nvml = _nvml()
        node = nvml.nvmlDeviceGetNumaNodeId(_handle(nvml, gpu))
        return node if node >= 0 else None
    except Exception:
        return topo_numa_node(_output(smi("topo", "-m")) or "", int(gpu)) if gpu.isdigit() else None


@dataclass(frozen=True)
class Gpu:
    """One GPU of this host, numbered as nvidia-smi numbers it."""

    index: str
    uuid: str
    name: str
    free_bytes: int | None  # None where it cannot tell (a MIG-partitioned GPU)


def inventory() -> list[Gpu]:
    """Every GPU of this host; [] without one, or where neither NVML nor nvidia-smi tells."""
    try:
        nvml = _nvml()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        return [Gpu(str(i), _text(nvml.nvmlDeviceGetUUID(h)), _text(nvml.nvmlDeviceGetName(h)),
                    int(nvml.nvmlDeviceGetMemoryInfo(h).free)) for i, h in enumerate(handles)]
    except Exception:
        pass
    text = _output(smi("--query-gpu=index,uuid,memory.free,name", "--format=csv,noheader,nounits")) or ""
    rows = [[cell.strip() for cell in line.split(",", 3)] for line in text.splitlines()]
    return [Gpu(r[0], r[1], r[3], int(r[2]) << 20 if r[2].isdigit() else None) for r in rows if len(r) == 4]


def parse_nvlink_status(text: str) -> dict[int, list[float]]:
    """`nvidia-smi nvlink -s` -> {gpu index: [GB/s of each active link]}."""
    found: dict[int, list[float]] = {}
    gpu = None
    for line in text.splitlines():
        if match := re.match(r"\s*GPU (\d+):", line):
            gpu = int(match.group(1))
            found[gpu] = []
        elif gpu is not None and (match := re.match(r"\s*Link \d+:\s*([\d.]+)\s*GB/s", line)):
            found[gpu].append(float(match.group(1)))
    return found


def nvlinks(gpu: str) -> dict[str, Any]:
    """`gpu`'s active NVLinks and their peak in one direction, and `how` they were read."""
    try:
        nvml = _nvml()
        handle = _handle(nvml, gpu)
        links, version = 0, None
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED:
                    links += 1
                    version = version or nvml.nvmlDeviceGetNvLinkVersion(handle, link)
            except nvml.NVMLError:
                break
        return {"name": _text(nvml.nvmlDeviceGetName(handle)), "nvlink_version": version, "nvlink_links": links,
                "nvlink_GBps": links * NVLINK_GBPS_PER_LINK.get(version or 0, 25.0) if links else None,
                "how": "nvml"}
    except Exception as error:  # NVML missing or refusing: nvidia-smi, else say why
        why = f"nvml failed: {error}"
    text = smi("nvlink", "-s", "-i", gpu)
    output = _output(text)
    if output is None:
        return {"how": text or why}
    # the one GPU asked for, under nvidia-smi's own index
    rates = next(iter(parse_nvlink_status(output).values()), [])
    return {"nvlink_links": len(rates), "nvlink_GBps": round(sum(rates), 3) if rates else None,
            "how": "nvidia-smi nvlink -s"}


def clock_events(gpu: str | None) -> list[str]:
    """`gpu`'s active clock event (throttle) reasons other than idle; [] where nothing tells."""
    if gpu is None:
        return []
    try:
        nvml = _nvml()
        read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = read(_handle(nvml, gpu))
        return [name for name, bit in CLOCK_EVENTS.items() if mask & bit]
    except Exception:  # nvidia-smi: newer drivers' clocks_event_reasons, older ones' clocks_throttle_reasons
        pass
    for prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
        query = ",".join(f"{prefix}.{f}" for f in CLOCK_EVENTS)
        text = _output(smi(f"--query-gpu={query}", "--format=csv,noheader", f"--id={gpu}", timeout_s=10))
        if text and text.strip():
            return [f for f, v in zip(CLOCK_EVENTS, text.strip().split(",")) if v.strip() == "Active"]
    return []
