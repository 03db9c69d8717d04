"""What NCCL said about its setup, read from its debug log into one JSON-able block (per host:
version, ranks, network, NICs, transports, NCCL_* set, WARNs; doc/interop.md, "What is read").
Every message is counted by kind, the unknown ones kept as examples: nothing is passed over."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.nccl_log.lines import LogLines, NcclLine, read_lines

BLOCK_FORMAT = 1
_EXAMPLES = 20  # unrecognized messages kept as examples


@dataclass
class _Host:
    processes: set = field(default_factory=set)
    devices: set = field(default_factory=set)
    versions: Counter = field(default_factory=Counter)
    cuda_driver: set = field(default_factory=set)
    networks: dict = field(default_factory=dict)  # dicts as ordered sets
    ib_nics: dict = field(default_factory=dict)
    no_ib: bool = False
    socket_interfaces: dict = field(default_factory=dict)
    bootstrap: dict = field(default_factory=dict)
    plugins: dict = field(default_factory=dict)
    fabric_nics: dict = field(default_factory=dict)  # ncclTopoPopulateNics (2.2x, any plugin)
    ofi_nics: dict = field(default_factory=dict)  # aws-ofi-nccl's NIC groups (PCI addresses)
    transports: Counter = field(default_factory=Counter)
    environment: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    nic_distance: dict = field(default_factory=dict)
    affinity: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)
    gdr: dict = field(default_factory=dict)
    lines: int = 0


@dataclass
class _State:
    hosts: dict = field(default_factory=dict)
    comms: dict = field(default_factory=dict)  # (host, pid, comm address) -> rank entry
    rings: dict = field(default_factory=dict)
    trees: list = field(default_factory=list)
    tuning: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    levels: Counter = field(default_factory=Counter)
    unrecognized: list = field(default_factory=list)
    torn: int = 0

    def host(self, name: str) -> _Host:
        return self.hosts.setdefault(name, _Host())


def transport_kind(via: str) -> str:
    """`NET/IB/0(1)/GDRDMA/Shared` -> `NET/IB/PXN/GDRDMA`; `P2P/IPC/read` -> `P2P/IPC`; ..."""
    via = re.split(r"\s+comm 0x", via.strip())[0]  # RCCL appends `comm 0x... nRanks 08`
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        flags = ["PXN"] if len(parts) > 2 and "(" in parts[2] else []
        return "/".join(["NET", parts[1], *flags, *(["GDRDMA"] if "GDRDMA" in via else [])])
    if parts[0] == "SHM" or "shared memory" in via:
        return "SHM"
    if parts[0].upper() == "COLLNET":
        return "CollNet"
    return "/".join(parts[:2])


def _nics(text: str) -> list[str]:
    return re.findall(r"\[\d+\](\S+)", text)


def _add(ordered: dict, *items) -> None:
    for item in items:
        if item:
            ordered[item] = None


def _version(state, host, line, m):
    host.versions[m[1]] += 1


def _environment(state, host, line, m):
    host.environment[m[1]] = m[2].strip()


def _cuda_driver(state, host, line, m):
    host.cuda_driver.add(int(m[1]))


def _net_ib(state, host, line, m):
    _add(host.ib_nics, *_nics(m[1]))


def _no_ib(state, host, line, m):
    host.no_ib = True


def _net_socket(state, host, line, m):
    _add(host.socket_interfaces, *(n.split(":")[0] for n in _nics(m[1])))


def _bootstrap(state, host, line, m):
    _add(host.bootstrap, m[1].split("<")[0])


def _network(state, host, line, m):
    _add(host.networks, m[1].strip())


def _plugin(state, host, line, m):
    _add(host.plugins, next((g for g in m.groups() if g), None))


def _fabric_nic(state, host, line, m):
    _add(host.fabric_nics, m[1])


def _ofi(state, host, line, m):
    _add(host.plugins, "aws-ofi-nccl")
    if nic := re.match(r"NIC group \d+ device #\d+ (\S+)", m[1]):
        _add(host.ofi_nics, nic[1])


def _init(state, host, line, m):
    entry = _comm(state, line, m[1])
    entry.update(rank=int(m[2]), nranks=int(m[3]),
                 **{_SNAKE.get(k, k): _value(v) for k, v in re.findall(r"(\w+) (\S+)", m[4])})
    entry["complete"] = entry.get("complete", False) or m[5] == "COMPLETE"


def _layout(state, host, line, m):
    entry = _comm(state, line, m[1])
    entry.update(rank=int(m[2]), nranks=int(m[3]), nnodes=int(m[4]), local_ranks=int(m[5]),
                 local_rank=int(m[6]))


_SNAKE = {"cudaDev": "cuda_dev", "nvmlDev": "nvml_dev", "busId": "bus_id", "commId": "comm_id"}


def _value(text: str):
    return int(text) if text.isdigit() else text


def _comm(state: _State, line: NcclLine, address: str) -> dict:
    return state.comms.setdefault((line.host, line.pid, address),
                                  {"host": line.host, "pid": line.pid, "device": line.device})


def _channel(state, host, line, m):
    host.transports[transport_kind(m["via"])] += 1


def _collnet(state, host, line, m):
    host.transports["CollNet"] += 1


def _nvls(state, host, line, m):
    host.transports["NVLS"] += 1


def _ring(state, host, line, m):
    state.rings.setdefault(m[1], [int(r) for r in m[3].split()])


def _tree(state, host, line, m):
    state.trees.append({"host": line.host, "pid": line.pid, "device": line.device, "tree": m[0]})


def _channel_counts(state, host, line, m):
    names = ("coll", "collnet", "nvls", "p2p", "p2p_per_peer")
    host.channels.update({n: int(v) for n, v in zip(names, m.groups()) if v is not None})


def _threads(state, host, line, m):
    host.channels.update(threads=int(m[1]), trees=m[3])


def _affinity(state, host, line, m):
    host.affinity[m[1]] = m[2]


def _nic_distance(state, host, line, m):
    host.nic_distance[m[3]] = m[4].strip()


def _connected(state, host, line, m):
    if m[2] is not None:
        host.gdr.update(pxn=int(m[2]), gdr=int(m[3]))


def _gdr_disabled(state, host, line, m):
    host.gdr.setdefault("disabled_for", []).append(m[2])


def _tuning(state, host, line, m):
    channels = f"{m['lo']}..{m['hi']}" if m["lo"] is not None else None
    state.tuning[(m["collective"] or "", int(m["bytes"]), m["algo"], m["proto"], channels)] += 1


def _call(state, host, line, m):
    state.calls[m[1]] += 1


_NUMBER = r"-?\d+"
# (kind, pattern, reader): the messages the block is made of, in the order they are tried
_READ = [
    ("version", r"^(?:NCCL|RCCL) version\s*:?\s*(\S+)", _version),
    ("environment", r"^(\w+) set by environment to ?(.*?)\.?$", _environment),
    ("environment", r"^((?:NCCL|RCCL)_\w+) set to (.*)$", _environment),  # NCCL_IB_HCA (2.2x)
    ("cuda_driver", r"^cudaDriverVersion (\d+)", _cuda_driver),
    ("net_ib", r"^NET/IB ?: Using(.*?);\s*OOB", _net_ib),
    ("net_ib", r"^NET/IB ?: No device found", _no_ib),
    ("net_socket", r"^NET/Socket ?: Using (.*)$", _net_socket),
    ("bootstrap", r"^Bootstrap ?: Using (\S+)", _bootstrap),
    ("network", r"^Using network (.+)$", _network),
    ("net_plugin", r"^(?:NET/Plugin ?: ?(?:Loaded net plugin (\S+)|.*?(No plugin found|internal)"
                   r")|P2P plugin (\S+)|Successfully loaded external plugin (\S+))", _plugin),
    ("net_ofi", r"^NET/OFI (.*)$", _ofi),
    ("net_nic", r"^ncclTopoPopulateNics : Filled (\S+) in topo", _fabric_nic),
    ("init", r"^(?:\w+ )?comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+) (.*?)- Init (START|COMPLETE)", _init),
    ("layout", r"^comm (0x[0-9a-fA-F]+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) "
               r"localRank (\d+)", _layout),
    ("channel", r"^(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[\w+\])? -> (\d+)(?:\[\w+\])?"
                r"(?: \[(?:send|receive)\])? via (?P<via>.+)$", _channel),
    ("channel", r"^CollNet \d+/\d+ : \d+ \[(?:send|receive)\] via (.+)$", _collnet),
    ("ring", r"^Channel (\d+)(/\d+)? :((?:\s+\d+)+)\s*$", _ring),
    ("ring", rf"^Ring \d+ : {_NUMBER} -> \d+ -> {_NUMBER}$", None),
    ("tree", r"^Trees? ?(?:\[\d+\]|\d+ :).*$", _tree),
    ("channels", r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels, )?"
                 r"(\d+) p2p channels, (\d+) p2p channels per peer", _channel_counts),
    ("channels", r"^Using (\d+) threads, Min Comp Cap (\d+), Trees (.*)$", _threads),
    ("nvls", r"^(?:NVLS comm|Connected NVLS)", _nvls),
    ("nvls", r"^NVLS multicast support is", None),
    ("graph", r"^Pattern \d+, crossNic \d+, nChannels \d+, bw", None),
    ("affinity", r"^Setting affinity for GPU (\d+) to (\S+)", _affinity),
    ("nic_distance", r"^CUDA Dev (\d+)\[(\d+)\], (\S+) NIC distance\s*:\s*(.*)$", _nic_distance),
    ("connected", r"^Connected all (rings|trees)(?:, use ring PXN (\d) GDR (\d))?", _connected),
    ("gdr", r"^NET/IB ?: GPU Direct RDMA (Disabled|Enabled) for HCA (\d+) '([^']+)'", _gdr_disabled),
    ("tuning", r"^(?:(?P<collective>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\S+) proto "
               r"(?P<proto>\S+)(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d+)\.\.(?P<hi>\d+)\})?", _tuning),
    ("call", r"^(\w+): opCount \S+ sendbuff \S+ recvbuff \S+ count \d+", _call),
    ("launch_mode", r"^Launch mode \S+", None),
]
# recognised and counted, not read further (NCCL_DEBUG_SUBSYS=ALL writes thousands of these)
_KNOWN = [
    ("net_plugin", r"^(?:NET/Plugin|Plugin Path|Initialized NET plugin|Assigned NET plugin|Retrieving "
                   r"state for|Initialized state|Using non-device net plugin|(?:PROFILER|TUNER|ENV)/Plugin"
                   r"|Failed to open libibverbs|dlvsym failed)"),
    ("net_ib", r"^(?:NET/IB ?: (?:\[\d+\]|Made virtual device)|Call to mlx5dv_)"),
    ("topology", r"^(?:=== System|={4,}|(?:CPU|GPU|NIC|NET|NVS|PCI)/|\+ |\s*\d+ : (?:GPU|NET|NIC|CPU)/|"
                 r"Could not open XML topology|TOPO/NET|\w+ CPU \(|/sys/devices/\S+ -> |"
                 r"Loading (?:unnamed )?topology|ncclTopo|"
                 r"\[node_id|Check P2P Type|P2P Chunksize|MNNVL)"),
    ("tuning", r"^(?:threadThresholds|Enabled NCCL Func/Proto/Algo Matrix|\s*(?:Algorithm|Protocol|"
               r"Max NThreads|Broadcast|Reduce|AllGather|ReduceScatter|AllReduce|SendRecv|AllToAll)\s*\|)"),
    ("proxy", r"^(?:\[Proxy Service|proxyProgressAsync|ncclPollProxyResponse|resp\.opId|Connected to "
              r"proxy|New proxy (?:send|recv) connection|Received and initiated operation|UDS:)"),
    ("error_return", r"^\S+\.(?:cc|h|cpp|cu):\d+ -> \d+"),  # the call path of a failure, after its WARN
    ("memory", r"^(?:\S+\.(?:cc|h|cpp|cu):\d+ |Mem Realloc|Allocated shareable buffer|cudaMalloc|"
               r"DMA-BUF is available|Dmabuf|CC (?:On|Off))"),
    ("config", r"^(?:Comm config|RAS |Init timings|Bootstrap timings|Kernel version|ROCr version|"
               r"\w+ \w+ set to \S+$)"),
]
_COMPILED = [(kind, re.compile(pattern), reader) for kind, pattern, reader in _READ] + \
    [(kind, re.compile(pattern), None) for kind, pattern in _KNOWN]


def _read_message(state: _State, line: NcclLine) -> None:
    host = state.host(line.host)
    host.lines += 1
    host.processes.add(line.pid)
    host.devices.add(line.device)
    state.levels[line.level] += 1
    state.torn += line.torn
    if line.level == "WARN":
        host.warnings.append({"at": line.at, "origin": line.origin, "text": line.message.strip()})
        state.kinds["warn"] += 1
        return
    message = line.message.strip()
    for kind, pattern, reader in _COMPILED:
        if match := pattern.match(message):
            state.kinds[kind] += 1
            if reader is not None:
                reader(state, host, line, match)
            return
    state.kinds["unrecognized"] += 1
    if len(state.unrecognized) < _EXAMPLES:
        state.unrecognized.append({"at": line.at, "text": message})


def natural_key(name: str) -> list:
    """'gpu9' before 'gpu10'."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _network_of(host: _Host) -> str | None:
    """`Using network X` (2.8+), else the channels' NET, else what NET/IB, OFI or Socket lines imply."""
    if host.networks:
        return ", ".join(host.networks)
    used = sorted({kind.split("/")[1] for kind in host.transports if kind.startswith("NET/")})
    if used:
        return ", ".join(used)
    if host.ib_nics:
        return "IB"
    if "aws-ofi-nccl" in host.plugins:
        return "OFI"
    return "Socket" if host.no_ib and host.socket_interfaces else None


def _world(comms: Iterable[dict]) -> list[dict]:
    """The ranks of the largest communicators (the world; torch and NCCL make smaller ones too)."""
    comms = list(comms)
    size = max((c.get("nranks", 0) for c in comms), default=0)
    return [c for c in comms if c.get("nranks") == size and "rank" in c]


def _host_entry(host: _Host, ranks: list[dict]) -> dict:
    network = _network_of(host)
    nics = list(host.ib_nics) or list(host.fabric_nics) or list(host.ofi_nics) or (
        list(host.socket_interfaces) if network == "Socket" else [])
    gpus = sorted({next(r[k] for k in ("bus_id", "cuda_dev", "device") if r.get(k) is not None)
                   for r in ranks}, key=str) or sorted(host.devices, key=str)
    return {
        "processes": sorted(host.processes), "ranks": sorted({r["rank"] for r in ranks}),
        "gpus": [str(g) for g in gpus],
        "nccl_version": host.versions.most_common(1)[0][0] if host.versions else None,
        "cuda_driver": sorted(host.cuda_driver)[-1] if host.cuda_driver else None,
        "network": network, "nics": nics, "nic_count": len(nics),
        "bootstrap": list(host.bootstrap), "socket_interfaces": list(host.socket_interfaces),
        "plugins": list(host.plugins), "transports": dict(sorted(host.transports.items())),
        "channels": host.channels, "gdr": host.gdr, "nic_distance": host.nic_distance,
        "affinity": host.affinity, "environment": dict(sorted(host.environment.items())),
        "warnings": host.warnings, "lines": host.lines,
    }


def _environment_summary(hosts: dict) -> dict:
    """Variable -> value -> the hosts that said it was set to that value."""
    found: dict = {}
    for name, entry in hosts.items():
        for variable, value in entry["environment"].items():
            found.setdefault(variable, {}).setdefault(value, []).append(name)
    return dict(sorted(found.items()))


def _tuning_table(tuning: Counter) -> list[dict]:
    return [{"collective": c, "size_bytes": b, "algorithm": a, "protocol": p, "channels": ch, "lines": n}
            for (c, b, a, p, ch), n in sorted(tuning.items(), key=lambda kv: (kv[0][0], kv[0][1]))]


def _block(state: _State, logs: list[LogLines], sources: list[str]) -> dict:
    world = _world(state.comms.values())
    hosts = {name: _host_entry(host, [r for r in world if r["host"] == name])
             for name, host in sorted(state.hosts.items(), key=lambda item: natural_key(item[0]))}
    versions = Counter(v for h in state.hosts.values() for v in h.versions.elements())
    versions.update(v for log in logs for _, _, library, v in log.banners if library in ("NCCL", "RCCL"))
    nodes = {c["nnodes"] for c in world if "nnodes" in c}
    return {
        "format": BLOCK_FORMAT, "sources": sources,
        "nccl_version": versions.most_common(1)[0][0] if versions else None,
        "libraries": sorted({f"{lib} {v}" for log in logs for _, _, lib, v in log.banners}),
        "lines": {"messages": sum(state.levels.values()), "info": state.levels["INFO"],
                  "warn": state.levels["WARN"], "trace": state.levels["TRACE"],
                  "unrecognized": state.kinds["unrecognized"], "torn": state.torn,
                  "banners": sum(len(log.banners) for log in logs),
                  "other": sum(log.foreign for log in logs)},
        "kinds": dict(sorted(state.kinds.items())), "unrecognized": state.unrecognized,
        "world_size": world[0]["nranks"] if world else None,
        "nodes": nodes.pop() if len(nodes) == 1 else len([h for h in hosts.values() if h["ranks"]]) or None,
        "hosts": hosts,
        "ranks": sorted(world, key=lambda r: (r["rank"], r["host"], r["pid"])),
        "incomplete_inits": [{k: r.get(k) for k in ("host", "pid", "rank", "nranks")}
                             for r in state.comms.values() if r.get("complete") is False],
        "rings": state.rings, "trees": state.trees, "tuning": _tuning_table(state.tuning),
        "calls": dict(state.calls), "environment": _environment_summary(hosts),
        "warnings": [{"host": name, **w} for name, h in hosts.items() for w in h["warnings"]],
    }


def read_log(logs: Iterable[LogLines], sources: Iterable[str]) -> dict:
    logs = list(logs)
    state = _State()
    for log in logs:
        for line in log.messages:
            _read_message(state, line)
    return _block(state, logs, list(sources))


def read_texts(parts: Iterable[tuple[str, str]]) -> dict:
    """(source, text) pairs, e.g. one NCCL_DEBUG_FILE per rank, or one interleaved stream."""
    parts = list(parts)
    return read_log((read_lines(text, source) for source, text in parts), [s for s, _ in parts])


def said_anything(block: dict) -> bool:
    return bool(block["lines"]["messages"] or block["lines"]["banners"])


def debug_files(path: Path) -> list[Path]:
    """A file, or a directory's NCCL_DEBUG_FILE outputs (*.log, *.txt; its nccl-debug/ too)."""
    if not path.is_dir():
        return [path]
    return sorted(p for folder in (path, path / "nccl-debug") if folder.is_dir()
                  for p in folder.iterdir() if p.is_file() and p.suffix in (".log", ".txt"))


def read_files(paths: Iterable[Path | str]) -> dict:
    parts = []
    for path in (f for p in paths for f in debug_files(Path(p))):
        try:
            parts.append((str(path), path.read_bytes().decode("utf-8", errors="replace")))
        except OSError as error:
            raise UsageError(f"cannot read {path}: {error.strerror or error}") from None
    if not parts:
        raise UsageError("no files to read: give NCCL debug output files, or a directory holding "
                         "*.log files (one per rank with NCCL_DEBUG_FILE)")
    return read_texts(parts)
