"""The emulated cluster (namespaces, shaped links, torchrun per host, faults put on a host).

Tests that build namespaces need root (CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2; elsewhere
they are skipped with the reason. Sizes are tiny: these check correctness and clean-up, never speed.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from click.testing import CliRunner
from namespaces import needs_namespaces

from allreduce_bench.cli import main
from allreduce_bench.core import units
from allreduce_bench.core.errors import UsageError
from allreduce_bench.emulate import cli as emulate_command  # the module
from allreduce_bench.emulate import cluster as em
from allreduce_bench.emulate import pacing, rates

CLI = [sys.executable, "-m", "allreduce_bench"]


def ours(pid: int) -> list[str]:
    return [n for n in em.namespaces() if n.startswith(f"{em.PREFIX}{pid}-")]


# ---------------------------------------------------------------- pure parts

@pytest.mark.parametrize("text, bits", [("500mbit", 5e8), ("2Gbit", 2e9), ("50mbps", 4e8),
                                        ("1.5kbit", 1500)])
def test_rates_use_tc_units(text, bits):
    assert rates.parse_tc_rate(text) == pytest.approx(bits)


@pytest.mark.parametrize("text", ["fast", "500", "0mbit", "-1mbit", "5 furlongs"])
def test_bad_rate_is_a_usage_error(text):
    with pytest.raises(UsageError, match="--inter-bandwidth"):
        rates.parse_tc_rate(text)


def test_times_and_labels():
    assert units.parse_seconds("2ms") == pytest.approx(0.002) and units.parse_seconds("0") == 0
    with pytest.raises(UsageError, match="--inter-latency"):
        units.parse_seconds("2", "--inter-latency")
    assert em.Emulation(2, 2, 4.15e8).label == "2x2@415Mbit"
    assert em.Emulation(4, 8, 2e9, 0.002).label == "4x8@2Gbit+2ms"


def test_each_benchmark_gets_the_options_its_command_has():
    from allreduce_bench.cli import HOOKS
    from allreduce_bench.cli import main as root
    chosen = {r.name: r for r in HOOKS.joined("emulate_runnables") if r.name in ("allreduce", "links", "ddp")}
    with root.make_context("allreduce-bench", ["emulate"]) as ctx, ctx.scope():
        split = emulate_command.per_benchmark_args(chosen,
                                      ["--sizes", "1M", "--algos", "ring", "--params=40K",
                                       "--iters", "3", "--no-plot", "--bucket-mb", "1,25"])
    assert split["allreduce"] == ["--sizes", "1M", "--algos", "ring", "--iters", "3", "--no-plot"]
    assert split["links"] == ["--sizes", "1M", "--iters", "3", "--no-plot"]
    # ddp: its own options, and the emulated defaults for the model shape it was not given
    assert split["ddp"] == ["--layers", "24", "--batch-size", "256", "--params=40K", "--iters", "3",
                            "--no-plot", "--bucket-mb", "1,25"]


def test_ddp_link_is_paced_to_the_backward_pass():
    from allreduce_bench.ddp.config import DdpSettings
    settings = DdpSettings(params=24_000_000, layers=24, batch_size=256, bucket_mbs=(25.0,),
                           accum=4, iters=5, warmup=1)
    gradient_bits = 4 * 24 * (1000 * 1000 + 1000) * 8
    # 2 hosts x 1 rank: the ring sends the gradients once through each uplink
    assert pacing.ddp_rate_bps(settings, 2, 1, 0.3) == pytest.approx(gradient_bits / 0.3)
    assert pacing.ddp_rate_bps(settings, 2, 2, 0.3) == pytest.approx(1.5 * gradient_bits / 0.3)


def _link(cpu_s: float, backward_s: float, overhead_s: float = 0.0, cpu_rate: float = 1.0):
    """A fake probe: the AllReduce takes 1 Gbit / rate seconds (plus `overhead_s`) and
    `cpu_s` of CPU whatever the rate, the rank getting `cpu_rate` CPU seconds per second;
    every rate asked for is kept in `.rates`."""
    def probe(rate_bps):
        probe.rates.append(rate_bps)
        return {"backward_s": backward_s, "comm_s": 1e9 / rate_bps + overhead_s, "comm_cpu_s": cpu_s,
                "cpu_rate": cpu_rate}
    probe.rates = []
    return probe


def test_ddp_rate_is_lowered_until_gloo_needs_little_of_the_cpu():
    # issue 43's VM: backward 155 ms; at the rate paced to it gloo needs 85 ms of CPU in 160 ms
    probe = _link(cpu_s=0.085, backward_s=0.155)
    rate, tried = pacing.choose_rate(1e9 / 0.16, probe)
    target = 0.085 / pacing.CPU_SHARE  # 283 ms: longer than backward + 85 ms
    assert rate == pytest.approx(1e9 / target) and len(tried) == 2
    assert tried[0]["cpu_share"] == pytest.approx(0.085 / 0.16)
    assert tried[-1]["cpu_share"] == pytest.approx(pacing.CPU_SHARE)
    assert pacing.overlap_warning(tried) is None  # 283 ms is within 2.5 x backward
    # a fast link on a slow CPU core, where backward decides: the first candidate stays
    rate, tried = pacing.choose_rate(1e9 / 0.3, _link(cpu_s=0.05, backward_s=0.3))
    assert rate == pytest.approx(1e9 / 0.3) and len(tried) == 1
    assert tried[0]["target_comm_s"] == pytest.approx(0.35)  # backward lengthened by gloo's CPU
    # a time that does not go as 1 / rate: at most PROBES candidates, each scaled from the last
    probe = _link(cpu_s=0.085, backward_s=0.155, overhead_s=0.1)
    rate, tried = pacing.choose_rate(1e9 / 0.06, probe)
    assert len(tried) == pacing.PROBES and probe.rates == [t["rate_bps"] for t in tried]
    assert all(b < a for a, b in zip(probe.rates, probe.rates[1:]))  # lowered every time
    assert rate == probe.rates[-1] and tried[-1]["comm_s"] / tried[-1]["target_comm_s"] > 1 - pacing.WITHIN


def test_gloo_cpu_share_is_judged_against_the_cpu_the_rank_gets():
    # issue 43 at --host-cpu 50%: 87 ms of gloo CPU in a 186 ms AllReduce is 47% of a CPU but 94%
    # of the half CPU the rank has; the AllReduce must take 87 / 0.5 / 0.3 = 580 ms
    rate, tried = pacing.choose_rate(1e9 / 0.186, _link(cpu_s=0.087, backward_s=0.378, cpu_rate=0.5))
    assert tried[0]["cpu_share"] == pytest.approx(0.087 / 0.186 / 0.5)
    assert rate == pytest.approx(1e9 / (0.087 / (pacing.CPU_SHARE * 0.5)))
    assert tried[-1]["cpu_share"] == pytest.approx(pacing.CPU_SHARE)


def test_the_target_pools_backward_over_the_probes():
    # backward timed 0.6 s, then 1.4 s, then 0.6 s under load: each target takes the median so far,
    # lengthened by gloo's 10 ms of CPU
    backwards = iter([0.6, 1.4, 0.6])

    def probe(rate_bps):
        return {"backward_s": next(backwards), "comm_s": 1e9 / rate_bps, "comm_cpu_s": 0.01, "cpu_rate": 1.0}
    _, tried = pacing.choose_rate(1e9 / 0.3, probe)
    assert [t["target_comm_s"] for t in tried] == pytest.approx([0.61, 1.01, 0.61])


def test_a_machine_that_cannot_show_the_overlap_says_so_in_one_line():
    _, tried = pacing.choose_rate(1e9 / 0.1, _link(cpu_s=0.3, backward_s=0.1))
    warning = pacing.overlap_warning(tried)
    assert warning.startswith("this machine cannot show much of DDP's overlap: gloo's AllReduce "
                              "needs 300 ms of CPU per step, so it must take 1000 ms")
    assert "\n" not in warning
    assert pacing.calibration_meta(tried)["probes"] == tried


def test_links_get_no_algos():
    from allreduce_bench.core.config.run import RUNNABLE as allreduce
    from allreduce_bench.links.config import RUNNABLE as links
    args = ["--algos", "ring", "--sizes", "1M", "--algos=naive", "--quick"]
    assert emulate_command.benchmark_args(links, args) == ["--sizes", "1M", "--quick"]
    assert emulate_command.benchmark_args(allreduce, args) == args


def test_stale_names_are_only_ours_with_a_dead_driver(monkeypatch):
    listing = "arb-999999999-abc123-h0 (id: 3)\narb-%d-abc123-h1\nother-ns\narb-x-h0\n" % os.getpid()
    monkeypatch.setattr(em, "_sh", lambda *a, **k: subprocess.CompletedProcess(a, 0, listing, ""))
    assert em.stale_namespaces() == ["arb-999999999-abc123-h0"]


def test_without_privileges_or_tools_one_line_exit_2(monkeypatch, tmp_path):
    monkeypatch.setattr(em, "_effective_caps", lambda: 0)
    said = set()
    for uid in (1000, 0):  # root in a container without the capabilities: the same words
        monkeypatch.setattr(em.os, "geteuid", lambda: uid)  # noqa: B023  (called at once)
        result = CliRunner().invoke(main, ["emulate", "--quick"])
        assert result.exit_code == 2 and "needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)" in result.output
        said.add(result.output)
    assert len(said) == 1 and not (tmp_path / "results").exists()  # the folder it claimed is gone
    (tmp_path / "mine").mkdir()
    assert CliRunner().invoke(main, ["emulate", "--out", "mine"]).exit_code == 2 and (tmp_path / "mine").is_dir()
    before = set(em.namespaces())
    result = CliRunner().invoke(main, ["emulate", "--benchmarks", "ddp"])
    assert result.exit_code == 2 and "needs root" in result.output
    assert result.output.strip().count("\n") == 0 and set(em.namespaces()) == before
    monkeypatch.setattr(em.shutil, "which", lambda tool: None)
    result = CliRunner().invoke(main, ["emulate", "--cleanup"])
    assert result.exit_code == 2 and "needs ip and tc" in result.output


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("capsh"), reason="needs root and capsh (libcap2-bin)")
def test_root_without_the_capabilities_is_told_what_it_lacks(tmp_path):
    done = subprocess.run(["capsh", "--drop=cap_net_admin,cap_sys_admin", "--", "-c", shlex.join(CLI + ["emulate"])],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []  # no results/ left


@pytest.mark.parametrize("args, message", [
    (["--nodes", "1"], "--nodes must be at least 2"),
    (["--inter-bandwidth", "fast"], "--inter-bandwidth"),
    (["--benchmarks", "ddp,nope"], "--benchmarks"),
    (["--benchmarks", "ddp", "--sizes", "1M"], "no such option '--sizes'"),
    (["--benchmarks", "ddp", "--params", "lots"], "--params"),
    (["--benchmarks", "allreduce,ddp", "--bucket-mb", "0"], "--bucket-mb"),
    (["--backend", "nccl"], "nccl"),
    (["--sizes", "0"], "size"),
    (["--world-sizes", "8"], "larger than the 4 ranks"),
])
def test_bad_emulate_input_is_one_line_exit_2(args, message):
    result = CliRunner().invoke(main, ["emulate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.strip().count("\n") == 0


# ---------------------------------------------------------------- namespaces

@pytest.mark.slow
@needs_namespaces
@pytest.mark.timeout(120)
def test_latency_needs_netem_and_leaves_nothing(tmp_path):
    """This kernel has no netem: one line, exit 2. Where it has, a tiny run with delay passes."""
    before = set(em.namespaces())
    done = subprocess.run(CLI + ["emulate", "--inter-bandwidth", "300mbit", "--inter-latency", "2ms",
                                 "--sizes", "4K", "--algos", "native", "--iters", "1", "--no-plot",
                                 "--out", str(tmp_path / "delayed")],
                          capture_output=True, text=True, timeout=110)
    if done.returncode == 2:
        line = done.stderr.strip()
        assert "netem" in line and "\n" not in line and "Traceback" not in line
    else:
        assert done.returncode == 0, done.stderr
    assert set(em.namespaces()) == before


@pytest.mark.slow
@needs_namespaces
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_emulated_2x2_runs_every_algorithm_and_links(tmp_path):
    out = tmp_path / "emulated"
    driver = subprocess.Popen(CLI + ["emulate", "--benchmarks", "allreduce,links", "--sizes", "64K",
                                     "--iters", "2", "--warmup", "1", "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = driver.communicate(timeout=290)
    assert driver.returncode == 0, stdout + stderr
    assert ours(driver.pid) == []  # namespaces, and with them veths and qdiscs, are gone
    # each step said, and no note about its own first benchmark's rows; links draws its figure
    assert "emulate: [1/2] allreduce: `allreduce-bench run --sizes 64K" in stderr
    assert "emulate: [2/2] links ended in" in stderr and "already holds" not in stderr
    assert (out / "plots" / "links.png").exists() and (out / "plots" / "bandwidth.png").exists()
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert " node0" not in root_links and " br0" not in root_links  # never made outside them
    frame = pd.read_csv(out / "results.csv")
    meta = json.loads((out / "meta.json").read_text())
    label = meta["emulation"]["label"]
    assert label.startswith("2x2@") and meta["emulation"]["intra_p2p_GBps"] > 0  # 'auto' probed
    assert (frame["emulation"] == label).all() and (frame["wrong"] == 0).all()
    allreduce = frame[frame["benchmark"] == "allreduce"]
    assert set(allreduce["algorithm"]) == {"native", "ring", "naive", "hierarchical"}
    assert set(map(tuple, allreduce[["world_size", "nodes", "ranks_per_node"]].values)) == {(4, 2, 2)}
    links = frame[frame["benchmark"] == "links"]
    assert set(map(tuple, links[["link", "operation"]].values)) == {
        ("intra", "allreduce"), ("inter", "allreduce"), ("intra", "p2p"), ("inter", "p2p")}
    assert (links["world_size"] == 2).all() and (links["busbw_GBps"] > 0).all()


@pytest.mark.slow
@needs_namespaces
@pytest.mark.timeout(240)
def test_emulated_ddp_with_allreduce_on_2x1(tmp_path):
    """`emulate --benchmarks allreduce,ddp`: each gets its own options; ddp's rows, timeline,
    no_overlap baseline, accumulation and set_epoch check come from the emulated hosts."""
    out = tmp_path / "ddp"
    driver = subprocess.Popen(CLI + ["emulate", "--benchmarks", "allreduce,ddp", "--ranks-per-node", "1",
                                     "--inter-bandwidth", "1gbit", "--sizes", "64K", "--algos", "native",
                                     "--params", "40K", "--layers", "4", "--batch-size", "4",
                                     "--bucket-mb", "0.0625,25", "--accum", "2", "--iters", "2",
                                     "--warmup", "0", "--no-plot", "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = driver.communicate(timeout=230)
    assert driver.returncode == 0, stdout + stderr
    assert ours(driver.pid) == []
    frame = pd.read_csv(out / "results.csv")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["emulation"]["label"] == "2x1@1Gbit"
    assert (frame["emulation"] == "2x1@1Gbit").all() and (frame["wrong"] == 0).all()
    assert set(frame["benchmark"]) == {"allreduce", "ddp"}
    ddp = frame[frame["benchmark"] == "ddp"]
    assert set(ddp["measure"]) == {"compute", "backward", "ddp_no_comm", "comm", "comm_cpu", "compute_cpu", "step",
                                   "no_overlap",
                                   "accum_sync", "accum_no_sync"}
    assert (ddp[["world_size", "nodes", "ranks_per_node"]].values == [2, 2, 1]).all()
    assert meta["set_epoch_check"][0]["with_set_epoch"]["epochs_identical"] is False
    timeline = pd.read_csv(out / "ddp_timeline.csv")
    assert set(timeline["bucket_mb"]) == {0.0625, 25.0}
    assert set(timeline["measure"]) == {"step", "no_overlap"}
    assert "DDP vs wait-then-AllReduce" in stdout


@pytest.mark.slow
@needs_namespaces
@pytest.mark.timeout(300)
def test_emulated_ddp_rate_is_calibrated_on_the_hosts(tmp_path):
    """--inter-bandwidth auto with ddp alone: probes on the hosts (under --host-cpu's cgroup)
    choose the rate, and meta.json says how."""
    out = tmp_path / "calibrated"
    done = subprocess.run(CLI + ["emulate", "--benchmarks", "ddp", "--host-cpu", "node1=50%",
                                 "--params", "400K", "--layers", "4", "--batch-size", "16",
                                 "--bucket-mb", "25", "--accum", "2", "--iters", "2", "--warmup", "0",
                                 "--no-plot", "--out", str(out)],
                          capture_output=True, text=True, timeout=290)
    assert done.returncode == 0, done.stdout + done.stderr
    emulation = json.loads((out / "meta.json").read_text())["emulation"]
    probes = emulation["calibration"]["probes"]
    assert 1 <= len(probes) <= pacing.PROBES and emulation["calibration"]["cpu_share"] == pacing.CPU_SHARE
    for probe in probes:
        assert probe["comm_s"] > 0 and 0 < probe["cpu_share"] and probe["backward_s"] > 0
        assert 0 < probe["cpu_rate"] <= 1.2  # node1 at 50%: the least CPU a rank's backward got
    assert probes[-1]["target_comm_s"] == pytest.approx(pacing.target_comm_s(probes))
    probed = sum(line.startswith("emulate:   at ") for line in done.stderr.splitlines())  # one line a probe
    assert "calibrated on the hosts" in " ".join(done.stderr.split()) and probed == len(probes)


def _start(tmp_path, **popen) -> subprocess.Popen:
    """A driver whose run lasts long enough to be interrupted (explicit rate: no probe)."""
    return subprocess.Popen(CLI + ["emulate", "--inter-bandwidth", "200mbit", "--algos", "ring",
                                   "--sizes", "16M", "--iters", "100", "--no-plot",
                                   "--out", str(tmp_path / "killed")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)


def _wait_for_ranks(driver: subprocess.Popen, timeout: float = 90) -> list[str]:
    """The driver's namespaces once ranks run in each of them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        names = ours(driver.pid)
        if len(names) == 2 and all(em._sh("ip", "netns", "pids", n).stdout.split() for n in names):
            return names
        assert driver.poll() is None, driver.stderr.read()
        time.sleep(0.3)
    raise AssertionError("the emulated hosts did not start")


@pytest.mark.slow
@needs_namespaces
@pytest.mark.timeout(180)
def test_killed_driver_leaves_nothing_after_cleanup(tmp_path):
    driver = _start(tmp_path)
    names = _wait_for_ranks(driver)
    driver.kill()  # SIGKILL: no clean-up of its own can run
    driver.wait()
    # Its launches get SIGTERM from the kernel (parent-death signal) and stop their ranks.
    deadline = time.monotonic() + 30
    while any(em._sh("ip", "netns", "pids", n).stdout.split() for n in names):
        assert time.monotonic() < deadline, "ranks outlived the killed driver"
        time.sleep(0.3)
    assert sorted(ours(driver.pid)) == sorted(names)  # stale until the next start or --cleanup
    done = subprocess.run(CLI + ["emulate", "--cleanup"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ours(driver.pid) == []


@pytest.mark.slow
@needs_namespaces
@pytest.mark.timeout(180)
def test_ctrl_c_removes_everything(tmp_path):
    # As from a terminal: SIGINT at its default, so Python turns it into KeyboardInterrupt.
    driver = _start(tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    names = _wait_for_ranks(driver)
    driver.send_signal(signal.SIGINT)
    assert driver.wait(timeout=60) == 130
    assert ours(driver.pid) == [] and not set(names) & set(em.namespaces())


# ---------------------------------------------------------------- emulate --slurm (pure parts)

@pytest.mark.parametrize("args, message", [
    (["--sizes", "4K"], "runs nothing itself"),
    (["--benchmarks", "health"], "drop --benchmarks"),
    (["--host-cpu", "node1=50%"], "drop --host-cpu"),
    (["--nodes", "1"], "--nodes must be at least 2"),
    (["--inter-bandwidth", "fast"], "--inter-bandwidth"),
    (["--host-bandwidth", "node9=1mbit"], "node9"),
])
def test_bad_emulate_slurm_input_is_one_line_exit_2(args, message):
    result = CliRunner().invoke(main, ["emulate", "--slurm", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.strip().count("\n") == 0


def test_the_rsh_agent_maps_hosts_to_namespaces_and_skips_ssh_options(tmp_path):
    from allreduce_bench.emulate.slurm import agent_script

    agent = tmp_path / "agent"
    # `ip` replaced by echo: the agent's last line shows what it would run
    agent.write_text(agent_script({"node0": "arb-1-a-h0", "node1": "arb-1-a-h1"}).replace(
        "exec ip netns exec", "exec echo ip netns exec"))
    agent.chmod(0o755)
    done = subprocess.run([str(agent), "-x", "node1.cluster", "orted", "--arg", "two words"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split()[:4] == ["ip", "netns", "exec", "arb-1-a-h1"]
    assert "node1 orted --arg two words" in done.stdout
    done = subprocess.run([str(agent), "node7", "true"], capture_output=True, text=True)
    assert done.returncode == 255 and "no emulated host node7" in done.stderr


def test_slurmd_sees_every_cgroup_hierarchy_of_the_machine():
    from allreduce_bench.emulate.faults import cgroup_mounts

    v1 = cgroup_mounts("9:name=systemd:/\n2:cpuacct:/\n1:cpu:/\n0::/\n")
    assert v1.startswith("mount -t tmpfs cgroup /sys/fs/cgroup")
    assert "mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd" in v1
    assert "mount -t cgroup -o cpu cgroup /sys/fs/cgroup/cpu" in v1
    assert cgroup_mounts("0::/\n") == "mount -t cgroup2 cgroup2 /sys/fs/cgroup"
    assert cgroup_mounts("") == ""


# ---------------------------------------------------------------- host faults (health's emulated cluster)
def test_host_faults_parse_and_refuse_what_cannot_be_emulated():
    from allreduce_bench.emulate.faults import parse_host_cpu, parse_host_rates

    assert parse_host_rates(["node2=100mbit"], 4) == {2: 1e8}
    assert parse_host_cpu(["node0=25%", "node3=150%"], 4) == {0: 0.25, 3: 1.5}
    for items, says in ((["node2:1=100mbit"], "veth per local rank"), (["node9=1mbit"], "only 4 hosts"),
                        (["gpu2=1mbit"], "node0..node3"), (["node2"], "HOST=VALUE")):
        with pytest.raises(UsageError, match=says):
            parse_host_rates(items, 4)
    with pytest.raises(UsageError, match="share of one CPU"):
        parse_host_cpu(["node1=quarter"], 4)


def test_a_cpu_share_is_a_slower_cpu_not_one_stopped_for_long_stretches(tmp_path):
    """50% is 5 ms in every 10 (at the kernel's default 100 ms period a shaped link idled while
    the host was stopped, and DDP's overlap vanished); 5% needs the kernel's least quota, 1 ms."""
    from allreduce_bench.emulate import faults
    cpu = tmp_path / "cpu"  # a v1 cpu controller
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1")
    with faults.CpuLimits("arb-1-x", {0: 0.5, 1: 0.05, 2: 2.0}, root=tmp_path) as limits:
        written = {i: [(cpu / f"arb-1-x-h{i}" / name).read_text()
                       for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us")] for i in range(3)}
        assert limits.procs(1) == str(cpu / "arb-1-x-h1" / "cgroup.procs")
        for written_file in cpu.glob("arb-1-x-h*/*"):  # a real cgroup's files go with it
            written_file.unlink()
    assert not list(cpu.glob("arb-*"))
    assert written == {0: ["5000", "10000"], 1: ["1000", "20000"], 2: ["20000", "10000"]}


@pytest.mark.slow
@needs_namespaces
def test_emulate_bad_fault_is_one_line_before_any_namespace(tmp_path):
    done = subprocess.run(CLI + ["emulate", "--nodes", "2", "--benchmarks", "health", "--host-bandwidth",
                                 "node1:1=1mbit", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
