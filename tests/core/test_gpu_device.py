"""The GPU path without a GPU: torch.cuda, NVML, nvidia-smi and dist's collectives replaced by
fakes (tests/support/fake_cuda.py), for what issue 46 found by reading it. doc/methodology.md's
"The GPU path" says what these cover and what only a GPU can confirm."""
from __future__ import annotations

import stat
import sys
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from fake_cuda import GPU, Ranks, cuda_device, install

from allreduce_bench.core.algorithms import Algorithm
from allreduce_bench.core.config import Sampling
from allreduce_bench.core.measure import device as device_module
from allreduce_bench.core.measure import link_peaks, timing
from allreduce_bench.core.measure.collective import Payload, measure
from allreduce_bench.core.measure.device import Device, PeerTimeout
from allreduce_bench.core.measure.world import CommGroup, World

WORK_MS = 0.01  # one collective's GPU time


def _sample_per_call_us(rank: int, ranks: Ranks, launch_s_per_call: list[float], loops: int) -> list[float]:
    """This rank's time per call in two samples of `loops` collectives, its host having queued
    each call in launch_s_per_call[rank]."""
    device = cuda_device(launch_s_per_call[rank])
    buffer = torch.zeros(1)

    def collective() -> None:
        ranks.all_reduce(buffer)
        GPU.clock_ms += WORK_MS
    return timing.take_samples(collective, device, None, loops, 2)


def test_every_rank_spins_as_long_as_the_slowest_launcher_of_its_group(monkeypatch):
    """Two ranks whose hosts queue a call in 10 and 30 us: each rank's own spin (2 x loops x
    its launch time) started rank 0's clock 4 ms early, and it waited inside the first call,
    so the slowest interval held 40 us a call of waiting. One spin, the longest: none."""
    install(monkeypatch)
    ranks = Ranks(2)
    ranks.patch(monkeypatch)
    per_call = ranks.run(_sample_per_call_us, ranks, [10e-6, 30e-6], 100)
    for samples in per_call:
        assert samples == pytest.approx([WORK_MS * 1e3] * 2)


def test_gloo_on_gpu_tensors_queues_no_spin(monkeypatch):
    """gloo holds the host until the GPU is done with each call: a spin would be waited out,
    counted as launch time, and double every sample up to its cap."""
    install(monkeypatch)
    slept = []
    monkeypatch.setattr(torch.cuda, "_sleep", slept.append, raising=False)
    Ranks(1, backend="gloo").patch(monkeypatch)
    device = cuda_device()
    monkeypatch.setattr(type(device), "barrier", lambda self, group: None)
    for _ in range(3):
        timing.take_samples(lambda: None, device, None, loops=10, count=2)
        device.note_launch(host_s=0.05, loops=10)  # as gloo's calls make it: spin + work
    assert slept == [] and device.launch_spin_s(10, None) == 0.0


def _one_gpu_sample(rank: int, call, sampling: Sampling) -> timing.Measured:
    return timing.sample(call, cuda_device(), None, sampling)


def _host_busy(seconds: float):
    def call() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return call


def test_a_call_the_gpu_has_nothing_for_stops_its_loops_at_the_hosts_time(monkeypatch):
    """One rank: NCCL launches nothing for an in-place sum (NCCL src/enqueue.cc: nRanks == 1
    goes to ncclLaunchOneRank, src/device/onerank.cu: no copy when dst == src), so the interval
    is ~0 whatever the loops. The host's queueing (2 us a call here) is the sample's length:
    a few hundred loops, where the interval alone ran them to max_loops (issue 54)."""
    install(monkeypatch)
    ranks = Ranks(1)
    ranks.patch(monkeypatch)
    sampling = Sampling(budget_s=0.05, min_sample_s=0.001, min_samples=3, max_samples=50, warmup=1)
    measured = ranks.run(_one_gpu_sample, _host_busy(2e-6), sampling)[0]
    assert 100 <= measured.loops <= 2000


def test_samples_are_planned_from_their_wall_time(monkeypatch):
    """An alignment whose barrier waits 3 ms on the host (the GPU's spin and the last sample's
    work) and calls of 0.2 ms of GPU work: the budget holds as many samples as their wall time
    allows, not as many as their 1 ms intervals would (issue 54: the spin was not counted)."""
    install(monkeypatch)
    ranks = Ranks(1)
    ranks.patch(monkeypatch)
    align = device_module.CudaDevice.align
    monkeypatch.setattr(device_module.CudaDevice, "align",
                        lambda self, group, spin_s=0.0: (time.sleep(0.003), align(self, group, spin_s)))

    def work() -> None:
        GPU.clock_ms += 0.2
    sampling = Sampling(budget_s=0.05, min_sample_s=0.001, min_samples=3, max_samples=200, warmup=1)
    measured = ranks.run(_one_gpu_sample, work, sampling)[0]
    assert measured.samples <= 0.05 / 0.003 + 1


def _world(device) -> World:
    group = CommGroup(None, (0,), 0)
    return World(group, group, group, 1, device)


def _lost_peer_reads(rank: int) -> list[str]:
    """What ends at the timeout, on a GPU whose queued work never completes: the timing loop's
    MAX and gather, the #wrong count, and the check's call after two timed ones that did."""
    device = cuda_device(timeout_s=0.05)
    ended = []
    GPU.stuck = True
    for name, read in (("slowest", lambda: timing.slowest([1.0], None, device)),
                       ("gather", lambda: timing.gather([1.0], None, device)),
                       ("total", lambda: timing.total(torch.tensor(3), None, device))):
        try:
            read()
        except PeerTimeout:
            ended.append(name)
    GPU.stuck, calls = False, []

    def build(tensor, world):
        def call():
            calls.append(1)
            GPU.stuck = len(calls) > 2
        return call
    try:
        measure(Algorithm("stalls", "its third call never completes", build), _world(device),
                Payload(4, torch.float32), Sampling(loops=1, samples=2, warmup=0))
    except PeerTimeout:
        ended.append(f"the check's call (call {len(calls)})")
    return ended


def test_reads_of_collective_results_give_up_at_the_timeout(monkeypatch):
    """A peer lost while the GPU waits for it: the host's reads of collective results end at
    --timeout with PeerTimeout (the sweep reports where it stopped), not at NCCL's watchdog
    10 minutes later."""
    install(monkeypatch)
    ranks = Ranks(1)
    ranks.patch(monkeypatch)
    assert ranks.run(_lost_peer_reads) == [["slowest", "gather", "total", "the check's call (call 3)"]]


def test_the_timeline_and_the_probe_read_the_devices_clock(monkeypatch):
    """One clock: the DDP timeline's instants are the device's stamps (on GPU, read within
    --timeout), and the link probe's ping-pong is timed by the CPU device's clock."""
    from allreduce_bench.ddp.timeline import Timeline

    install(monkeypatch)
    device = cuda_device(timeout_s=0.05)
    timeline = Timeline(device, 1)
    timeline.begin(0)
    GPU.clock_ms += 2.0
    timeline.at("backward_start")
    assert timeline.between(0, "start", "backward_start") == pytest.approx(2000.0)
    GPU.stuck = True
    with pytest.raises(PeerTimeout):
        timeline.between(0, "start", "backward_start")

    ticks = iter(range(0, 10**12, 10**6))  # every stamp 1 ms after the one before
    monkeypatch.setattr(Device, "stamp", staticmethod(lambda: next(ticks)))
    monkeypatch.setattr(dist, "send", lambda *a, **k: None)
    monkeypatch.setattr(dist, "recv", lambda *a, **k: None)
    GBps, size = link_peaks.probe(0, largest=256 << 10)
    assert size == 256 << 10 and GBps == pytest.approx(size / 0.5e-3 / 1e9)  # 1 ms a round trip


# --- the GPU's identity: torch's index, NVML's and nvidia-smi's ---------------------------------

class CudaCalls:
    """torch.cuda as a rank sees it, recording every call: two GPUs, and `set_device`."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        results = {"is_available": True, "device_count": 2,
                   "get_device_properties": SimpleNamespace(name="Fake H100", total_memory=80 << 30)}

        def call(*args, **kwargs):
            self.calls.append(name)
            return results.get(name)
        return call


def _fake_nvidia_smi(tmp_path, monkeypatch, text: str) -> None:
    """nvidia-smi on PATH, and no NVML: prints `text`, records its arguments in tmp_path/args."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    command = tmp_path / "bin" / "nvidia-smi"
    command.parent.mkdir(exist_ok=True)
    command.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/args\ncat <<'EOF'\n{text}EOF\n")
    command.chmod(command.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{command.parent}:/usr/bin:/bin")


FREE = "".join(f"{i}, GPU-{c * 4}, {free}, Fake H100\n"  # index, UUID, MiB free, name
               for i, (c, free) in enumerate(zip("abcd", (81000, 200, 81000, 81000))))


def test_no_cuda_call_before_the_rank_chooses_its_gpu(monkeypatch, tmp_path):
    """Local rank 1 of 2 under a launcher, CUDA_VISIBLE_DEVICES=2,3: its options are checked
    before it chooses its GPU, so no CUDA call may come first (it would open a context on GPU
    0 in every rank); the free memory checked is that of the GPUs the ranks use (2 and 3, by
    nvidia-smi), and physical GPU 1, full, is not one of them."""
    from configs import run_config_of
    from test_device_selection import CLI_DEFAULTS

    from allreduce_bench.core.errors import UsageError
    from allreduce_bench.core.measure.device import make_device

    cuda = CudaCalls()
    monkeypatch.setattr(torch, "cuda", cuda)
    for name, value in {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                        "CUDA_VISIBLE_DEVICES": "2,3"}.items():
        monkeypatch.setenv(name, value)
    _fake_nvidia_smi(tmp_path, monkeypatch, FREE)
    options = {**CLI_DEFAULTS, "device": "cuda", "backend": "nccl", "sizes": "64M"}
    config = run_config_of(**options)
    make_device(config.launch.device, 1, 2)
    first = cuda.calls.index("set_device")
    assert set(cuda.calls[:first]) <= {"is_available", "device_count"}, cuda.calls
    assert "mem_get_info" not in cuda.calls

    for visible in ("3,1", "GPU-dddd,GPU-bb"):  # now the full GPU is rank 1's
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        with pytest.raises(UsageError, match="needs 288 MiB on one GPU but it has 200 MiB free"):
            run_config_of(**options)


def test_nvml_and_nvidia_smi_are_asked_for_the_physical_gpu(monkeypatch, tmp_path):
    """Under srun --gpus-per-task=1 every rank's torch index is 0: NVML and nvidia-smi get
    the GPU's UUID (or, before torch 2.4, the CUDA_VISIBLE_DEVICES entry), not index 0."""
    from allreduce_bench.core.host.gpus import clock_events

    asked = []
    nvml = SimpleNamespace(
        nvmlInit=lambda: None, NVML_NVLINK_MAX_LINKS=2, NVML_FEATURE_ENABLED=1, NVMLError=OSError,
        nvmlDeviceGetHandleByIndex=lambda i: asked.append(("index", i)) or "handle",
        nvmlDeviceGetHandleByUUID=lambda uuid: asked.append(("uuid", uuid)) or "handle",
        nvmlDeviceGetName=lambda h: "Fake H100", nvmlDeviceGetNvLinkState=lambda h, link: 1,
        nvmlDeviceGetNvLinkVersion=lambda h, link: 4)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    props = SimpleNamespace(name="Fake H100", uuid="dddd-0003")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: props)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    device = cuda_device()
    device.torch_device = torch.device("cuda", 0)
    monkeypatch.setattr(link_peaks, "nic_peaks", lambda: [])
    gpu = link_peaks.local_peaks(device)["gpu"]
    assert asked == [("uuid", "GPU-dddd-0003")] and gpu["nvlink_GBps"] == 50.0

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no pynvml: nvidia-smi nvlink -s
    _fake_nvidia_smi(tmp_path, monkeypatch, "GPU 3: Fake H100 (UUID: GPU-dddd)\n"
                     "\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n")
    gpu = link_peaks.local_peaks(device)["gpu"]
    assert gpu["nvlink_links"] == 2 and gpu["index"] == 0
    clock_events(device.physical_id)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[0] == "nvlink -s -i GPU-dddd-0003" and args[1].endswith("--id=GPU-dddd-0003")

    del props.uuid  # torch < 2.4: the CUDA_VISIBLE_DEVICES entry
    assert device.physical_id == "3"


def _object_collectives(tmp_path):
    """Every object collective of a rank's run, as the core calls it on `device`."""
    from allreduce_bench.core.measure import nccl_debug
    from allreduce_bench.core.measure.rank import Session

    def bind_phase(device):
        session = SimpleNamespace(binder=SimpleNamespace(bind=lambda i, n: SimpleNamespace(as_dict=dict)),
                                  env=SimpleNamespace(rank=0, world_size=2), hosts=["a", "a"], writer=False,
                                  launch=SimpleNamespace(emulation=None), device=device)
        Session.bind_phase(session, 2)

    def nccl_logs(device):
        nccl_debug.collect(SimpleNamespace(nccl_debug=True, out_dir=tmp_path), 0, 2, device.guarded)

    def phases(device):
        from allreduce_bench.core.sweep import allreduce
        launch = SimpleNamespace(ranks_per_node=1, out_dir=tmp_path, run_id="x")
        allreduce.measure_phases(SimpleNamespace(config=None, env=SimpleNamespace(local_world_size=1), device=device,
                                                 progress=None, launch=launch, writer=False))
    return {"bind_phase": bind_phase, "nccl_debug.collect": nccl_logs, "measure_phases": phases}


@pytest.mark.parametrize("caller", ["bind_phase", "nccl_debug.collect", "measure_phases"])
def test_object_collectives_give_up_at_the_timeout(monkeypatch, tmp_path, caller):
    """torch's all_gather_object & co. wait for NCCL's result on the host with no timeout of
    ours (a peer lost there met the watchdog's kill, not the one line): on the GPU they run on
    a thread of their own and end with PeerTimeout at --timeout (issue 54)."""
    def lost(*args, **kwargs):
        time.sleep(1.0)  # a peer that never answers, for as long as the test waits
    for name in ("all_gather_object", "broadcast_object_list", "gather_object"):
        monkeypatch.setattr(dist, name, lost)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    started = time.monotonic()
    with pytest.raises(PeerTimeout, match="within --timeout 0.05 s"):
        _object_collectives(tmp_path)[caller](cuda_device(timeout_s=0.05))
    assert time.monotonic() - started < 0.9
