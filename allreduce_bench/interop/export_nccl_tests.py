"""A run as nccl-tests' `-J FILE` JSON (version 3, as 2.19.6 writes it with `-I 1`), one document
per (collective, algorithm, world size, dtype), each key with nccl-tests' meaning (doc/interop.md)."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from allreduce_bench.core.metrics import COLLECTIVES, IN_PLACE, algbw_GBps, busbw_GBps
from allreduce_bench.interop import nccl_tests_format as fmt
from allreduce_bench.interop import nccl_tests_header as header

# collectives measured in place only: torch's call writes its input tensor
MEASURED_IN_PLACE = ("all_reduce", "broadcast", "reduce")
FILE_KEY = ["source", "run_id", "collective", "algorithm", "world_size", "dtype"]
SAMPLE_KEY = ["source", "run_id", "benchmark", "algorithm", "world_size", "size_bytes"]


def half_of(row) -> str:
    if str(row["benchmark"]).endswith(IN_PLACE) or row["collective"] in MEASURED_IN_PLACE:
        return "in_place"
    return "out_of_place"


def per_rank_times(samples: pd.DataFrame) -> tuple[list[int], list[str], list[list[float]]]:
    """(ranks, their hosts, per rank its time per call in each sample, in sample order)."""
    if samples is None or samples.empty:
        return [], [], []
    table = samples.pivot_table(index="rank", columns="sample", values="time_us", aggfunc="last")
    hosts = samples.groupby("rank")["host"].first() if "host" in samples.columns else {}
    ranks = [int(r) for r in table.index]
    return ranks, [str(hosts.get(r, "") or "") for r in ranks], table.to_numpy(dtype=float).tolist()


def body(row, world_size: int) -> dict:
    """One half's numbers: nccl-tests' `-a 1` time and its bandwidths."""
    time_us = next((float(row[c]) for c in ("time_us_rank_mean", "time_us_mean", "time_us_median")
                    if c in row.index and pd.notna(row[c])), float("nan"))
    wrong = row.get("wrong")
    return {"time": time_us, "alg_bw": algbw_GBps(row["size_bytes"], time_us),
            "bus_bw": busbw_GBps(row["size_bytes"], time_us, world_size, row["collective"]),
            "nwrong": float(wrong) if pd.notna(wrong) else None}


def per_iter(matrix: list[list[float]]) -> dict:
    """`<half>_per_iter`: the summary, `times_us` (max over ranks), the per-rank lists (nProcs > 1)."""
    times = [max(column) for column in zip(*matrix)]
    block = {**fmt.iter_stats(times), "times_us": times}
    if len(matrix) > 1:
        block["per_process_max_times_us"] = matrix
    return block


def result(halves: dict, matrices: dict, collective: str, world_size: int) -> dict:
    """One entry of `results`: a size, both halves (null where not measured)."""
    first = next(iter(halves.values()))
    entry = {"size": int(first["size_bytes"]), "count": int(first["count"]),
             "type": fmt.TYPE_NAMES.get(str(first["dtype"]), str(first["dtype"])),
             "redop": fmt.REDOPS.get(collective, "none"),
             "root": fmt.root_name(0 if collective in fmt.ROOTED else -1)}
    for half in ("out_of_place", "in_place"):
        row = halves.get(half)
        entry[half] = None if row is None else body(row, world_size)
        if row is not None and matrices.get(half):
            entry[f"{half}_per_iter"] = per_iter(matrices[half])
    entry["actual_iterations"] = int(max((r["samples"] for r in halves.values() if pd.notna(r["samples"])),
                                         default=0))
    entry["experiment_name"] = ""
    return entry


def _sample_index(samples: pd.DataFrame) -> dict:
    if samples is None or samples.empty:
        return {}
    return {key: group for key, group in samples.groupby(SAMPLE_KEY, sort=False)}


def _results(rows: pd.DataFrame, samples: dict) -> tuple[list[dict], list[int], list[str]]:
    """`results` in size order, and the ranks (with hosts) whose samples they hold."""
    first = rows.iloc[0]
    found: list[dict] = []
    ranks: list[int] = []
    hosts: list[str] = []
    for _, at_size in rows.groupby("size_bytes", sort=True):
        halves, matrices = {}, {}
        for _, row in at_size.iterrows():
            half = half_of(row)
            halves[half] = row
            measured = samples.get(tuple(row[c] for c in SAMPLE_KEY))
            these, their_hosts, matrices[half] = per_rank_times(measured)
            if len(these) > len(ranks):
                ranks, hosts = these, their_hosts
        found.append(result(halves, matrices, first["collective"], int(first["world_size"])))
    return found, ranks, hosts


def document(rows: pd.DataFrame, samples: dict, meta: dict, file_name: str,
             floor_GBps: float | None = None) -> dict:
    """One file's document, in the writer's key order; `floor_GBps`: NCCL_TESTS_MIN_BW's."""
    first = rows.iloc[0]
    results, ranks, hosts = _results(rows, samples)
    world = int(first["world_size"])
    timed = bool(ranks)
    if not ranks:
        ranks, hosts = list(range(world)), [""] * world
    conf = header.config(rows, meta, header.devices(ranks, hosts, meta), timed)
    bandwidths = [entry[half]["bus_bw"] for entry in results for half in ("out_of_place", "in_place")
                  if entry[half] is not None]
    average = sum(bandwidths) / len(bandwidths)
    wrong = int((pd.to_numeric(rows["wrong"], errors="coerce").fillna(0) > 0).sum())
    started = header.time_text(meta.get("started"), str(rows["timestamp"].min()))
    return {"version": fmt.VERSION, "start_time": started,
            "args": header.args(first["collective"], rows, conf, file_name),
            "env": header.environment(meta, first),
            "nccl_version": header.nccl_code((meta.get("versions") or {}).get("nccl")),
            "config": conf, "results": results,
            "out_of_bounds": {"count": wrong, "okay": wrong == 0},
            "average_bus_bandwidth": {"bandwidth": average, "okay": "unchecked" if floor_GBps is None
                                      else average >= floor_GBps * 0.9},
            "errors": [""],
            "end_time": header.time_text(meta.get("finished"), header.time_text(rows["timestamp"].max()))}


def exportable(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of collectives; not links, ddp, health or a job."""
    benchmark = rows["benchmark"].fillna("allreduce").astype(str).str.removesuffix(IN_PLACE)
    known = benchmark.isin(["allreduce", *COLLECTIVES]) & rows["collective"].isin(COLLECTIVES)
    return rows[known]


OWN = re.compile(r"\.?(.+-)?[a-z_]+_perf-.+-n\d+-.*\.json(\.tmp)?")  # file_name's, and write's temporary


def is_own(path: Path) -> bool:
    """Whether `path` is named as an export's file (`export --force` removes only those)."""
    return bool(OWN.fullmatch(path.name))


def file_name(key: dict, several_runs: bool) -> str:
    name = f"{fmt.program(key['collective'])}-{key['algorithm']}-n{key['world_size']}-{key['dtype']}.json"
    return f"{Path(str(key['source'])).name}-{key['run_id']}-{name}" if several_runs else name


def documents(rows: pd.DataFrame, samples: pd.DataFrame, metas: dict,
              floor_GBps: float | None = None) -> list[tuple[str, dict]]:
    """(file name, document) of every file; `metas`: each run's meta.json by its `source`."""
    rows = exportable(rows).copy()
    rows["dtype"] = rows["dtype"].fillna("").astype(str)
    by_sample = _sample_index(samples)
    several = rows[["source", "run_id"]].drop_duplicates().shape[0] > 1
    found = []
    for values, group in rows.groupby(FILE_KEY, sort=False):
        key = dict(zip(FILE_KEY, values))
        group = group.drop_duplicates(["benchmark", "size_bytes"], keep="last")  # a resumed row
        name = file_name(key, several)
        found.append((name, document(group, by_sample, metas.get(key["source"], {}), name, floor_GBps)))
    return found


def write(out_dir: Path, name: str, document_: dict) -> Path:
    """One file as the writer leaves it (one line, no final newline), renamed into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    tmp = out_dir / f".{name}.tmp"
    tmp.write_text(fmt.encode(document_))
    tmp.replace(path)
    return path


def describe(document_: dict) -> str:
    """'2 sizes, in_place, per-iteration samples of 4 ranks, avg busbw 0.0812 GB/s'."""
    results = document_["results"]
    halves = [h for h in ("out_of_place", "in_place") if any(r[h] is not None for r in results)]
    ranks = max((len(r.get(f"{h}_per_iter", {}).get("per_process_max_times_us", [])) for r in results
                 for h in halves), default=0)
    timed = any(f"{h}_per_iter" in r for r in results for h in halves)
    return (f"{len(results)} sizes, {' + '.join(halves)}"
            + (f", per-iteration samples{f' of {ranks} ranks' if ranks else ''}" if timed else "")
            + f", avg busbw {document_['average_bus_bandwidth']['bandwidth']:g} GB/s")
