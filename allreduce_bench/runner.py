"""The per-rank entry point every launcher runs, and the driver of a whole `run`."""
from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

import torch.distributed as dist

from . import meta as run_meta
from .bench import sweep
from .config import RunConfig
from .console import Console
from .device import make_device
from .launch import RankEnv, launch_local, launcher_env
from .results import ResultsWriter, load_results, read_meta, update_meta, write_meta
from .world import make_world


def rank_main(config: RunConfig, env: RankEnv | None = None) -> int:
    """Run the sweep on this rank for every world size of `config`; returns #wrong (rank 0)."""
    env = env or launcher_env()
    ranks_per_node = config.ranks_per_node or env.local_world_size
    device = make_device(config.device, env.local_rank)
    dist.init_process_group(config.backend, timeout=_dt.timedelta(seconds=config.timeout_s))
    try:
        infos = [None] * env.world_size
        dist.all_gather_object(infos, run_meta.rank_info(device))
        lead = env.rank == 0
        if lead:
            meta = read_meta(config.out_dir) or run_meta.host_meta(config)
            if len(infos) >= len(meta.get("hostnames", [])):
                meta.update(hostnames=[i["hostname"] for i in infos],
                            device_names=[i["device"] for i in infos], device_name=infos[0]["device"])
            write_meta(config.out_dir, meta)
        writer = ResultsWriter(config.out_dir) if lead else None
        total = len(config.algorithms) * len(config.sizes) * len(config.world_sizes)
        console = Console(total, enabled=lead)
        wrong = 0
        try:
            for world_size in config.world_sizes:
                world = make_world(world_size, ranks_per_node, device)
                if world is not None:
                    wrong += sweep(config, world, on_row=lambda row: (writer and writer.append(row),
                                                                      console.row(row)),
                                   on_algorithm=console.algorithm)
                device.barrier(None)
        finally:
            console.close()
        return wrong
    finally:
        dist.destroy_process_group()


def finish(config: RunConfig) -> int:
    """After measuring: summary from the stored rows, figures, exit code from #wrong."""
    frame = load_results(config.out_dir)
    frame = frame[frame["run_id"] == config.run_id]
    from .summary import summary_text
    print("\n" + summary_text(frame))
    if config.plot:
        from .report import write_report
        figures, report = write_report(frame, Path(config.out_dir) / "plots")
        print(f"figures: {', '.join(map(str, figures.values()))}\nreport: {report}")
    update_meta(config.out_dir, finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"results: {Path(config.out_dir) / 'results.csv'}")
    wrong = int(frame["wrong"].sum())
    if wrong:
        print(f"FAILED: {wrong} element(s) wrong; the results above are not to be trusted",
              file=sys.stderr)
        return 1
    return 0


def run(config: RunConfig) -> int:
    """Measure under a launcher's world, or start a local world per world size."""
    env = launcher_env()
    if env is not None:
        rank_main(config, env)
        return finish(config) if env.rank == 0 else 0
    write_meta(config.out_dir, run_meta.host_meta(config))
    for world_size in config.world_sizes:
        launch_local(world_size, rank_main, config.with_world_sizes((world_size,)))
    return finish(config)
