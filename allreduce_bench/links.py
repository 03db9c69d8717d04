"""`allreduce-bench links`: the two kinds of link (NVLink vs InfiniBand), measured side by side.

On a world of >= 2 nodes (a cluster, the emulated one, or nodes simulated with --ranks-per-node),
for every size:

- intra: the backend's AllReduce inside every node's group, all nodes at once;
- inter: the backend's AllReduce among the ranks with the same local rank on every node, all of
  those groups at once (nccl-tests' NCCL_TESTS_SPLIT "DIV" and "MOD");
- p2p intra / p2p inter: a one-way send of the tensor from global rank 0 to rank 1 (same node)
  and from rank 0 to rank L (the next node), the other ranks idle.

Rows are `benchmark = links` with `link = intra | inter` and `operation = allreduce | p2p`. In a
row, `world_size` is the size of the group measured (so busbw's 2(N-1)/N is the group's, as
nccl-tests reports a split communicator; for p2p, busbw = algbw), and `nodes` and
`ranks_per_node` are the whole world's layout. The time of an AllReduce row is the slowest group's.
"""
from __future__ import annotations

import shlex
import sys

import click
import torch
import torch.distributed as dist

from . import meta as run_meta
from . import patterns
from .algorithms import native
from .bench import make_row, measure, slowest_per_iteration
from .config import RunConfig
from .console import HEADER, format_row
from .device import Device
from .errors import UsageError
from .launch import RankEnv, launcher_env
from .results import ResultsWriter, read_meta, start_meta, write_meta
from .runner import drive, finish, join_world
from .world import CommGroup, World, end_phase, make_world

HOW_TO_GET_NODES = ("start it on >= 2 nodes (torchrun --nnodes 2 ..., srun, mpirun), emulate them "
                    "on this machine with `allreduce-bench emulate --benchmarks links`, or "
                    "simulate nodes on loopback with `links --ranks-per-node L` and a world size "
                    ">= 2L")


def p2p_times(tensor: torch.Tensor, src: int, dst: int, pair: dist.ProcessGroup | None,
              device: Device, iters: int, warmup: int) -> list[float]:
    """Per-iteration time (us, the slower side) of sending `tensor` from global rank src to dst.

    Only src and dst call it. Each iteration starts at a barrier of the pair, so the receive is
    posted when the clock starts; the time ends when the receiver has the whole tensor.
    """
    me = dist.get_rank()

    def transfer() -> None:
        if me == src:
            dist.send(tensor, dst, group=pair)
        else:
            dist.recv(tensor, src, group=pair)

    for _ in range(warmup):
        transfer()
    timer = device.timer(iters)
    for i in range(iters):
        device.barrier(pair)
        timer.start(i)
        transfer()
        timer.stop(i)
    return slowest_per_iteration(timer.times_us(), pair, device)


def p2p_measure(count: int, dtype: torch.dtype, src: int, dst: int,
                pair: dist.ProcessGroup | None, device: Device, iters: int,
                warmup: int) -> tuple[list[float], int]:
    """(times, #wrong): the receiver starts with other values and must end with the sender's."""
    me = dist.get_rank()
    tensor = torch.empty(count, dtype=dtype, device=device.torch_device)
    patterns.fill(tensor, 0 if me == src else 1, 2)
    times = p2p_times(tensor, src, dst, pair, device, iters, warmup)
    expected = torch.empty_like(tensor)
    patterns.fill(expected, 0, 2)
    wrong = torch.tensor([patterns.count_wrong(tensor, expected) if me == dst else 0],
                         dtype=torch.int64, device=device.torch_device)
    dist.all_reduce(wrong, group=pair)
    return times, int(wrong.item())


def _view(group: CommGroup, device: Device) -> World:
    """A world made of one group, so `bench.measure` runs the backend's AllReduce on it."""
    return World(group, group, group, group.size, device)


def _slowest_group(times: list[float], wrong: int, lead: bool, device: Device) -> tuple[list, int]:
    """Across all concurrently measured groups: MAX time per iteration, #wrong summed once per group."""
    t = torch.tensor(times, dtype=torch.float64, device=device.torch_device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    w = torch.tensor([wrong if lead else 0], dtype=torch.int64, device=device.torch_device)
    dist.all_reduce(w)
    return t.cpu().tolist(), int(w.item())


def links_sweep(config: RunConfig, world: World, on_row) -> int:
    """Every size: intra and inter AllReduce (all groups at once), then p2p intra and inter."""
    device, L = world.device, world.ranks_per_node
    me = dist.get_rank()
    pairs = {"intra": (0, 1), "inter": (0, L)} if L >= 2 else {"inter": (0, L)}
    # torch wants every rank in every new_group call; each pair gets its own group.
    pair_groups = {link: dist.new_group(list(ranks)) for link, ranks in pairs.items()}
    wrong_total = 0
    for size in config.sizes:
        count = size // config.torch_dtype.itemsize  # whole elements (options.run_config)
        for link, group in (("intra", world.intra), ("inter", world.inter)):
            if group.size < 2:
                continue
            view = _view(group, device)
            device.barrier(None)  # all groups start together
            times, wrong = measure(native.build, view, count, config.torch_dtype, config.iters,
                                   config.warmup)
            times, wrong = _slowest_group(times, wrong, group.rank == 0, device)
            wrong_total += wrong
            on_row(_row(config, view, world, count, times, wrong, "native", link, "allreduce"))
        for link, (src, dst) in pairs.items():
            device.barrier(None)
            if me in (src, dst):
                pair = CommGroup(pair_groups[link], (src, dst), (src, dst).index(me))
                times, wrong = p2p_measure(count, config.torch_dtype, src, dst, pair.pg, device,
                                           config.iters, config.warmup)
                if me == 0:
                    wrong_total += wrong
                    on_row(_row(config, _view(pair, device), world, count, times, wrong, "send",
                                link, "p2p"))
        device.barrier(None)
    return wrong_total


def _row(config, view, world, count, times, wrong, algorithm, link, operation) -> dict:
    row = make_row(config, view, algorithm, count, times, wrong)
    row.update(benchmark="links", nodes=world.nodes, ranks_per_node=world.ranks_per_node,
               link=link, operation=operation)
    return row


def links_rank_main(config: RunConfig, env: RankEnv | None = None) -> int:
    """The per-rank entry point of `links` (any launcher); returns #wrong."""
    env = env or launcher_env()
    ranks_per_node = config.ranks_per_node or env.local_world_size
    device = join_world(config, env)
    try:
        infos = [None] * env.world_size
        dist.all_gather_object(infos, run_meta.rank_info(device, env))
        lead = env.rank == 0
        if lead:
            if read_meta(config.out_dir).get("run_id") != config.run_id:  # under a launcher
                start_meta(config.out_dir, run_meta.host_meta(config))
            meta = read_meta(config.out_dir)
            meta.update(run_meta.world_meta(infos))
            write_meta(config.out_dir, meta)
        world = make_world(env.world_size, ranks_per_node, device)
        writer = ResultsWriter(config.out_dir) if lead else None
        if lead:
            print(f"\n# links: {world.nodes} nodes x {world.ranks_per_node} ranks, {device.kind}; "
                  f"intra = AllReduce in each node's group, inter = AllReduce across nodes per "
                  f"local rank, p2p = one-way send\n# {'link':>5} {'op':>9}\n{HEADER}", flush=True)

        def on_row(row: dict) -> None:
            if writer:
                writer.append(row)
                print(f"  {row['link']:>5} {row['operation']:>9}{format_row(row)}", flush=True)

        wrong = links_sweep(config, world, on_row)
        end_phase(world, "links", device)
        return wrong
    finally:
        dist.destroy_process_group()


def links_summary(frame) -> str:
    """busbw intra vs inter per operation at the largest size: what the links figure shows."""
    frame = frame[frame["benchmark"] == "links"]
    lines = ["busbw (GB/s) intra vs inter:"]
    for operation, rows in frame.groupby("operation"):
        table = rows.pivot_table(index="size_bytes", columns="link", values="busbw_GBps",
                                 aggfunc="median")
        if {"intra", "inter"} <= set(table.columns):
            table["intra/inter"] = table["intra"] / table["inter"]
        lines.append(f"{operation}:\n{table.round(4).to_string()}")
    lines.append(f"#wrong in total: {int(frame['wrong'].sum())}")
    return "\n".join(lines)


def check_nodes(world_size: int, ranks_per_node: int) -> None:
    if ranks_per_node < 1 or world_size < 2 * ranks_per_node or world_size % ranks_per_node:
        nodes = world_size // max(ranks_per_node, 1)
        raise UsageError(f"links compares intra- and inter-node links and needs >= 2 nodes, but "
                         f"this world is {world_size} rank(s) in {max(nodes, 1)} node(s) of "
                         f"{ranks_per_node}; {HOW_TO_GET_NODES}")


def check_world(config: RunConfig, ranks_per_node_given: bool) -> None:
    """Bad layouts fail here, before any process starts."""
    env = launcher_env()
    if env is not None:
        check_nodes(env.world_size, config.ranks_per_node or env.local_world_size)
    elif not ranks_per_node_given:
        raise UsageError(f"links needs >= 2 nodes and this is a single node; {HOW_TO_GET_NODES}")
    else:
        check_nodes(max(config.world_sizes), config.ranks_per_node)


def run_links(config: RunConfig) -> int:
    if launcher_env() is None:
        start_meta(config.out_dir, run_meta.host_meta(config))
    return drive(config, links_rank_main, lambda c: finish(c, links_summary, draw=False),
                 [max(config.world_sizes)])


def links_command(run_command: click.Command) -> click.Command:
    """`links`, with the options of `run` (less --algos: it always uses the backend's AllReduce)."""

    def callback(**options):
        from .launch import announce
        from .options import run_config
        given = options["ranks_per_node"] is not None
        config = run_config(command=shlex.join(sys.argv), algos="native", **options)
        check_world(config, given)
        announce(f"allreduce-bench links: backend {config.backend} on {config.device}, "
                 f"{len(config.sizes)} sizes -> {config.out_dir}")
        sys.exit(run_links(config))

    return click.Command(
        "links", callback=callback,
        params=[p for p in run_command.params if p.name not in ("algos", "resume_dir")],
        short_help="Intra-node vs inter-node bandwidth (NVLink vs InfiniBand) on >= 2 nodes.",
        help="Intra-node vs inter-node bandwidth (NVLink vs InfiniBand), on a world of >= 2 "
             "nodes.\n\n\b\nPer size: the backend's AllReduce inside every node (intra) and "
             "across nodes among\nranks of the same local rank (inter), all groups at once, and a "
             "one-way\nsend within a node and between nodes (p2p). Rows: benchmark=links,\n"
             "link=intra|inter, operation=allreduce|p2p. Under a launcher it uses the whole world;\n"
             "locally, give --ranks-per-node L and a world size >= 2L (nodes simulated on\n"
             "loopback: both links are then the same), or use `emulate --benchmarks links`.")
