"""NCCL's own debug log: the reader on published logs of many shapes (read from ../shared or
excerpted in nccl_log_excerpts.py), the per-host differences, and the nccl-log command."""
# ruff: noqa: E501  (log lines at their own width)
import json
import re
from pathlib import Path

import nccl_log_excerpts as excerpts
import pytest
from click.testing import CliRunner
from shared_data import NCCL_INFO, PUBLISHED_LOGS, needs

from allreduce_bench.cli import main
from allreduce_bench.nccl_log import parse as nccl_log
from allreduce_bench.nccl_log import setup as nccl_setup
from allreduce_bench.nccl_log.lines import read_lines

LOGS, INFO_LOGS = PUBLISHED_LOGS, NCCL_INFO
needs_logs, needs_info = needs(LOGS), needs(INFO_LOGS)


def _text(folder: Path, prefix: str) -> str:
    return next(folder.glob(f"{prefix}*.txt")).read_text()


def _block(text: str, source: str = "log") -> dict:
    return nccl_log.read_texts([(source, text)])


# ---- the shared logs ---------------------------------------------------------------------------

@needs_logs
def test_every_info_line_of_the_16_host_log_is_accounted_for():
    text = _text(LOGS, "02-")
    block = _block(text)
    printed = sum("NCCL INFO" in line for line in text.splitlines())
    assert printed == 207 and block["lines"]["info"] == printed
    assert block["lines"]["unrecognized"] == 0 and block["unrecognized"] == []
    assert sum(block["kinds"].values()) == printed  # every line has a kind
    assert block["nccl_version"] == "2.4.7+cuda10.1" and block["world_size"] == 16
    hosts = block["hosts"]
    assert len(hosts) == 16 and sorted(r for h in hosts.values() for r in h["ranks"]) == list(range(16))
    for entry in hosts.values():
        assert entry["network"] == "IB" and entry["nics"] == ["mlx5_0:1/IB"]
        assert set(entry["transports"]) == {"NET/IB"}
        assert entry["environment"] == {"NCCL_TREE_THRESHOLD": "600000000"}
        assert entry["nic_distance"] == {"IB": "SYS"}
    assert sum(sum(h["transports"].values()) for h in hosts.values()) == 76  # 38 send + 38 receive
    assert block["rings"]["00"] == list(range(16)) and len(block["trees"]) == 16
    assert nccl_setup.differences(block) == []


@needs_logs
@pytest.mark.parametrize("prefix", ["03-", "11-", "12-"])
def test_the_single_info_line_inside_a_table(prefix):
    block = _block(_text(LOGS, prefix))
    assert block["lines"]["info"] == 1 and block["kinds"] == {"launch_mode": 1}
    assert list(block["hosts"]) == ["hostname"]


@needs_info
def test_nccl_227_efa_plugin_and_shm_host():
    block = _block(_text(INFO_LOGS, "01-"))
    assert block["nccl_version"] == "2.27.3+cuda12.9" and block["world_size"] == 4
    (entry,) = block["hosts"].values()
    assert entry["ranks"] == [0, 1, 2, 3] and entry["network"] == "Libfabric"
    assert "aws-ofi-nccl" in entry["plugins"] and len(entry["nics"]) == 4
    assert entry["environment"]["NCCL_P2P_LEVEL"] == "NVL" and entry["environment"]["NCCL_PROTO"] == "simple"
    assert entry["channels"]["coll"] == 2 and entry["cuda_driver"] == 13000
    assert {r["nnodes"] for r in block["ranks"]} == {1}


@needs_info
def test_subsys_all_noise_and_torn_lines():
    text = _text(INFO_LOGS, "02-")
    block = _block(text)
    assert list(block["hosts"]) == ["mew0"]  # `-1mew0` and `0mew0` of the torn rows repaired
    assert block["lines"]["torn"] == 2 and block["lines"]["info"] == sum(
        len(re.findall(r"NCCL INFO", line)) for line in text.splitlines())
    assert block["hosts"]["mew0"]["transports"] == {"P2P/direct pointer": 4}
    assert {(t["collective"], t["algorithm"], t["protocol"]) for t in block["tuning"]} == {("AllReduce", "RING", "SIMPLE")}
    assert block["tuning"][0]["size_bytes"] == 8 * 2**20 and block["calls"]["AllReduce"] > 0


# ---- excerpts of other published shapes ------------------------------------------------------

def test_socket_fallback_and_a_redacted_host_name():
    (entry,) = _block(excerpts.SOCKET_FALLBACK)["hosts"].values()
    assert entry["network"] == "Socket" and entry["transports"] == {"NET/Socket": 2, "P2P/IPC": 3}


def test_rccl_channel_suffix_banner_and_warn_path():
    block = _block(excerpts.RCCL_CHANNELS)
    assert {k for h in block["hosts"].values() for k in h["transports"]} == {"NET/Socket", "P2P/IPC"}
    block = _block(excerpts.RCCL_BANNER)
    assert block["nccl_version"] == "2.21.5-main:a29a210+" and "ROCm 6.2.4.0-139" in block["libraries"]
    (warning,) = block["warnings"]
    assert warning["origin"].endswith("misc/api_trace.cc:283") and warning["host"] == "UVOSLinux"
    assert block["hosts"]["z292"]["network"] == "Socket" and block["lines"]["unrecognized"] == 0


def test_plugins_sharp_pxn_gdr_nvls():
    block = _block(excerpts.IB_PLUGIN)
    assert block["hosts"]["hostname-test"]["transports"] == {"NET/IBext_v8": 2, "P2P/CUMEM": 2}
    block = _block(excerpts.SHARP)
    assert block["hosts"]["gh1"]["nics"] == ["mlx5_2:1/IB/SHARP"] and block["hosts"]["gh1"]["network"] == "IBext_v8"
    assert block["nodes"] == 2 and [r["host"] for r in block["ranks"]] == ["gh1", "gh2"]
    assert [r["complete"] for r in block["ranks"]] == [False, False] and len(block["incomplete_inits"]) == 2
    block = _block(excerpts.PXN_TIMESTAMPS)
    host = block["hosts"]["tpgds-aihub0008"]
    assert host["transports"] == {"NET/IB/GDRDMA": 1, "NET/IB/PXN/GDRDMA": 1, "P2P/IPC": 1}
    assert host["gdr"] == {"pxn": 1, "gdr": 1} and host["channels"]["collnet"] == 4
    assert block["hosts"]["tpgds-aihub0007"]["environment"]["NCCL_IB_HCA"].startswith("mlx5_0,mlx5_1")
    (warning,) = block["warnings"]  # the `[2026-03-03 12:11:38] ` stamp in front does not matter
    assert warning["origin"] == "transport/net_ib.cc:2453" and "vendor err 81" in warning["text"]
    assert block["kinds"]["error_return"] == 1 and block["tuning"][0]["algorithm"] == "TREE"
    assert _block(excerpts.NVLS)["hosts"]["hw14"]["transports"] == {"NVLS": 1, "P2P/direct pointer": 1}


def test_warn_origins_banners_and_foreign_lines():
    block = _block(excerpts.WARN_ORIGIN)
    assert block["nccl_version"] == "2.10.3+cuda11.3" and block["lines"]["warn"] == 2
    assert {w["origin"] for w in block["warnings"]} == {"misc/ibvwrap.cc:63"}
    assert block["lines"]["other"] == 1 and block["lines"]["unrecognized"] == 0  # TensorFlow's line
    block = _block(excerpts.SLURM_SOCKET)
    assert {h["network"] for h in block["hosts"].values()} == {"Socket"}


PREFIXES = ["0: ", "[1,0]<stdout>:", "(RayTrainWorker pid=2139, ip=10.0.0.34) ",
            "[2024-05-01 10:00:00] ", "2024-05-01T10:00:00.123456789Z ", "    "]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_launcher_prefixes_and_timestamps_do_not_matter(prefix):
    plain = _block(excerpts.PXN_TIMESTAMPS + excerpts.SLURM_SOCKET)
    text = "".join(prefix + line + "\n" for line in (excerpts.PXN_TIMESTAMPS + excerpts.SLURM_SOCKET).splitlines())
    block = _block(text)
    assert block["hosts"] == plain["hosts"] and block["lines"]["torn"] == 0
    assert block["nccl_version"] == plain["nccl_version"]


def test_a_torn_line_keeps_its_host_and_gives_back_the_other_text():
    text = ("mew0:65704:65704 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}\n"
            "     8388608       2097152     float     sum      -1mew0:65704:65704 [1] NCCL INFO AllReduce: opCount 0 sendbuff 0x720000000 recvbuff 0x920000000 count 2097152 datatype 7 op 0 root 0 comm 0x55d5f5ac09e0 [nranks=2] stream 0x55d5f4d50b60\n")
    messages = read_lines(text, "t").messages
    assert [m.host for m in messages] == ["mew0", "mew0"]
    assert messages[1].before.split() == ["8388608", "2097152", "float", "sum", "-1"] and messages[1].torn


def test_one_file_per_rank_reads_as_one_stream():
    text = excerpts.PXN_TIMESTAMPS
    per_host: dict[str, list[str]] = {}
    for line in text.splitlines():
        per_host.setdefault(line.split(":")[0].lstrip("["), []).append(line)
    split = nccl_log.read_texts([(f"{h}.log", "\n".join(lines)) for h, lines in per_host.items()])
    assert split["hosts"].keys() == _block(text)["hosts"].keys() and len(split["sources"]) == len(per_host)


# ---- which host differs -----------------------------------------------------------------------

# In the shape of NVIDIA/nccl#1412's 2.2x log (host names, pid, comm and commId from it; the NIC
# list, interface and channel lines written in the formats of src/transport/net.cc and
# net_ib.cc): one rank per host, four hosts; the tests change one host at a time
HOST_LINES = """\
{host}:2017630:2017671 [0] NCCL INFO NCCL_IB_HCA set by environment to ^mlx5_3,mlx5_4
{host}:2017630:2017671 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_5:1/IB ; OOB ibp26s0:10.0.0.4<0>
{host}:2017630:2017671 [0] NCCL INFO Using network IB
{host}:2017630:2017671 [0] NCCL INFO ncclCommInitRank comm 0x8d57d40 rank {rank} nranks 4 cudaDev 0 nvmlDev 0 busId 7000 commId 0x49bbd7790311d5eb - Init COMPLETE
{host}:2017630:2017697 [0] NCCL INFO Channel 00/0 : {rank}[0] -> {peer}[0] [send] via NET/IB/3/GDRDMA
{host}:2017630:2017697 [0] NCCL INFO Channel 00/0 : {rank}[0] -> {rank}[1] via P2P/IPC/read
"""


def _cluster(changes: dict | None = None) -> str:
    lines = []
    for rank, host in enumerate(["swat1-04", "swat1-05", "swat1-06", "swat1-07"]):
        text = HOST_LINES.format(host=host, rank=rank, peer=(rank + 1) % 4)
        for old, new in (changes or {}).get(host, []):
            text = text.replace(old, new)
        lines.append(text)
    return "".join(lines)


SOCKET_AND_FEWER_NICS = {
    "swat1-05": [("NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_5:1/IB ; OOB", "NET/IB : No device found. OOB"),
                 ("Using network IB", "Using network Socket"), ("via NET/IB/3/GDRDMA", "via NET/Socket/0")],
    "swat1-07": [(" [3]mlx5_5:1/IB ;", " ;")],
}


def test_a_socket_host_and_a_host_with_a_nic_fewer_are_named():
    found = nccl_setup.differences(_block(_cluster(SOCKET_AND_FEWER_NICS)))
    named = {(d["host"], d["what"]) for d in found}
    assert ("swat1-05", "network") in named and ("swat1-05", "transports") in named
    assert ("swat1-07", "nics") in named and {d["host"] for d in found} == {"swat1-05", "swat1-07"}
    nics = next(d for d in found if d["host"] == "swat1-07")
    assert len(nics["value"]) == 3 and len(nics["majority"]) == 4 and "missing mlx5_5:1/IB" in nics["text"]
    network = next(d for d in found if d["what"] == "network")
    assert (network["value"], network["majority"]) == ("Socket", "IB")


def test_an_extra_variable_and_shm_instead_of_p2p_are_named():
    block = _block(_cluster({"swat1-06": [("via P2P/IPC/read", "via SHM/direct/direct"),
                                          ("NCCL_IB_HCA set by environment to ^mlx5_3,mlx5_4",
                                           "NCCL_IB_HCA set by environment to ^mlx5_3,mlx5_4\nswat1-06:2017630:2017671 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.")]}))
    found = nccl_setup.differences(block)
    assert {(d["host"], d["what"]) for d in found} == {("swat1-06", "transports"), ("swat1-06", "environment NCCL_P2P_DISABLE")}
    assert nccl_setup.host_differences(block, "swat1-06") == [d["text"] for d in found]
    assert nccl_setup.host_differences(block, "swat1-04") == [] and nccl_setup.host_differences(None, "x") == []


def test_a_clean_cluster_names_nobody_and_a_split_names_both():
    assert nccl_setup.differences(_block(_cluster())) == []
    two = _block(HOST_LINES.format(host="a", rank=0, peer=1) + HOST_LINES.format(host="b", rank=1, peer=0).replace(
        "Using network IB", "Using network Socket"))
    found = [d for d in nccl_setup.differences(two) if d["what"] == "network"]
    assert {d["host"] for d in found} == {"a", "b"} and {d["majority"] for d in found} == {None}


@needs_logs
def test_the_16_host_log_with_a_socket_host_and_a_nic_fewer():
    """published-logs/02 as printed, but gpu5 without IB and every host but gpu7 with two NICs."""
    lines = []
    for line in _text(LOGS, "02-").splitlines():
        if line.startswith("gpu5:") and "NET/IB : Using" in line:
            line = line.split(" NCCL INFO ")[0] + " NCCL INFO NET/IB : No device found."
        elif line.startswith("gpu5:"):
            line = line.replace("via NET/IB/0", "via NET/Socket/0")
        elif "NET/IB : Using [0]mlx5_0:1/IB ;" in line and not line.startswith("gpu7:"):
            line = line.replace("[0]mlx5_0:1/IB ;", "[0]mlx5_0:1/IB [1]mlx5_1:1/IB ;")
        lines.append(line)
    block = _block("\n".join(lines))
    found = nccl_setup.differences(block)
    assert {d["host"] for d in found} == {"gpu5", "gpu7"}
    section = nccl_setup.report_section(block)
    assert "gpu5: network Socket where 15 of 16 hosts have IB" in section
    assert "gpu7: 1 NIC (mlx5_0:1/IB) where 14 of 16 hosts have 2" in section


# ---- the command --------------------------------------------------------------------------------

def test_nccl_log_command_prints_the_table_and_writes_json_and_csv(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("some training output\n" + _cluster(SOCKET_AND_FEWER_NICS))
    result = CliRunner().invoke(main, ["nccl-log", str(log), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "swat1-05: network Socket where 3 of 4 hosts have IB" in result.output
    assert "swat1-07: 3 NICs" in result.output
    written = json.loads((tmp_path / "o" / "nccl.json").read_text())
    assert {d["host"] for d in written["differs"]} == {"swat1-05", "swat1-07"}
    assert (tmp_path / "o" / "nccl_hosts.csv").read_text().count("\n") == 5


def test_nccl_log_of_a_folder_of_per_rank_files(tmp_path):
    folder = tmp_path / "run" / "nccl-debug"
    folder.mkdir(parents=True)
    for index, chunk in enumerate(_cluster().split("swat1-0")[1:]):
        (folder / f"rank{index}.log").write_text("swat1-0" + chunk)
    result = CliRunner().invoke(main, ["nccl-log", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "4 host(s), 4 ranks" in result.output and "No host differs" in result.output


def test_nccl_log_without_nccl_lines_or_file_is_one_line_exit_2(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("hello\n")
    for path in (empty, tmp_path / "missing.log"):
        result = CliRunner().invoke(main, ["nccl-log", str(path)])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "NCCL_DEBUG=INFO" in CliRunner().invoke(main, ["nccl-log", str(empty)]).output


@pytest.mark.slow
def test_any_text_reads_without_an_exception():
    """Cut, glued and shuffled real lines: the reader counts what it sees and never raises."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    lines = (excerpts.PXN_TIMESTAMPS + excerpts.RCCL_BANNER + excerpts.SHARP + excerpts.WARN_ORIGIN).splitlines()

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(lines), st.integers(0, 200), st.sampled_from(["\n", "", " "])),
                    max_size=30))
    def check(pieces):
        text = "".join(line[:cut] + end for line, cut, end in pieces)
        block = _block(text)
        assert block["lines"]["info"] + block["lines"]["warn"] <= text.count(" NCCL ")
        assert sum(block["kinds"].values()) == block["lines"]["messages"]
        nccl_setup.differences(block)
        nccl_setup.terminal_text(block)

    check()
