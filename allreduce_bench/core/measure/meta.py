"""What a run was measured on, collected apart from the measuring (as pyperf does)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import sys
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

import torch

from allreduce_bench.core.environment import KUBERNETES_NODE_ENV, user_setting, variables, visible_gpus
from allreduce_bench.core.host import gpus as host_gpus
from allreduce_bench.core.measure import machine
from allreduce_bench.core.measure.context import Measuring
from allreduce_bench.core.measure.device import cpu_model

ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "OMP_NUM_THREADS",
                "CUDA_VISIBLE_DEVICES", "SLURM_JOB_", "SLURM_NNODES", "SLURM_NTASKS",
                "SLURM_STEP_", "MASTER_", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "UCX_")


def versions() -> dict:
    """Python, torch and, with CUDA, the CUDA runtime, NCCL and NVIDIA driver versions."""
    found: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__}
    if torch.cuda.is_available():
        found["cuda"] = torch.version.cuda
        try:
            found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # torch built without NCCL
            pass
        if driver := host_gpus.driver_version():
            found["nvidia_driver"] = driver
    for name in ("pandas", "matplotlib", "numpy"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "?")
    return found


def gpus() -> list[dict]:
    if not torch.cuda.is_available():
        return []
    found = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        found.append({"index": index, "name": props.name,
                      "memory_GiB": round(props.total_memory / 2**30, 1),
                      "uuid": str(getattr(props, "uuid", "")) or None})
    return found


TOPOLOGY_FILE = "nvidia-smi-topo.{host}.txt"


def save_topologies(out_dir, topologies: dict[str, str] | None) -> list:
    """Each host's `nvidia-smi topo -m` beside the run, as printed (meta.json keeps it too)."""
    written = []
    for host, text in (topologies or {}).items():
        if text.startswith("nvidia-smi"):  # "nvidia-smi topo -m failed: ...": only in meta.json
            continue
        path = Path(out_dir) / TOPOLOGY_FILE.format(host=host.replace("/", "_"))
        path.write_text(text if text.endswith("\n") else text + "\n")
        written.append(path)
    return written


def environment() -> dict:
    """The variables that change how collectives run (NCCL_*, GLOO_*, ...) and the job layout."""
    return variables(*ENV_PREFIXES)


def config_meta(config: Measuring) -> dict:
    """Every field of a command's config, its launch's included (meta.json's `config`: resume compares them)."""
    launch = {f.name: getattr(config.launch, f.name) for f in fields(config.launch)
              if f.name not in ("emulation", "link_peaks")}
    own = {f.name: getattr(config, f.name) for f in fields(config) if f.name != "launch"}  # type: ignore[arg-type]
    # a config's fields hold dataclass instances, never classes (which is_dataclass allows)
    return {k: list(v) if isinstance(v, tuple) else asdict(v) if is_dataclass(v) else v  # type: ignore[arg-type]
            for k, v in {**launch, **own}.items()}


def host_meta(config: Measuring) -> dict:
    return {
        "run_id": config.launch.run_id,
        "tag": config.launch.tag,
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": config.launch.command,
        "config": config_meta(config),
        "backend": config.launch.backend,
        "device": config.launch.device,
        "versions": versions(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "gpus": gpus(),
        "environment": environment(),
        "machine": machine.facts_at_start(),
    }


def close_machine_facts(out_dir, ranks_are_children: bool = False) -> None:
    """meta.json's `machine` completed over the run, once the ranks have ended."""
    from allreduce_bench.core.results.store import read_meta, update_meta

    started = read_meta(out_dir).get("machine")
    if isinstance(started, dict):
        update_meta(out_dir, machine=machine.facts_at_end(started, ranks_are_children))


def rank_info(device, env=None) -> dict:
    """Per rank: where it ran and on what; a node's first rank brings its GPU topology."""
    info = {"hostname": socket.gethostname(), "device": device.name, "pid": os.getpid()}
    if env is not None:
        info.update(rank=env.rank, local_rank=env.local_rank, node_rank=env.node_rank,
                    launcher=env.launcher)
    if node := user_setting(KUBERNETES_NODE_ENV):
        info["kubernetes_node"] = node
    if device.kind == "cuda":
        index = device.torch_device.index
        props = torch.cuda.get_device_properties(index)
        info.update(gpu_index=index, gpu_memory_GiB=round(props.total_memory / 2**30, 1),
                    cuda_visible_devices=visible_gpus())
        if env is None or env.local_rank == 0:
            # which GPUs talk over NVLink, PCIe, which NIC is near (NVML prints no such table)
            info["gpu_topology"] = host_gpus.smi("topo", "-m")
    return info


def world_meta(infos: list[dict]) -> dict:
    found = {"hostnames": [i["hostname"] for i in infos],
             "device_names": [i["device"] for i in infos], "device_name": infos[0]["device"],
             "pids": [i.get("pid") for i in infos],  # what `export` writes as nccl-tests' pid
             "nodes_seen": len(dict.fromkeys(i["hostname"] for i in infos))}
    if infos[0].get("launcher"):
        found["launcher"] = infos[0]["launcher"]
    if any(i.get("kubernetes_node") for i in infos):
        found["kubernetes_nodes"] = [i.get("kubernetes_node") for i in infos]
    if "gpu_index" in infos[0]:
        found["gpu_per_rank"] = [{k: i.get(k) for k in ("hostname", "gpu_index", "gpu_memory_GiB",
                                                         "cuda_visible_devices")} for i in infos]
    topologies = {i["hostname"]: i["gpu_topology"] for i in infos if i.get("gpu_topology")}
    if topologies:
        found["gpu_topology"] = topologies
    return found
