"""Backend, GPU and process-group choices, with torch.cuda replaced by fakes (no GPU needed)."""
import datetime as dt
import stat
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from configs import run_config_of

from allreduce_bench.core.config.run import resolve_backend
from allreduce_bench.core.environment import RankEnv
from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.host.gpus import smi
from allreduce_bench.core.measure import meta
from allreduce_bench.core.measure.device import (
    NCCL_GRACE_S,
    CudaDevice,
    Device,
    gpu_index,
    make_device,
    process_group_options,
)


@pytest.fixture
def fake_gpus(monkeypatch):
    """fake_gpus(n): n visible GPUs; returns the list of set_device calls."""
    calls = []

    def install(count: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "set_device", calls.append)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(
            name=f"Fake H100 #{i}", total_memory=80 * 2**30, uuid=f"GPU-{i:04d}"))
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Fake H100")
        return calls
    return install


@pytest.mark.parametrize("local_rank,local_size,visible,expected", [
    (0, 8, 8, 0), (5, 8, 8, 5), (3, 4, 8, 3),  # one GPU per local rank
    (3, 4, 1, 0),  # srun --gpus-per-task=1: each rank sees only its own GPU
])
def test_gpu_index(local_rank, local_size, visible, expected):
    assert gpu_index(local_rank, local_size, visible) == expected


@pytest.mark.parametrize("local_rank,local_size,visible", [(3, 4, 2), (2, 4, 0)])
def test_gpu_index_refuses_sharing(local_rank, local_size, visible):
    with pytest.raises(UsageError, match=f"local rank {local_rank} of {local_size}"):
        gpu_index(local_rank, local_size, visible)


def test_cuda_device_sets_its_gpu_before_anything_else(fake_gpus):
    calls = fake_gpus(4)
    device = make_device("cuda", 2, 4, timeout_s=7)
    assert isinstance(device, CudaDevice) and calls == [2]
    assert device.torch_device == torch.device("cuda", 2) and device.timeout_s == 7
    assert device.name == "Fake H100"
    assert type(make_device("cpu", 2, 4)) is Device


def test_cuda_device_without_cuda(fake_gpus):
    fake_gpus(0)
    with pytest.raises(UsageError, match="no CUDA device"):
        CudaDevice(0, 1)


def test_process_group_options(fake_gpus, monkeypatch):
    fake_gpus(4)
    gpu = make_device("cuda", 1, 4, timeout_s=30)

    def new_init_process_group(backend=None, device_id=None):
        """torch >= 2.3, whichever torch is installed: device_id binds the default group."""
    monkeypatch.setattr(dist, "init_process_group", new_init_process_group)
    nccl = process_group_options("nccl", gpu, 30)
    assert nccl["device_id"] == torch.device("cuda", 1)
    assert nccl["timeout"] == dt.timedelta(seconds=30 + NCCL_GRACE_S)
    assert process_group_options("gloo", Device(), 30) == {"timeout": dt.timedelta(seconds=30)}

    def old_init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                               rank=-1, store=None, group_name="", pg_options=None):
        """torch 2.1/2.2: no device_id."""
    monkeypatch.setattr(dist, "init_process_group", old_init_process_group)
    assert "device_id" not in process_group_options("nccl", gpu, 30)


@pytest.mark.parametrize("gpus,backend,device,needed,expected", [
    (8, "auto", None, 8, ("nccl", "cuda")),
    (4, "auto", None, 8, ("gloo", "cpu")),  # not one GPU per local rank
    (0, "auto", None, 1, ("gloo", "cpu")),
    (8, "auto", "cpu", 8, ("gloo", "cpu")),
    (2, "nccl", None, 2, ("nccl", "cuda")),
])
def test_backend_selection(gpus, backend, device, needed, expected):
    assert resolve_backend(backend, device, needed, gpus) == expected


def test_gloo_on_gpu_tensors_shares_gpus_and_runs_only_its_own_allreduce(fake_gpus, monkeypatch):
    fake_gpus(1)
    assert resolve_backend("gloo", "cuda", 4, 1) == ("gloo", "cuda")  # four ranks on one GPU
    with pytest.raises(UsageError, match="4 GPU ranks per host"):
        resolve_backend("nccl", "cuda", 4, 1)  # NCCL refuses two ranks on one device
    assert make_device("cuda", 3, 4).torch_device == torch.device("cuda", 0)
    from allreduce_bench.core.config.run import check_gloo_on_gpu

    check_gloo_on_gpu(("native",), (), "gloo", "cuda")
    with pytest.raises(UsageError, match="not ring.*--algos native"):
        check_gloo_on_gpu(("native", "ring"), (), "gloo", "cuda")
    with pytest.raises(UsageError, match="not all_gather"):
        check_gloo_on_gpu(("native",), (("all_gather", ("native",)),), "gloo", "cuda")
    check_gloo_on_gpu(("ring",), (), "gloo", "cpu")


CLI_DEFAULTS = dict(algos="ring", world_sizes=None, sizes="4K", min_bytes=None, max_bytes=None,
                    factor=None, dtype="float32", warmup=None, backend="auto",
                    device=None, ranks_per_node=None, tag="", out_dir=None, timeout_s=60.0,
                    quick=False, no_plot=True)
OMPI_2 = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
          "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}


@pytest.mark.parametrize("gpus,visible,expected", [(2, None, "nccl"), (1, "1", "nccl"), (0, None, "gloo")])
def test_auto_backend_under_a_launcher(fake_gpus, monkeypatch, gpus, visible, expected):
    """Two MPI ranks on a host: nccl with a GPU each (2 visible, or 1 bound to each rank by its
    own CUDA_VISIBLE_DEVICES; tests/core/test_gpu_path.py has one GPU seen without it)."""
    fake_gpus(gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in {**OMPI_2, **({"CUDA_VISIBLE_DEVICES": visible} if visible else {})}.items():
        monkeypatch.setenv(name, value)
    config = run_config_of(**CLI_DEFAULTS)  # the probe counts torch's GPUs
    assert config.launch.backend == expected and config.launch.world_sizes == (2,)


def test_meta_records_gpus_and_topology(fake_gpus, monkeypatch, tmp_path):
    fake_gpus(2)
    assert meta.gpus() == [{"index": i, "name": f"Fake H100 #{i}", "memory_GiB": 80.0,
                            "uuid": f"GPU-{i:04d}"} for i in range(2)]
    monkeypatch.setenv("PATH", str(tmp_path))
    assert smi("topo", "-m") is None  # no nvidia-smi: nothing recorded
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho \"GPU0 X NV18 args:$*\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert smi("topo", "-m").strip() == "GPU0 X NV18 args:topo -m"

    device = make_device("cuda", 1, 2)
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    infos = [meta.rank_info(device, RankEnv(r, 2, r, 2, "slurm")) for r in range(2)]
    assert infos[0]["gpu_topology"].startswith("GPU0") and "gpu_topology" not in infos[1]
    assert infos[1]["gpu_memory_GiB"] == 80.0 and infos[1]["launcher"] == "slurm"
    found = meta.world_meta(infos)
    assert found["launcher"] == "slurm" and found["nodes_seen"] == 1
    assert list(found["gpu_topology"]) == [infos[0]["hostname"]]
    assert meta.environment()["NCCL_P2P_DISABLE"] == "1"
