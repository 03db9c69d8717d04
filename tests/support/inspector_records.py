"""NCCL Inspector records written as the plugin writes them (NCCL plugins/profiler/inspector:
inspector_json.cc of 2.30 (v4.0, `comm_name` in the header), the 2.28/2.29 writer in
ext-profiler/inspector/inspector.cc (no `comm_name`), verbose output (event_trace_sn/_ts with a
kernel event per channel), v4.2's coll_algo/coll_proto), and the same keys flat at the top level
as NVIDIA's exporter flattens them. Compact JSON, one record per line; doubles with six decimals."""
from __future__ import annotations

import json
from pathlib import Path

from allreduce_bench.core.metrics import busbw_factor
from allreduce_bench.core.results.load import load_results, load_samples

NAMES = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
         "broadcast": "Broadcast", "reduce": "Reduce", "alltoall": "AllToAll"}
PER_RANK = ("all_gather", "reduce_scatter", "alltoall")


def p2p_perf(op: str, sn: int, peer: int, size_bytes: int, time_us: int) -> dict:
    """inspectorCompletedP2p of NCCL 2.30: Send or Recv of `size_bytes` with `peer`."""
    algbw = size_bytes / 1e9 / (time_us / 1e6) if time_us else 0.0
    return {"p2p": op, "p2p_sn": sn, "p2p_peer": peer, "p2p_msg_size_bytes": size_bytes,
            "p2p_exec_time_us": time_us, "p2p_timing_source": "kernel_gpu",
            "p2p_algobw_gbs": round(algbw, 6), "p2p_busbw_gbs": round(algbw, 6)}


def coll_perf(collective: str, sn: int, size_bytes: int, n_ranks: int, time_us: int, verbose: bool = False,
              algo: str | None = None) -> dict:
    """inspectorCompletedColl: the message is one rank's buffer; bandwidths from integer µs as
    inspectorComputeOpBw computes them."""
    msg = size_bytes // n_ranks if collective in PER_RANK else size_bytes
    algbw = size_bytes / 1e9 / (time_us / 1e6) if time_us else 0.0
    perf = {"coll": NAMES[collective]}
    if algo:
        perf.update(coll_algo=algo, coll_proto="SIMPLE")
    perf.update(coll_sn=sn, coll_msg_size_bytes=msg, coll_exec_time_us=time_us, coll_timing_source="kernel_gpu",
                coll_algobw_gbs=round(algbw, 6), coll_busbw_gbs=round(algbw * busbw_factor(n_ranks, collective), 6))
    if verbose:
        channels = [{"channel_id": c, "kernel_start_sn": 3 + c, "kernel_stop_sn": 8 + 2 * c,
                     "kernel_record_sn": 7 + 2 * c} for c in range(2)]
        stamps = [{"channel_id": c, "kernel_start_ts": 1767350401235585 + c, "kernel_stop_ts": 1767350401235849 + c,
                   "kernel_record_ts": 1767350401235849 + c} for c in range(2)]
        perf["event_trace_sn"] = {"coll_start_sn": 1, "coll_stop_sn": 2, "kernel_events": channels}
        perf["event_trace_ts"] = {"coll_start_ts": 1767350401235567, "coll_stop_ts": 1767350401235571,
                                  "kernel_events": stamps}
    return perf


def line(comm: str, rank: int, n_ranks: int, host: str, perf: dict, layout: str = "v4") -> str:
    """One record (coll_perf, or p2p_perf for a Send/Recv): layout v4 (2.30), older (2.28/2.29: no
    comm_name) or flat."""
    header = {"id": comm, "comm_name": f"group {comm[-2:]}", "rank": rank, "n_ranks": n_ranks, "nnodes": 1}
    if layout == "older":
        header.pop("comm_name")
    metadata = {"inspector_output_format_version": "v4.0", "git_rev": "v2.30.7-1-0-g73cf112",
                "rec_mechanism": "nccl_profiler_interface",
                "dump_timestamp_us": 1767350401243567 + perf.get("coll_sn", perf.get("p2p_sn", 0)),
                "hostname": host, "pid": 4000 + rank}
    record = {**header, **metadata, **perf} if layout == "flat" else \
        {"header": header, "metadata": metadata, ("p2p_perf" if "p2p" in perf else "coll_perf"): perf}
    return json.dumps(record, separators=(",", ":"))


def job_from_run(run: Path, folder: Path, slower: float) -> Path:
    """The records a job would write for the calls of a benchmark run's `native` rows: per rank
    and sample one call of that rank's time per call x `slower` (whole µs, as Inspector
    truncates), one communicator per world size, one file per (host, rank) like the plugin's."""
    rows = load_results(run, explain_skips=False)
    rows = rows[(rows["algorithm"] == "native") & rows["collective"].isin(NAMES)
                & ~rows["benchmark"].astype(str).str.endswith("-in-place")]
    samples = load_samples(run)
    files: dict[str, list[str]] = {}
    for (collective, n), group in rows.groupby(["collective", "world_size"]):
        comm, sn = f"0x{abs(hash((collective, n))) % (1 << 56):014x}", 0
        for row in group.sort_values("size_bytes").itertuples():
            mine = samples[(samples["benchmark"] == row.benchmark) & (samples["algorithm"] == "native")
                           & (samples["world_size"] == n) & (samples["size_bytes"] == row.size_bytes)]
            for _, calls in mine.groupby("sample"):
                for call in calls.itertuples():
                    perf = coll_perf(collective, sn, int(row.size_bytes), int(n), int(call.time_us * slower))
                    files.setdefault(f"{call.host}-pid{4000 + call.rank}.log", []).append(
                        line(comm, int(call.rank), int(n), call.host, perf))
                sn += 1
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder
