"""After a run (or an import): its peak busbw as a share of the closest published figure and of
its link limit, and where it falls short the checks that usually explain it, each tied to what
the run recorded (doc/expect.md). Pure: pandas."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.analysis.placement import placement_warnings
from allreduce_bench.core.analysis.tables import label_runs, run_metas
from allreduce_bench.core.units import format_size
from allreduce_bench.expect.catalogue import matching
from allreduce_bench.expect.system import System, link_limit

SHORT_OF_FIGURE = 0.9  # below 90% of the published figure, or
SHORT_OF_LIMIT = 0.7   # below 70% of the link limit: the checks are listed
# NCCL_* variables that change the algorithm, the transport or the channels
STEERING = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
            "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_P2P_LEVEL", "NCCL_TREE_THRESHOLD",
            "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_COLLNET_ENABLE", "NCCL_CROSS_NIC")


def _device(meta: dict) -> str | None:
    gpus = meta.get("gpus") or []
    if gpus and isinstance(gpus[0], dict) and gpus[0].get("name"):
        return str(gpus[0]["name"])
    names = meta.get("device_names") or []
    return str(names[0]) if names else meta.get("device_name")


def _nics(meta: dict, world_size: int) -> tuple[int | None, float | None, str]:
    """NICs per node and one's Gb/s: stated at import, seen in /sys, or counted in NCCL's log."""
    stated = meta.get("system") or {}
    if stated.get("nics_per_node"):
        return stated["nics_per_node"], stated.get("nic_Gbps"), "stated at import"
    per_rank = ((meta.get("peaks") or {}).get(str(world_size)) or {}).get("per_rank") or []
    ports = (per_rank[0].get("nics") or []) if per_rank else []
    if ports:
        return len(ports), min(p["rate_GBps"] for p in ports) * 8, "the run's /sys/class"
    hosts = list(((meta.get("nccl") or {}).get("hosts") or {}).values())
    counts = [h.get("nic_count") for h in hosts if h.get("nic_count")]
    return (max(counts), None, "NCCL's log") if counts else (None, None, "")


def system_of(meta: dict, rows: pd.DataFrame, world_size: int) -> System:
    stated = meta.get("system") or {}
    known = rows["nodes"].dropna() if "nodes" in rows.columns else pd.Series(dtype=float)
    hosts = set(meta.get("hostnames") or [])
    nodes = (stated.get("nodes") or (int(known.max()) if len(known) else None) or meta.get("nodes_seen")
             or (meta.get("nccl") or {}).get("nodes") or (len(hosts) if hosts else None))
    per_rank = ((meta.get("peaks") or {}).get(str(world_size)) or {}).get("per_rank") or []
    nvlink = [(r.get("gpu") or {}).get("nvlink_GBps") for r in per_rank]
    count, rate, said = _nics(meta, world_size)
    return System(_device(meta) or str(meta.get("device") or "?"),
                  world_size // nodes if nodes else world_size, nodes or 0, count, rate,
                  min(float(v or 0) for v in nvlink) if nvlink and all(nvlink) else None,
                  said or "the run's meta.json")


def _peak(rows: pd.DataFrame) -> pd.Series:
    """The row of the highest busbw, NCCL's own algorithm where the run has it."""
    native = rows[rows["algorithm"] == "native"] if "algorithm" in rows.columns else rows
    chosen = native if len(native) else rows
    return chosen.loc[chosen["busbw_GBps"].idxmax()]


def _curve_checks(rows: pd.DataFrame, figure: pd.Series | None) -> list[str]:
    curve = rows.groupby("size_bytes")["busbw_GBps"].max().sort_index()
    found = []
    if len(curve) >= 2 and curve.iloc[-1] > 1.03 * curve.iloc[-2]:
        rise = f": +{100 * (curve.iloc[-1] / curve.iloc[-2] - 1):.0f}% over the size before" if curve.iloc[-2] else ""
        found.append(f"the sweep: busbw still rises at its largest size ({format_size(int(curve.index[-1]))}"
                     f"{rise}); measure larger sizes")
    elif len(curve) >= 2:
        flat = curve[curve >= 0.9 * curve.max()].index[0]
        found.append(f"the sweep: busbw flattens from {format_size(int(flat))} (90% of its peak): a bandwidth "
                     "bound, not a size too small")
    if figure is not None and figure["size_bytes"] == figure["size_bytes"] and curve.index[-1] < figure["size_bytes"]:
        found.append(f"the published figure is at {format_size(int(figure['size_bytes']))}; this run stops at "
                     f"{format_size(int(curve.index[-1]))}")
    return found


def _hosts(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _nccl_checks(meta: dict, system: System, figure: pd.Series | None) -> list[str]:
    block = meta.get("nccl")
    if meta.get("backend") == "gloo":
        return []
    if not block or not block.get("hosts"):
        return ["NCCL's log: none in meta.json (run with --nccl-debug, or import a log with NCCL_DEBUG=INFO "
                "lines), so the transport, GDR, NVLS and NICs per rank are unknown"]
    seen: dict[str, list[str]] = {}  # finding -> the hosts it holds for
    several = system.nodes > 1
    for host, entry in block["hosts"].items():
        transports = entry.get("transports") or {}
        ranks = len(entry.get("ranks") or []) or system.gpus_per_node
        nics = entry.get("nic_count") or 0
        net = [t for t in transports if t.startswith("NET/IB")]
        findings = [
            several and entry.get("network") == "Socket" and "cross nodes over sockets (NET/Socket), not "
            "InfiniBand/RoCE RDMA",
            several and net and not any("GDRDMA" in t for t in net) and "have NET/IB channels without GDRDMA: no "
            "GPUDirect RDMA, the data goes through host memory",
            *(f"have GPU Direct RDMA disabled for HCA {h}" for h in (entry.get("gdr") or {}).get("disabled_for", [])),
            several and nics and system.nics_per_node and nics < system.nics_per_node
            and f"used {nics} NIC(s) of the {system.nics_per_node} a node has",
            several and nics and not system.nics_per_node and nics < ranks and f"have {nics} NIC(s) for {ranks} ranks",
            system.gpus_per_node > 1 and "SHM" in transports and not any(t.startswith("P2P") for t in transports)
            and "move data between their GPUs through host memory (SHM), not P2P/NVLink"]
        for finding in filter(None, findings):
            seen.setdefault(finding, []).append(host)
    found = [f"NCCL's log: {len(h)} of {len(block['hosts'])} host(s) ({_hosts(h)}) {f}" for f, h in seen.items()]
    nvls = any("NVLS" in (e.get("transports") or {}) for e in block["hosts"].values()) or any(
        str(t.get("algorithm", "")).startswith("NVLS") for t in block.get("tuning") or [])
    if figure is not None and "NVLS" in str(figure["setting"]) and not nvls:
        found.append(f"NCCL's log: no NVLS channel or tuning line, where the published figure used NVLS "
                     f"({figure['setting']})")
    for variable, values in (block.get("environment") or {}).items():
        if variable in STEERING:
            found.append(f"NCCL's log: {variable} set by environment to "
                         + "; ".join(f"{v} ({len(h)} host(s))" for v, h in values.items()))
    return found


def _layout_checks(meta: dict, run: str, system: System, figure: pd.Series | None) -> list[str]:
    found = placement_warnings({run: meta})
    if figure is not None and figure["gpus_per_node"] == figure["gpus_per_node"] \
            and system.gpus_per_node != int(figure["gpus_per_node"]):
        found.append(f"meta.json: {system.gpus_per_node} rank(s) per node where the figure has "
                     f"{int(figure['gpus_per_node'])}")
    return found


def _share(measured: float, reference) -> str:
    return f"{100 * measured / reference:.0f}%" if reference == reference and reference else "-"


def verdicts(frame: pd.DataFrame) -> list[dict]:
    """Per run, collective and world size (not a job's, a links run's, N=1): the verdict."""
    if frame.empty or "busbw_GBps" not in frame.columns:
        return []
    frame = label_runs(frame)
    if "benchmark" in frame.columns:
        frame = frame[frame["benchmark"] != "job"]
    if "link" in frame.columns:
        frame = frame[frame["link"].isna() | (frame["link"].astype(str) == "")]
    frame = frame[frame["world_size"] != 1]  # one rank moves nothing: busbw is 0 by definition
    metas = run_metas(frame)
    found = []
    collective = frame["collective"].fillna("all_reduce") if "collective" in frame.columns else "all_reduce"
    for (run, name, world_size), rows in frame.assign(collective=collective).groupby(
            ["run", "collective", "world_size"], sort=False):
        meta, peak = metas.get(run, {}), _peak(rows)
        system = system_of(meta, rows, int(world_size))
        measured = float(peak["busbw_GBps"])
        figures = matching(system.model, system.gpus_per_node, system.nodes, name) if system.nodes else pd.DataFrame()
        itself = (figures["busbw_GBps"] - measured).abs() < 0.005 if len(figures) else pd.Series(dtype=bool)
        others = figures[~itself] if len(figures) else figures  # an imported published log is a row itself
        figure = others.iloc[0] if len(others) else figures.iloc[0] if len(figures) else None
        limit = link_limit(system)
        limit_GBps: float | None
        if limit.GBps is None and "link_peak_GBps" in rows.columns and rows["link_peak_GBps"].notna().any():
            limit_GBps, bound, limit_source = float(rows["link_peak_GBps"].max()), "the run's own link peak", ""
        else:
            limit_GBps, bound, limit_source = limit.GBps, limit.bound, limit.source
        short = ((figure is not None and measured < SHORT_OF_FIGURE * figure["busbw_GBps"])
                 or (limit_GBps is not None and measured < SHORT_OF_LIMIT * limit_GBps))
        checks = (_curve_checks(rows, figure) + _nccl_checks(meta, system, figure)
                  + _layout_checks(meta, run, system, figure)) if short else []
        found.append({"run": run, "collective": name, "world_size": int(world_size), "system": system,
                      "busbw_GBps": measured, "size_bytes": int(peak["size_bytes"]), "figure": figure,
                      "itself": figure is not None and abs(figure["busbw_GBps"] - measured) < 0.005,
                      "limit_GBps": limit_GBps, "bound": bound, "limit_source": limit_source,
                      "short": short, "checks": checks})
    return found


def _figure_text(figure: pd.Series) -> str:
    layout = f"{int(figure['nodes'])} x {int(figure['gpus_per_node'])} {figure['gpu']}" \
        if figure["gpus_per_node"] == figure["gpus_per_node"] else f"{int(figure['nodes'])} node(s) of {figure['gpu']}"
    setting = f", {figure['setting']}" if figure["setting"] else ""
    return (f"{figure['busbw_GBps']:g} GB/s ({figure['kind']}: {layout}, {figure['tool']} "
            f"{figure['collective']}{setting})")


def line(v: dict) -> str:
    published = (f"{_share(v['busbw_GBps'], v['figure']['busbw_GBps'])} of {_figure_text(v['figure'])}, "
                 f"{v['figure']['source']} {v['figure']['date']}" + (" (this very run: the catalogue holds no "
                 "other figure for it)" if v["itself"] else "") if v["figure"] is not None
                 else "no published figure for this device, collective and layout")
    limit = (f"{_share(v['busbw_GBps'], v['limit_GBps'])} of the link limit {v['limit_GBps']:.4g} GB/s "
             f"({v['bound']}{'; ' + v['limit_source'] if v['limit_source'] else ''})"
             if v["limit_GBps"] else f"no link limit ({v['bound']})")
    return (f"{v['run'] + ' ' if v['run'] else ''}{v['collective']} N={v['world_size']} on "
            f"{v['system'].describe()}: peak {v['busbw_GBps']:.4g} GB/s at {format_size(v['size_bytes'])} = "
            f"{published}; {limit}")


def summary_lines(frame: pd.DataFrame) -> list[str]:
    """The terminal's "Is this normal?", with the checks where it falls short."""
    found = []
    for v in verdicts(frame):
        found.append("Is this normal? " + line(v))
        found += [f"  check: {c}" for c in v["checks"]]
    return found


def table(frame: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for v in verdicts(frame):
        figure = v["figure"]
        rows.append({"run": v["run"] or "-", "collective": v["collective"], "N": v["world_size"],
                     "system": v["system"].describe(), "peak busbw (GB/s)": f"{v['busbw_GBps']:.4g}",
                     "at size": format_size(v["size_bytes"]),
                     "published": _figure_text(figure) if figure is not None else "-",
                     "of published": _share(v["busbw_GBps"], figure["busbw_GBps"]) if figure is not None else "-",
                     "source": f"{figure['source']} ({figure['date']})" if figure is not None else "-",
                     "link limit (GB/s)": f"{v['limit_GBps']:.4g}" if v["limit_GBps"] else "-",
                     "of limit": _share(v["busbw_GBps"], v["limit_GBps"]) if v["limit_GBps"] else "-",
                     "bound": v["bound"] + (f" ({v['limit_source']})" if v["limit_source"] else ""),
                     "checks (where it falls short)": "; ".join(v["checks"]) or "-"})
    return pd.DataFrame(rows)
