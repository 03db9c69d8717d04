"""`allreduce-bench ddp`: options, the per-rank entry point and the driver, as `run` has them."""
from __future__ import annotations

import datetime as _dt
import shlex
import sys
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import click

from allreduce_bench import units
from allreduce_bench.config.checks import OUTPUT_PATH
from allreduce_bench.config.ddp import DdpSettings
from allreduce_bench.errors import UsageError

# With --params 10M, a local CPU run at world sizes 2 and 4 on 2 idle cores takes about a minute.
CPU_DEFAULTS = dict(iters=5, warmup=1, batch_size=16)
GPU_DEFAULTS = dict(iters=20, warmup=5, batch_size=256)


@dataclass(frozen=True)
class DdpConfig:
    settings: DdpSettings  # what each rank measures
    world_sizes: tuple[int, ...]
    backend: str
    device: str
    ranks_per_node: int | None
    tag: str
    out_dir: Path
    timeout_s: float
    plot: bool = True
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    command: str = ""

    def with_world_sizes(self, sizes: tuple[int, ...]) -> DdpConfig:
        return replace(self, world_sizes=sizes)


def _at_least(name: str, value: int, low: int) -> int:
    if value < low:
        raise UsageError(f"{name} must be at least {low}, got {value}")
    return value


def ddp_config(*, params, layers, batch_size, bucket_mb, accum, world_sizes, iters, warmup,
               backend, device, ranks_per_node, tag, out_dir, timeout_s, no_plot,
               command="") -> DdpConfig:
    from allreduce_bench.analysis.ddp import parse_bucket_mbs, parse_count
    from allreduce_bench.config import default_out_dir
    from allreduce_bench.config.checks import check_finite, check_tag, check_writable_dir
    from allreduce_bench.config.options import resolve_world
    from allreduce_bench.launch.environments import launcher_env

    chosen, backend, device, ranks_per_node = resolve_world(world_sizes, backend, device,
                                                            ranks_per_node)
    defaults = GPU_DEFAULTS if device == "cuda" else CPU_DEFAULTS
    if units.parse_count(params, "--params") % 1:
        raise UsageError(f"--params {params!r} is not a whole number of parameters; e.g. 10M")
    params = parse_count(params, "--params")
    layers = _at_least("--layers", layers, 1)
    if params < layers * 2:
        raise UsageError(f"--params {params} is too small for {layers} layers; give at least "
                         f"{layers * 2} or fewer --layers")
    check_finite(timeout_s, "--timeout")
    bucket_mbs = parse_bucket_mbs(bucket_mb)
    for cap in bucket_mbs:
        check_finite(cap, "--bucket-mb")
    check_ddp_memory(params, chosen, device, launcher_env())
    env = launcher_env()
    writer = env is None or env.rank == 0
    tag = check_tag(tag)
    if out_dir is not None and writer:
        check_writable_dir(out_dir, "--out")
    return DdpConfig(
        settings=DdpSettings(
            params=params, layers=layers,
            batch_size=_at_least("--batch-size", defaults["batch_size"] if batch_size is None
                                 else batch_size, 1),
            bucket_mbs=bucket_mbs, accum=_at_least("--accum", accum, 1),
            iters=_at_least("--iters", iters if iters is not None else defaults["iters"], 1),
            warmup=_at_least("--warmup", warmup if warmup is not None else defaults["warmup"], 0)),
        world_sizes=chosen, backend=backend, device=device, ranks_per_node=ranks_per_node,
        tag=tag, out_dir=out_dir or default_out_dir("-".join(p for p in ("ddp", tag) if p),
                                                     claim=writer),
        timeout_s=timeout_s, plot=not no_plot, command=command)


# float32 copies of the parameters one rank holds at once: the weights, their gradients, DDP's
# bucket copy of the gradients, and the bucket buffers the AllReduce-alone measurement reduces.
DDP_COPIES = 4


def check_ddp_memory(params: int, world_sizes, device: str, env) -> None:
    from allreduce_bench.config.checks import check_memory

    per_rank = DDP_COPIES * 4 * params
    ranks_here = env.local_world_size if env is not None else max(world_sizes)
    check_memory(per_rank * ranks_here, per_rank, ranks_here,
                 f"--params {units.format_count(params)}", device,
                 "choose a smaller --params or fewer ranks")


def finish(config: DdpConfig) -> int:
    """Tables from the stored rows, figures, exit code 1 if any DDP gradient was wrong."""
    from allreduce_bench.analysis.ddp import ddp_rows, ddp_summary_text, set_epoch_markdown
    from allreduce_bench.results.load import load_results
    from allreduce_bench.results.store import read_meta, update_meta

    frame = ddp_rows(load_results(config.out_dir))
    frame = frame[frame["run_id"] == config.run_id]
    meta = read_meta(config.out_dir)
    print("\n" + ddp_summary_text(frame))
    print("\nDistributedSampler, epochs 0 and 1:\n" + set_epoch_markdown(meta.get("set_epoch_check", [])))
    if config.plot:
        from allreduce_bench.analysis.report import write_report
        figures, report = write_report(frame, Path(config.out_dir) / "plots")
        for path in [*figures.values(), report]:
            print(f"figure: {path}" if path != report else f"report: {path}")
    update_meta(config.out_dir, finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    print(f"results: {Path(config.out_dir) / 'results.csv'}")
    wrong = int(frame["wrong"].sum())
    if wrong:
        print(f"FAILED: {wrong} gradient element(s) after a DDP step differ from the hand-computed "
              "average", file=sys.stderr)
        return 1
    return 0


def run_ddp(config: DdpConfig) -> int:
    """Under a launcher measure its world; else start a local world per world size."""
    from allreduce_bench.benchmarks.ddp import ddp_meta, ddp_rank_main
    from allreduce_bench.launch.driver import drive
    from allreduce_bench.launch.environments import launcher_env
    from allreduce_bench.results.store import start_meta

    def before(config: DdpConfig) -> None:
        if launcher_env() is None:
            start_meta(config.out_dir, ddp_meta(config))

    return drive(config, ddp_rank_main, finish, before=before)


@click.command()
@click.option("--params", default="10M", show_default=True,
              help="Parameters of the synthetic model (decimal K/M/B suffixes), e.g. 50M.")
@click.option("--layers", type=int, default=8, show_default=True,
              help="Square linear layers the parameters are spread over.")
@click.option("--batch-size", type=int, help="Samples per rank per (micro-)batch. [16 on CPU, 256 on GPU]")
@click.option("--bucket-mb", default="1,5,25,100", show_default=True,
              help="Comma-separated DDP bucket caps (bucket_cap_mb, MiB) to measure.")
@click.option("--accum", type=int, default=4, show_default=True,
              help="Micro-batches per optimizer step for the no_sync comparison.")
@click.option("--world-sizes", help="Comma-separated world sizes. Default: 2,4 on CPU; 2,4,... up "
              "to the GPU count with NCCL; under a launcher, its whole world.")
@click.option("--iters", type=int, help="Timed steps per measurement. [5 on CPU, 20 on GPU]")
@click.option("--warmup", type=int, help="Untimed steps before timing. [1 on CPU, 5 on GPU]")
@click.option("--backend", default="auto", show_default=True,
              help="auto (nccl when every local rank has a GPU, else gloo), gloo or nccl.")
@click.option("--device", help="cpu or cuda; overrides what the backend implies.")
@click.option("--ranks-per-node", type=int,
              help="Ranks per node: the groups DDP's worlds are built with and the rows' node layout.")
@click.option("--tag", default="", help="A label carried in every row.")
@click.option("--out", "out_dir", type=OUTPUT_PATH,
              help="Output directory. [results/<UTC timestamp>-ddp[-<tag>]]")
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True,
              help="Seconds any collective may take before the run is aborted.")
@click.option("--no-plot", is_flag=True, help="Write results only, no figures.")
def ddp(**options):
    """Train a synthetic model with real DDP: bucketed overlap, no_sync, set_epoch.

    \b
    Per world size: compute alone (no DDP), AllReduce alone of DDP's buckets, the DDP step
    and the wait-then-AllReduce step (backward, one AllReduce of all gradients, optimizer)
    for each --bucket-mb, with a measured timeline of each bucket's AllReduce against
    backward; then K micro-batches per optimizer step syncing every time vs no_sync(), with
    AllReduce calls and bytes counted by a DDP communication hook; and the DistributedSampler
    index order with and without set_epoch. Writes benchmark=ddp rows to results.csv,
    ddp_timeline.csv, meta.json and plots/ddp_*.png; exits 1 if DDP's gradients were wrong.
    On an emulated cluster: `allreduce-bench emulate --benchmarks ddp`.
    """
    from allreduce_bench.launch.environments import announce

    config = ddp_config(command=shlex.join(sys.argv), **options)
    settings = config.settings
    announce(f"allreduce-bench ddp: backend {config.backend} on {config.device}, world sizes "
             f"{','.join(map(str, config.world_sizes))}, {settings.params:,} parameters, bucket caps "
             f"{','.join(f'{b:g}' for b in settings.bucket_mbs)} MiB, K={settings.accum} -> {config.out_dir}")
    sys.exit(run_ddp(config))
