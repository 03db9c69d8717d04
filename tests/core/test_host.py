"""core/host/: the GPU reader with a fake NVML and with nvidia-smi instead, quiet without either;
the cgroup reader on a fake cgroupfs; the process scanner on real children."""
from __future__ import annotations

import multiprocessing
import signal
import stat
import subprocess
import sys
import time
import types
from types import SimpleNamespace

import pytest

from allreduce_bench.core.host import cgroups, gpus, processes


class NVMLError(Exception):
    pass


def fake_nvml(monkeypatch, events: int = 0x4 | 0x40 | 0x1) -> types.ModuleType:
    """pynvml over two GPUs: GPU 1 has 18 NVLink 4 links, 1 GiB free and NUMA node 1."""
    nvml = types.ModuleType("pynvml")
    uuids = ["GPU-aaaa", "GPU-bbbb"]
    handle = {"GPU-aaaa": 0, "GPU-bbbb": 1}
    nvml.__dict__.update(
        NVMLError=NVMLError, NVML_FEATURE_ENABLED=1, NVML_NVLINK_MAX_LINKS=36,
        nvmlInit=lambda: None, nvmlSystemGetDriverVersion=lambda: b"550.54.15",
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetHandleByUUID=lambda uuid: handle[uuid],
        nvmlDeviceGetUUID=lambda h: uuids[h], nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(free=(h + 1) << 30, total=80 << 30),
        nvmlDeviceGetNumaNodeId=lambda h: h,
        nvmlDeviceGetNvLinkState=lambda h, link: 1 if h == 1 and link < 18 else 0,
        nvmlDeviceGetNvLinkVersion=lambda h, link: 4,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: events)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_nvml_answers_every_fact(monkeypatch, tmp_path):
    fake_nvml(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: NVML alone
    assert gpus.driver_version() == "550.54.15"
    assert gpus.inventory() == [gpus.Gpu("0", "GPU-aaaa", "NVIDIA H100 80GB HBM3", 1 << 30),
                                gpus.Gpu("1", "GPU-bbbb", "NVIDIA H100 80GB HBM3", 2 << 30)]
    assert gpus.numa_node("1") == 1 and gpus.numa_node("GPU-aaaa") == 0
    assert gpus.nvlinks("GPU-bbbb") == {"name": "NVIDIA H100 80GB HBM3", "nvlink_version": 4,
                                        "nvlink_links": 18, "nvlink_GBps": 450.0, "how": "nvml"}
    assert gpus.nvlinks("0")["nvlink_GBps"] is None
    assert gpus.clock_events("1") == ["sw_power_cap", "hw_thermal_slowdown"]  # idle is no event
    assert gpus.clock_events(None) == []
    assert gpus.smi("topo", "-m") is None  # nvidia-smi's table only


def test_older_nvml_names_clock_events_throttle_reasons(monkeypatch):
    nvml = fake_nvml(monkeypatch)
    del nvml.nvmlDeviceGetCurrentClocksEventReasons
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x8
    assert gpus.clock_events("0") == ["hw_slowdown"]


TOPO = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV18\t0-47\t0\nGPU1\tNV18\t X \t48-95\t1\n"
NVLINK_S = "GPU 1: NVIDIA H100 (UUID: GPU-bbbb)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"


def fake_smi(tmp_path, monkeypatch) -> None:
    """nvidia-smi on PATH answering what core/host/gpus.py asks; NVML present but refusing."""
    nvml = types.ModuleType("pynvml")
    nvml.nvmlInit = lambda: (_ for _ in ()).throw(NVMLError("NVML Shared Library Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
case "$*" in
  *driver_version*) echo 535.1;;
  *memory.free*) printf '0, GPU-aaaa, 81000, NVIDIA H100\\n1, GPU-bbbb, [N/A], NVIDIA H100\\n';;
  *clocks_event_reasons*) echo 'Not Active, Not Active, Not Active, Active, Not Active';;
  "topo -m") printf '{TOPO}';;
  "nvlink -s -i 1") printf '{NVLINK_S}';;
  *) echo "no such GPU" >&2; exit 6;;
esac
""")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def test_nvidia_smi_answers_where_nvml_refuses(monkeypatch, tmp_path):
    fake_smi(tmp_path, monkeypatch)
    assert gpus.driver_version() == "535.1"
    assert gpus.inventory() == [gpus.Gpu("0", "GPU-aaaa", "NVIDIA H100", 81000 << 20),
                                gpus.Gpu("1", "GPU-bbbb", "NVIDIA H100", None)]  # a MIG GPU's
    assert gpus.smi("topo", "-m") == TOPO and gpus.numa_node("1") == 1 and gpus.numa_node("GPU-bbbb") is None
    assert gpus.nvlinks("1") == {"nvlink_links": 2, "nvlink_GBps": 53.124, "how": "nvidia-smi nvlink -s"}
    assert gpus.nvlinks("7") == {"how": "nvidia-smi nvlink -s -i 7 failed: no such GPU"}
    assert gpus.clock_events("0") == ["hw_thermal_slowdown"]


def test_no_gpu_and_no_nvidia_smi_is_quiet(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpus.driver_version() is None and gpus.smi("topo", "-m") is None and gpus.inventory() == []
    assert gpus.numa_node("0") is None and gpus.clock_events("0") == []
    assert gpus.nvlinks("0")["how"].startswith("nvml failed: ")


def test_nvidia_smi_failures_are_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nsleep 5\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    assert gpus.smi("topo", "-m", timeout_s=0.2).startswith("nvidia-smi topo -m failed: ")


# ---- cgroups ----------------------------------------------------------------------------------

V1 = "12:cpuset:/job\n4:cpu,cpuacct:/job/step\n1:name=systemd:/user\n0::/\n"


def test_memberships_of_v1_and_v2():
    assert cgroups.memberships(V1) == {"cpuset": "/job", "cpu,cpuacct": "/job/step",
                                       "name=systemd": "/user", "": "/"}
    assert cgroups.memberships("") == {}


def test_mounts_and_cpusets_on_a_fake_cgroupfs(tmp_path):
    assert cgroups.v1_cpu_mount(tmp_path) is None and not cgroups.is_v2(tmp_path)
    assert cgroups.cpuset(tmp_path) is None
    (tmp_path / "cpuset").mkdir()
    (tmp_path / "cpuset" / "cpuset.effective_cpus").write_text("0-3\n")
    assert cgroups.cpuset(tmp_path) == "0-3"
    (tmp_path / "cpuset.cpus.effective").write_text("2,5\n")  # v2 first
    assert cgroups.cpuset(tmp_path) == "2,5"
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroups.v1_cpu_mount(tmp_path) == tmp_path / "cpu,cpuacct"
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    assert cgroups.is_v2(tmp_path)


# ---- processes --------------------------------------------------------------------------------

def test_spawned_ranks_and_their_states():
    spawn = multiprocessing.get_context("spawn")
    ranks = [spawn.Process(target=time.sleep, args=(30,)) for _ in range(2)]
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # no rank
    try:
        for rank in ranks:
            rank.start()
        assert processes.spawned_ranks() == sorted(r.pid for r in ranks)
        assert processes.process_state(ranks[0].pid) is None
        ranks[0].kill()
        ranks[0].join()  # reaped: gone
        helper.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while processes.process_state(helper.pid) != "frozen" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes.process_state(helper.pid) == "frozen"
        assert processes.process_state(ranks[0].pid) == "gone"
        assert processes.spawned_ranks(ranks[0].pid) == []  # no such parent
    finally:
        for rank in ranks:
            rank.kill()
            rank.join()
        helper.kill()
        helper.wait()


@pytest.mark.parametrize("status, state", [("zombie", "gone"), ("stopped", "frozen"), ("sleeping", None)])
def test_process_states(monkeypatch, status, state):
    monkeypatch.setattr(processes.psutil, "Process", lambda pid: SimpleNamespace(status=lambda: status))
    assert processes.process_state(1) == state
