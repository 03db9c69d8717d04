"""--bind: the pure planning (CPU lists, NUMA maps, launchers' variables) and applying it."""
import os

import pytest

from allreduce_bench.core.host.gpus import topo_numa_node
from allreduce_bench.core.measure import binding
from allreduce_bench.core.measure.binding import (
    Binder,
    core_block,
    format_cpulist,
    gpu_numa_node,
    launcher_binding,
    numa_nodes,
    parse_cpulist,
    summary,
)

TWO_NODES = {0: [0, 1, 2, 3, 8, 9, 10, 11], 1: [4, 5, 6, 7, 12, 13, 14, 15]}
ALL16 = tuple(range(16))
FIFO = {"policy": "fifo", "why": "test"}  # a rank's threads under SCHED_FIFO


def test_cpulists_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([11, 0, 1, 2, 3, 8, 10]) == "0-3,8,10-11"
    assert parse_cpulist("") == [] and format_cpulist([]) == ""


def test_core_blocks_split_the_allowed_cpus():
    allowed = list(range(8))
    assert [core_block(allowed, r, 4) for r in range(4)] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [core_block(allowed, r, 3) for r in range(3)] == [(0, 1), (2, 3, 4), (5, 6, 7)]
    assert [core_block([4, 6], r, 2) for r in range(2)] == [(4,), (6,)]
    assert [core_block([0, 1], r, 4) for r in range(4)] == [(0,), (1,), (0,), (1,)]  # shared


def test_auto_binds_one_core_per_rank_on_cpu_when_there_are_enough():
    chosen = Binder("auto", (0, 1), {0: [0, 1]}, sched=FIFO).plan(1, 2)
    assert chosen.how == "core" and chosen.cpus == (1,)


def test_auto_leaves_more_ranks_than_cpus_unbound_and_core_shares():
    chosen = Binder("auto", (0, 1), {0: [0, 1]}, sched=FIFO).plan(3, 4)
    assert chosen.how == "none" and chosen.cpus is None and "2 CPU(s) for 4" in chosen.why
    forced = Binder("core", (0, 1), {0: [0, 1]}, sched=FIFO).plan(3, 4)
    assert forced.cpus == (1,) and "shared" in forced.why


def test_auto_on_gpu_takes_the_gpus_numa_node():
    chosen = Binder("auto", ALL16, TWO_NODES, gpu=True, gpu_node=1, sched=FIFO).plan(0, 8)
    assert chosen.how == "numa" and chosen.cpus == (4, 5, 6, 7, 12, 13, 14, 15)
    unknown = Binder("auto", ALL16, TWO_NODES, gpu=True, sched=FIFO).plan(0, 8)
    assert unknown.how == "none" and "unknown" in unknown.why


def test_numa_on_cpu_deals_nodes_over_local_ranks():
    numa = Binder("numa", ALL16, TWO_NODES, sched=FIFO)
    cpus = [numa.plan(r, 4).cpus for r in range(4)]
    assert cpus[0] == cpus[1] == tuple(TWO_NODES[0]) and cpus[2] == cpus[3] == tuple(TWO_NODES[1])
    # only the allowed CPUs of a node
    assert Binder("numa", (1, 2), TWO_NODES, sched=FIFO).plan(0, 1).cpus == (1, 2)


def test_a_launchers_binding_is_kept():
    chosen = Binder("auto", (3,), TWO_NODES, launcher="srun --cpu-bind=mask_cpu", sched=FIFO).plan(0, 2)
    assert chosen.how == "launcher" and chosen.cpus is None and "srun" in chosen.why
    # asked for explicitly, a mode overrides it
    assert Binder("core", (2, 3), TWO_NODES, launcher="srun", sched=FIFO).plan(0, 2).cpus == (2,)
    assert Binder("none", (2, 3), TWO_NODES, sched=FIFO).plan(0, 2).how == "none"


def test_launcher_binding_from_variables_and_affinity():
    everything = list(range(8))
    assert launcher_binding({"SLURM_CPU_BIND_TYPE": "mask_cpu:"}, [0, 1], everything) == \
        "srun --cpu-bind=mask_cpu"
    assert launcher_binding({"SLURM_CPU_BIND_TYPE": "none"}, everything, everything) is None
    assert launcher_binding({"OMPI_MCA_hwloc_base_binding_policy": "core"}, [2], everything) == \
        "mpirun --bind-to core"
    assert "affinity 4-7 of 0-7" in launcher_binding({}, [4, 5, 6, 7], everything)  # numactl, taskset
    assert launcher_binding({}, everything, everything) is None


def test_sysfs_numa_maps(tmp_path):
    for node, cpus in (("node0", "0-3"), ("node1", "4-7"), ("node2", "")):  # node2: memory only
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    assert numa_nodes(tmp_path) == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    device = tmp_path / "0000:3b:00.0"
    device.mkdir()
    (device / "numa_node").write_text("1\n")
    assert gpu_numa_node("0000:3B:00.0", tmp_path) == 1
    (device / "numa_node").write_text("-1\n")
    assert gpu_numa_node("0000:3b:00.0", tmp_path) is None
    assert gpu_numa_node("0000:00:00.0", tmp_path) is None
    assert binding.pci_address(0, 0x3B, 0) == "0000:3b:00.0"


TOPO = """\
\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPXB\t0-47,96-143\t0\t\tN/A
GPU1\tNV18\t X \tSYS\t48-95,144-191\t1\t\tN/A
NIC0\tPXB\tSYS\t X \t\t\t\t

Legend:
"""


def test_nvidia_smi_topology_numa_column():
    assert topo_numa_node(TOPO, 0) == 0 and topo_numa_node(TOPO, 1) == 1
    assert topo_numa_node(TOPO, 2) is None and topo_numa_node("no table", 0) is None


def test_nvidia_smi_index_under_cuda_visible_devices():
    assert binding.physical_gpu(1, None) == 1
    assert binding.physical_gpu(1, "4,6") == 6
    assert binding.physical_gpu(0, "GPU-5f3a") is None


def test_summary_names_unbound_and_shared_ranks():
    def p(how, cpus):
        return {"bind": "auto", "how": how, "cpus": cpus, "numa_nodes": [0], "why": "w"}
    assert summary([p("core", "0"), p("core", "1")], ["h", "h"]) == "ranks bound by core"
    unbound = summary([p("none", "0-1")] * 4, ["h"] * 4)
    assert unbound.startswith("ranks unbound") and "sharing CPUs" in unbound
    # the same CPUs on two hosts are not shared
    assert "sharing" not in summary([p("core", "0"), p("core", "0")], ["a", "b"])
    assert "rank(s) 0-1" in summary([p("core", "0"), p("core", "0"), p("core", "1")], ["h"] * 3)


def test_summary_is_linear_in_the_ranks():
    """4,096 ranks, 8 per host, one core block each: one pass over the CPUs, not every pair of
    ranks (rank 0 wrote it twice at start-up, ~27 s each at 4,096 ranks before, issue 53);
    the pair of ranks sharing a block is still found."""
    import time

    hosts = [f"node{r // 8}" for r in range(4096)]
    placed = [{"how": "core", "cpus": f"{r % 8 * 16}-{r % 8 * 16 + 15}", "why": "w"} for r in range(4096)]
    placed[4095] = {**placed[4095], "cpus": placed[4094]["cpus"]}
    started = time.perf_counter()
    line = summary(placed, hosts)
    assert time.perf_counter() - started < 5.0
    assert line == "ranks bound by core; sharing CPUs with another rank: rank(s) 4094-4095"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_bind_rank_applies_to_every_thread_and_records_it():
    import threading

    before = os.sched_getaffinity(0)
    started, stop = threading.Event(), threading.Event()
    seen = {}

    def worker():
        started.set()
        stop.wait(10)
        seen["cpus"] = os.sched_getaffinity(0)
    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(10)
    try:
        placement = binding.bind_rank("core", 1, 2, started_here=True)
        stop.set()
        thread.join(10)
        mine = sorted(before)[len(before) // 2:]
        assert placement.how == "core" and placement.cpus == format_cpulist(mine)
        assert sorted(seen["cpus"]) == mine  # a thread started before the binding moved too
        assert placement.as_dict()["bind"] == "core"
    finally:
        stop.set()
        binding.set_affinity(before)


def test_the_report_says_where_ranks_ran():
    from allreduce_bench.core.analysis.placement import placement_lines, placement_warnings

    meta = {"binding": {"4": {"summary": "ranks unbound; sharing CPUs with another rank: rank(s) 0-3"},
                        "2": {"summary": "ranks bound by core"}}}
    assert placement_lines(meta) == ["N=2: ranks bound by core",
                                     "N=4: ranks unbound; sharing CPUs with another rank: rank(s) 0-3"]
    assert placement_warnings({"": meta}) == [
        "placement: N=4: ranks unbound; sharing CPUs with another rank: rank(s) 0-3"]
    assert placement_warnings({"old": {}}) == [] and placement_lines({}) == []


def test_a_phases_members_are_the_sub_worlds_ranks_on_this_host():
    hosts = ["a", "a", "b", "b"]
    assert binding.local_members(2, 1, hosts, one_machine=False) == [0, 1]
    assert binding.local_members(4, 3, hosts, one_machine=False) == [2, 3]
    assert binding.local_members(4, 3, hosts, one_machine=True) == [0, 1, 2, 3]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_binder_places_again_and_restores_what_it_started_with():
    before = os.sched_getaffinity(0)
    binder = binding.Binder.here("auto", started_here=True, sched={"policy": "fifo", "why": "test"})
    try:
        assert binder.bind(0, 2).how == "core" and len(os.sched_getaffinity(0)) < len(before)
        wide = binder.bind(0, len(before) + 1)  # more ranks than CPUs: auto leaves them all
        assert wide.how == "none" and os.sched_getaffinity(0) == before
    finally:
        binding.set_affinity(before)
